/* moat token: a new API token for moat serve, in the form E2B's SDKs
 * accept (e2b_ + 40 lowercase hex: some SDK versions check it before
 * sending anything). Printed, or written to a new 0600 file. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define TOKEN_BYTES 20

static int usage(FILE *f, int rc)
{
	fputs("usage: moat token [--write FILE]\n\n"
	      "Prints a new API token (e2b_ + 40 hex digits) for moat serve's\n"
	      "MOAT_API_TOKEN or --token-file; --write FILE creates FILE (mode 0600)\n"
	      "with it instead (an existing FILE is not replaced).\n", f);
	return rc;
}

int moat_cmd_token(int argc, char **argv)
{
	const char *file = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--write") && i + 1 < argc)
			file = argv[++i];
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return usage(stdout, 0);
		else
			return usage(stderr, 125);
	}
	unsigned char r[TOKEN_BYTES];
	size_t got = 0;
	while (got < sizeof r) {
		ssize_t n = getrandom(r + got, sizeof r - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return moat_cli_fail("getrandom: %s", strerror(errno));
		got += (size_t)n;
	}
	char tok[4 + 2 * TOKEN_BYTES + 2] = "e2b_";
	for (size_t i = 0; i < sizeof r; i++)
		snprintf(tok + 4 + 2 * i, 3, "%02x", r[i]);
	strcat(tok, "\n");
	if (!file) {
		fputs(tok, stdout);
		return fflush(stdout) == 0 ? 0 : 125;
	}
	int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return moat_cli_fail("--write %s: %s", file, strerror(errno));
	size_t len = strlen(tok);
	ssize_t w = write(fd, tok, len);
	if (w != (ssize_t)len || fsync(fd) < 0) {
		int err = w < 0 ? errno : EIO;
		close(fd);
		unlink(file);
		return moat_cli_fail("--write %s: %s", file, strerror(err));
	}
	if (close(fd) < 0)
		return moat_cli_fail("--write %s: %s", file, strerror(errno));
	return 0;
}
