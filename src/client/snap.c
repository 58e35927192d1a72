/* moat snapshot / fork / restore: a sandbox's filesystem saved, copied
 * and put back (docs/API.md "Snapshots"). */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"
#include "image.h"

#include "../base/cleanup.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *snap_path(struct moat_http *h, const char *ref)
{
	return moat_http_path(h, "snapshots", ref, "");
}

/* ---- moat snapshot SANDBOX [--name N] ------------------------------------- */

/* ---- moat snapshot export SID -o FILE ------------------------------------ */

static int snap_export(int argc, char **argv)
{
	const char *cmd = "snapshot export";
	static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat snapshot export ID|NAME -o FILE\n\n"
			     "Write a snapshot as an OCI archive (its image's layers and the\n"
			     "snapshot's changes as one more layer) to FILE, made whole or not at\n"
			     "all; `moat image import FILE` on another host brings it back.\n\n"
			     "  -o, --output FILE   where (- for stdout)\n", opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc || !vals[0] || !*vals[0])
		return client_fail(cmd, "expected a snapshot and -o FILE (usage: moat snapshot "
				   "export ID -o FILE)");
	const char *ref = argv[optind];
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *path = moat_http_path(h, "snapshots", ref, "/export");
	if (!path)
		return client_fail(cmd, "out of memory");
	return client_download(cmd, h, path, "application/x-tar", vals[0], false, ref);
}

static const char snapshot_help[] =
	"usage: moat snapshot ID [--name NAME]   snapshot sandbox ID, print the snapshot's id\n"
	"       moat snapshot ls [--json]        list the snapshots\n"
	"       moat snapshot inspect ID|NAME    one snapshot (JSON)\n"
	"       moat snapshot rm ID|NAME...      remove snapshots\n"
	"       moat snapshot export ID -o FILE  write it as an OCI archive (moat image\n"
	"                                        import FILE on another host)\n"
	"\n"
	"A snapshot freezes a sandbox's files (its workspace and, for an image\n"
	"sandbox, the changes to the image's root); the sandbox keeps running.\n"
	"A create whose image is snapshot:SID (or the snapshot's name) starts a sandbox\n"
	"from one; moat restore puts one back; moat fork copies a sandbox now.\n"
	"Processes are not part of a snapshot.\n"
	"\n"
	"      --name NAME   a unique name to refer to the snapshot by\n";


static int snap_take(int argc, char **argv)
{
	const char *cmd = "snapshot";
	static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, snapshot_help, opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one sandbox id (usage: moat snapshot ID "
				   "[--name NAME])");
	_cleanup_json_ json_t *body = json_object();
	if (!body || (vals[0] && json_object_set_new(body, "name", json_string(vals[0]))))
		return client_fail(cmd, "--name '%s': not valid UTF-8", vals[0]);
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *path = moat_http_sandbox_path(h, argv[optind], "/snapshots");
	_cleanup_json_ json_t *ans = NULL;
	if (!path)
		return client_fail(cmd, "out of memory");
	if (moat_http_json(h, "POST", path, NULL, body, &ans, &e) < 0)
		return client_fail(cmd, "%s: %s", argv[optind], e.msg);
	return client_print_id(cmd, h, ans, "id", "snapshot id");
}

/* ---- moat snapshot ls [--json] -------------------------------------------- */

static int print_snaps(json_t *list)
{
	int wid = 2, wname = 4, wsb = 7;
	size_t i;
	json_t *s;
	json_array_foreach(list, i, s) {
		int a = (int)strlen(client_str_or(s, "id", "?")), b = (int)strlen(client_str_or(s, "name", "-")),
		    c = (int)strlen(client_str_or(s, "sandbox_id", "-"));
		wid = a > wid ? a : wid;
		wname = b > wname ? b : wname;
		wsb = c > wsb ? c : wsb;
	}
	if (printf("%-*s  %-*s  %-*s  %-9s  %-7s  %s\n", wid, "ID", wname, "NAME", wsb,
		   "SANDBOX", "SIZE", "BACKEND", "CREATED") < 0)
		return -1;
	json_array_foreach(list, i, s) {
		char size[32];
		json_t *sz = json_object_get(s, "size");
		if (json_is_integer(sz)) /* null: a btrfs snapshot still being measured */
			image_size_text(json_integer_value(sz), size, sizeof size);
		else
			snprintf(size, sizeof size, "measuring");
		if (printf("%-*s  %-*s  %-*s  %-9s  %-7s  %s\n", wid, client_str_or(s, "id", "?"), wname,
			   client_str_or(s, "name", "-"), wsb, client_str_or(s, "sandbox_id", "-"), size,
			   client_str_or(s, "backend", "?"), client_str_or(s, "created_at", "?")) < 0)
			return -1;
	}
	return 0;
}

