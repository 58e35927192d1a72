/* moat: command dispatch. */
#define _GNU_SOURCE
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MOAT_VERSION "0.1.0"

int moat_cli_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("moat: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 125;
}

static void usage(FILE *f)
{
	fputs("usage: moat <command> [options]\n"
	      "\n"
	      "commands:\n"
	      "  run [OPTIONS] -- COMMAND [ARG...]   run one command in a sandbox\n"
	      "  doctor                              show which isolation layers this kernel offers\n"
	      "  version                             print the version\n"
	      "\n"
	      "`moat run --help` lists the options of run.\n", f);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 125;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "run") == 0)
		return moat_cmd_run(argc - 1, argv + 1);
	if (strcmp(cmd, "doctor") == 0)
		return moat_cmd_doctor(argc - 1, argv + 1);
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
		printf("moat %s\n", MOAT_VERSION);
		return 0;
	}
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	moat_cli_fail("unknown command '%s' (try moat --help)", cmd);
	return 125;
}
