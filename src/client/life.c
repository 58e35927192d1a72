/* moat pause / moat resume: freeze a sandbox's processes and thaw them,
 * or hibernate it (--release) and start it again (docs/API.md "Pause and
 * resume"). */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"

#include "../base/cleanup.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int life(int argc, char **argv, bool pause)
{
	const char *cmd = pause ? "pause" : "resume";
	struct moat_err e = {0};
	optind = 0;
	static const struct option opts[] = {{"release", no_argument, NULL, 'r'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	bool release = false;
	int c;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'r' && pause) {
			release = true;
			continue;
		}
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		if (pause)
			fputs("usage: moat pause [--release] ID...\n\nPause sandboxes: every "
			      "process is frozen (cgroup freezer) until moat resume; their idle\n"
			      "and lifetime clocks stop, and exec or file operations are refused "
			      "meanwhile.\n\n"
			      "      --release   hibernate: stop the processes (their memory is "
			      "released) and\n                  keep the files on disk; resume "
			      "starts it again with the\n                  same id and files "
			      "(its processes restarted)\n", stdout);
		else
			fputs("usage: moat resume ID...\n\nResume paused sandboxes: their processes "
			      "go on where they stopped;\na hibernated one (moat pause --release) "
			      "starts again with its files, and\nits processes must be started "
			      "again (said on stderr).\n", stdout);
		client_help_footer(stdout);
		return 0;
	}
	if (optind >= argc)
		return client_fail(cmd, "no sandbox id given (usage: moat %s ID...)", cmd);
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	int r = 0;
	for (int i = optind; i < argc; i++) {
		_cleanup_free_ char *path = moat_http_sandbox_path(h, argv[i], pause ? "/pause"
										   : "/resume");
		json_t *body = release ? json_pack("{s:b}", "release", 1) : NULL;
		if (!path)
			return client_fail(cmd, "out of memory");
		json_t *out = NULL;
		int rc = moat_http_json(h, "POST", path, NULL, body, &out, &e);
		json_decref(body);
		const char *procs = json_string_value(json_object_get(out, "processes"));
		if (rc == 0 && procs && !strcmp(procs, "restarted"))
			fprintf(stderr, "moat resume: %s: it was hibernated: started again with its "
				"files; its processes did not survive\n", argv[i]);
		json_decref(out);
		if (rc < 0) {
			r = client_fail(cmd, "%s: %s", argv[i], e.msg);
			if (strncmp(e.msg, "cannot reach", 12) == 0)
				break;
		}
	}
	return r;
}

int moat_client_pause(int argc, char **argv)
{
	return life(argc, argv, true);
}

int moat_client_resume(int argc, char **argv)
{
	return life(argc, argv, false);
}