static int snap_ls(int argc, char **argv)
{
	const char *cmd = "snapshot ls";
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat snapshot ls [--json]\n\n"
			     "List the snapshots of moat serve.\n\n"
			     "      --json   print the server's JSON answer\n", opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind < argc)
		return client_fail(cmd, "unexpected argument '%s'", argv[optind]);
	return client_list(cmd, "/v1/snapshots", NULL, "snapshots", vals[0] != NULL, print_snaps);
}

/* ---- moat snapshot rm / inspect ------------------------------------------- */

static int snap_rm(int argc, char **argv)
{
	const char *cmd = "snapshot rm";
	int r = client_parse(argc, argv, cmd, "usage: moat snapshot rm ID|NAME...\n\n"
			     "Remove snapshots (sandboxes made from them keep their files).\n",
			     client_help_only, NULL);
	if (r)
		return r == 1 ? 0 : r;
	if (optind >= argc)
		return client_fail(cmd, "no snapshot given (usage: moat snapshot rm ID...)");
	return client_delete_each(cmd, argv + optind, argc - optind, snap_path);
}

static int snap_inspect(int argc, char **argv)
{
	const char *cmd = "snapshot inspect";
	int r = client_parse(argc, argv, cmd, "usage: moat snapshot inspect ID|NAME\n\n"
			     "Print a snapshot as JSON.\n", client_help_only, NULL);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one snapshot (usage: moat snapshot inspect ID)");
	return client_show(cmd, argv[optind], snap_path);
}

int moat_client_snapshot(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "ls"))
		return snap_ls(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "rm"))
		return snap_rm(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "inspect"))
		return snap_inspect(argc - 1, argv + 1);
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
			  !strcmp(argv[1], "help"))) {
		fputs(snapshot_help, stdout);
		client_help_footer(stdout);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "export"))
		return snap_export(argc - 1, argv + 1);
	return snap_take(argc, argv);
}

/* ---- moat fork SANDBOX [--count N] ---------------------------------------- */

int moat_client_fork(int argc, char **argv)
{
	const char *cmd = "fork";
	static const struct option opts[] = {{"count", required_argument, NULL, 'c'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat fork ID [--count N]\n\n"
			     "Make N new sandboxes (default 1, at most 32, all or none) whose files\n"
			     "start as copies of sandbox ID's now, and print their ids, one a line.\n"
			     "Processes are not copied: the new sandboxes start with none.\n\n"
			     "      --count N   how many\n", opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one sandbox id (usage: moat fork ID [--count N])");
	long long count = 1;
	if (vals[0]) {
		char *end;
		errno = 0;
		count = strtoll(vals[0], &end, 10);
		if (errno || end == vals[0] || *end || count < 1 || count > 32)
			return client_fail(cmd, "--count '%s': expected a whole number from 1 to 32",
					   vals[0]);
	}
	_cleanup_json_ json_t *body = json_pack("{s:I}", "count", (json_int_t)count);
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *path = moat_http_sandbox_path(h, argv[optind], "/fork");
	_cleanup_json_ json_t *ans = NULL;
	if (!path || !body)
		return client_fail(cmd, "out of memory");
	if (moat_http_json(h, "POST", path, NULL, body, &ans, &e) < 0)
		return client_fail(cmd, "%s: %s", argv[optind], e.msg);
	json_t *list = json_object_get(ans, "sandboxes"), *sb;
	size_t i;
	if (!json_is_array(list))
		return client_fail(cmd, "the answer from %s has no sandbox list", moat_http_url(h));
	json_array_foreach(list, i, sb)
		if (printf("%s\n", client_str_or(sb, "id", "?")) < 0)
			return client_fail(cmd, "write: %s", strerror(errno));
	if (fflush(stdout) != 0)
		return client_fail(cmd, "write: %s", strerror(errno));
	return 0;
}

/* ---- moat restore SANDBOX SNAPSHOT ---------------------------------------- */

int moat_client_restore(int argc, char **argv)
{
	const char *cmd = "restore";
	int r = client_parse(argc, argv, cmd, "usage: moat restore ID SNAPSHOT\n\n"
			     "Replace sandbox ID's files with those of SNAPSHOT (an id or a name).\n"
			     "Its processes are restarted: what ran is stopped.\n", client_help_only, NULL);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 2 != argc)
		return client_fail(cmd, "expected a sandbox id and a snapshot (usage: moat restore "
				   "ID SNAPSHOT)");
	_cleanup_json_ json_t *body = json_pack("{s:s}", "snapshot", argv[optind + 1]);
	if (!body)
		return client_fail(cmd, "'%s': not valid UTF-8", argv[optind + 1]);
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *path = moat_http_sandbox_path(h, argv[optind], "/restore");
	if (!path)
		return client_fail(cmd, "out of memory");
	if (moat_http_json(h, "POST", path, NULL, body, NULL, &e) < 0)
		return client_fail(cmd, "%s: %s", argv[optind], e.msg);
	return 0;
}
