/* moat: command dispatch. */
#define _GNU_SOURCE
#include "cli.h"
#include "../base/exe.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* The daemon and the API client are separate binaries beside this one, or
 * in ../libexec/moat once installed (so that `moat run` does not load
 * their libraries): exec them. */
static int exec_sibling(const char *name, char **argv)
{
	char path[PATH_MAX];
	struct moat_err e = {0};
	if (moat_exe_find(name, path, sizeof path, &e) < 0)
		return moat_cli_fail("%s", e.msg);
	argv[0] = "moat";
	execv(path, argv);
	return moat_cli_fail("cannot run %s: %s", path, strerror(errno));
}

static void usage(FILE *f)
{
	fputs("usage: moat <command> [options]\n"
	      "\n"
	      "commands:\n"
	      "  run [OPTIONS] -- COMMAND [ARG...]   run one command in a sandbox\n"
	      "  doctor                              show which isolation layers this kernel offers\n"
	      "  serve [--listen ADDR:PORT] [--data DIR]  long-lived sandboxes over an HTTP API\n"
	      "  token [--write FILE]                a new API token for serve (e2b_ + 40 hex)\n"
	      "  create | ls | exec | attach | cp | patch | rm | ps | kill   API client (moat <cmd> --help)\n"
	      "  pause | resume | snapshot | fork | restore   freeze, save, copy a sandbox\n"
	      "  image pull|import|ls|inspect|rm    the image store of moat serve\n"
	      "  session create|ls|show|rm|restart|usage|...   agents in a sandbox (control plane)\n"
	      "  mcp                                 MCP over stdio, for MCP hosts (docs/mcp.md)\n"
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
	if (strcmp(cmd, "token") == 0)
		return moat_cmd_token(argc - 1, argv + 1);
	if (strcmp(cmd, "serve") == 0)
		return exec_sibling("moat-serve", argv);
	static const char *const client[] = {"create", "ls", "exec", "attach", "cp",
					     "patch", "rm", "ps", "kill", "mcp", "pause",
					     "resume", "image", "snapshot", "fork", "restore",
					     "session", NULL};
	for (size_t i = 0; client[i]; i++)
		if (strcmp(cmd, client[i]) == 0)
			return exec_sibling("moat-client", argv);
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
