/* moat-client: dispatch of the API subcommands (`moat` execs us with
 * argv[0] = "moat", argv[1] = the subcommand). */
#include "client.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{"create", moat_client_create, "create a sandbox, print its id"},
	{"ls", moat_client_ls, "list sandboxes"},
	{"exec", moat_client_exec, "run a command in a sandbox"},
	{"attach", moat_client_attach, "attach this terminal to a sandbox process"},
	{"cp", moat_client_cp, "copy a file into or out of a sandbox"},
	{"patch", moat_client_patch, "apply a patch (apply_patch format or a unified diff) in a sandbox"},
	{"ps", moat_client_ps, "list a sandbox's processes"},
	{"kill", moat_client_kill, "signal a sandbox process"},
	{"rm", moat_client_rm, "remove sandboxes"},
	{"pause", moat_client_pause, "pause sandboxes (freeze their processes)"},
	{"resume", moat_client_resume, "resume paused sandboxes"},
	{"image", moat_client_image, "pull, import, list, inspect and remove images"},
	{"snapshot", moat_client_snapshot, "snapshot a sandbox's filesystem; list, remove them"},
	{"fork", moat_client_fork, "new sandboxes whose files are copies of one's now"},
	{"restore", moat_client_restore, "put a sandbox's files back as a snapshot had them"},
	{"session", moat_client_session, "agents that live in a sandbox (the control plane)"},
	{"mcp", moat_client_mcp, "serve MCP over stdio (a relay to moat serve's /mcp)"},
};

static void usage(FILE *f)
{
	fputs("usage: moat <command> [options]\n\ncommands of moat serve's API:\n", f);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fputs("\n`moat <command> --help` lists a command's options.\n", f);
	client_help_footer(f);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return CLIENT_FAIL;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(cmd, commands[i].name) == 0)
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "moat: unknown command '%s' (try moat --help)\n", cmd);
	return CLIENT_FAIL;
}
