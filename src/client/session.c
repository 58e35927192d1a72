/* moat session: agents that live in a sandbox, holding only a session
 * token for the control plane (docs/control-plane.md; docs/API.md
 * "Sessions and the control plane"). Each subcommand is one /v1/sessions
 * call; the daemon validates, we only shape the body and print. */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"

#include "../base/cleanup.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char session_help[] =
	"usage: moat session create [--image IMG] [--manifest FILE]\n"
	"           [--llm-route NAME[:MODEL,...]]... [--budget-tokens N]\n"
	"           [--budget-requests N] [--budget-wall S]\n"
	"           [--budget-cpu S] [--env K=V]... [--cwd DIR] [--sdk-env] [--env-fd]\n"
	"           [--metadata K=V]... [--net-allow PAT]... [--json] -- CMD...\n"
	"       moat session ls [--json] [--state STATE]\n"
	"       moat session show ID\n"
	"       moat session rm ID... [--purge]\n"
	"       moat session restart ID [--json]\n"
	"       moat session usage ID\n"
	"       moat session conversation ID\n"
	"       moat session artifacts ID [--json]\n"
	"       moat session artifact-get ID NAME [-o FILE]\n"
	"\n"
	"A session is an agent that lives in a sandbox: CMD runs inside, detached,\n"
	"with only MOAT_SESSION_ID, MOAT_CONTROL_PLANE_URL and MOAT_SESSION_TOKEN.\n"
	"Through the control plane (http://127.0.0.1:7878 inside) it calls the\n"
	"model routes the daemon was given (moat serve --llm-route), keeps its\n"
	"conversation and moves files through one-time URLs; the daemon holds\n"
	"every credential. `moat session <command> --help` tells more.\n";

static char *ses_path(struct moat_http *h, const char *id)
{
	return moat_http_path(h, "sessions", id, "");
}

static char *ses_path_purge(struct moat_http *h, const char *id)
{
	return moat_http_path(h, "sessions", id, "?purge=true");
}

static char *ses_usage_path(struct moat_http *h, const char *id)
{
	return moat_http_path(h, "sessions", id, "/usage");
}

static char *ses_conv_path(struct moat_http *h, const char *id)
{
	return moat_http_path(h, "sessions", id, "/conversation");
}

/* Whole number in [1, max] for opt. */
static int parse_pos(const char *s, long long max, const char *opt, long long *out,
		     struct moat_err *e)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > max)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s '%s': expected a whole number "
				    "from 1 to %lld", opt, s, max);
	*out = v;
	return 0;
}

/* ---- create --------------------------------------------------------------- */

enum {
	OPT_IMAGE = 256, OPT_MANIFEST, OPT_ROUTE, OPT_BTOKENS, OPT_BREQ, OPT_BWALL, OPT_BCPU, OPT_ENV,
	OPT_CWD, OPT_SDKENV, OPT_ENVFD, OPT_META, OPT_NET, OPT_JSON,
};

static const struct option create_opts[] = {
	{"image", required_argument, NULL, OPT_IMAGE},
	{"manifest", required_argument, NULL, OPT_MANIFEST},
	{"llm-route", required_argument, NULL, OPT_ROUTE},
	{"budget-tokens", required_argument, NULL, OPT_BTOKENS},
	{"budget-requests", required_argument, NULL, OPT_BREQ},
	{"budget-wall", required_argument, NULL, OPT_BWALL},
	{"budget-cpu", required_argument, NULL, OPT_BCPU},
	{"env", required_argument, NULL, OPT_ENV},
	{"cwd", required_argument, NULL, OPT_CWD},
	{"sdk-env", no_argument, NULL, OPT_SDKENV},
	{"env-fd", no_argument, NULL, OPT_ENVFD},
	{"metadata", required_argument, NULL, OPT_META},
	{"net-allow", required_argument, NULL, OPT_NET},
	{"json", no_argument, NULL, OPT_JSON},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static const char create_help[] =
	"usage: moat session create [OPTIONS] -- CMD [ARG...]\n"
	"\n"
	"Create a session: a sandbox with CMD (the agent) started in it, and\n"
	"print the session's id. The agent gets MOAT_SESSION_ID,\n"
	"MOAT_CONTROL_PLANE_URL and MOAT_SESSION_TOKEN, nothing secret.\n"
	"\n"
	"      --image IMG            \"host\" (default), a root filesystem or a store image\n"
	"      --manifest FILE        the workspace manifest (JSON; - reads stdin), as\n"
	"                             moat create's: how the agent's files get in\n"
	"      --llm-route NAME[:MODEL,...]  a route of moat serve --llm-route the\n"
	"                             agent may call, and the models it may ask for\n"
	"                             (none: any); repeatable\n"
	"      --budget-tokens N      model tokens (in + out) at most\n"
	"      --budget-requests N    model calls at most\n"
	"      --budget-wall S        seconds from creation at most\n"
	"      --budget-cpu S         CPU seconds of its sandboxes at most\n"
	"      --env K=V              the agent's environment (repeatable; a bare K\n"
	"                             passes the caller's value)\n"
	"      --cwd DIR              the agent's working directory\n"
	"      --sdk-env              also set OPENAI_BASE_URL/OPENAI_API_KEY and\n"
	"                             ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY to the proxy\n"
	"      --env-fd               hand the variables in on the agent's stdin\n"
	"                             (NAME=VALUE lines) instead of its environment\n"
	"      --metadata K=V         label the session (repeatable)\n"
	"      --net-allow PAT        a host the sandbox may reach through the\n"
	"                             egress gateway (repeatable)\n"
	"      --json                 print the session object, not only its id\n";

/* The json object at obj[key], made when missing; NULL on OOM. */
static json_t *child(json_t *obj, const char *key, bool array)
{
	json_t *c = json_object_get(obj, key);
	if (c)
		return c;
	c = array ? json_array() : json_object();
	if (!c || json_object_set_new(obj, key, c) != 0)
		return NULL;
	return c;
}

/* "NAME" or "NAME:M1,M2" into routes[]. */
static int add_route(json_t *routes, const char *arg, struct moat_err *e)
{
	const char *colon = strchr(arg, ':');
	if (colon == arg || !*arg)
		return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route '%s': empty route name", arg);
	if (!colon) {
		json_t *s = json_string(arg);
		if (!s || json_array_append_new(routes, s) != 0)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route '%s': not valid UTF-8",
					    arg);
		return 0;
	}
	_cleanup_json_ json_t *r = json_object();
	json_t *models = json_array(), *name = json_stringn(arg, (size_t)(colon - arg));
	if (!r || json_object_set_new(r, "models", models) != 0 || !models ||
	    json_object_set_new(r, "route", name) != 0 || !name)
		return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route '%s': not valid UTF-8", arg);
	for (const char *p = colon + 1;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		if (n == 0)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route '%s': an empty model "
					    "name (expected NAME:MODEL[,MODEL...])", arg);
		json_t *m = json_stringn(p, n);
		if (!m || json_array_append_new(models, m) != 0)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route '%s': not valid UTF-8",
					    arg);
		if (!comma)
			break;
		p = comma + 1;
	}
	if (json_array_append(routes, r) != 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--llm-route");
	return 0;
}

static int create_opt(json_t *body, int opt, const char *arg, struct moat_err *e)
{
	json_t *agent = child(body, "agent", false), *obj = NULL, *val = NULL;
	const char *key = NULL, *name = NULL;
	long long v = 0;
	if (!agent)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "create");
	switch (opt) {
	case OPT_IMAGE:
		obj = body, key = "image", name = "--image";
		val = json_string(arg);
		break;
	case OPT_MANIFEST: {
		json_error_t jerr;
		val = !strcmp(arg, "-") ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr)
					: json_load_file(arg, JSON_REJECT_DUPLICATES, &jerr);
		if (!val)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--manifest %s: line %d: %s", arg,
					    jerr.line, jerr.text);
		if (!json_is_object(val)) {
			json_decref(val);
			return moat_err_set(e, MOAT_E_USAGE, 0, "--manifest %s: not a JSON object",
					    arg);
		}
		obj = body, key = "manifest", name = "--manifest";
		break;
	}
	case OPT_ROUTE: {
		json_t *llm = child(body, "llm", false);
		json_t *routes = llm ? child(llm, "routes", true) : NULL;
		if (!routes)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--llm-route");
		return add_route(routes, arg, e);
	}
	case OPT_BTOKENS:
	case OPT_BREQ:
	case OPT_BWALL:
	case OPT_BCPU:
		name = opt == OPT_BTOKENS ? "--budget-tokens" : opt == OPT_BREQ ?
		       "--budget-requests" : opt == OPT_BWALL ? "--budget-wall" : "--budget-cpu";
		key = opt == OPT_BTOKENS ? "tokens" : opt == OPT_BREQ ? "requests" :
		      opt == OPT_BWALL ? "wall_s" : "cpu_s";
		if (parse_pos(arg, INT64_MAX, name, &v, e) < 0)
			return -1;
		if (!(obj = child(body, "budget", false)))
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", name);
		val = json_integer(v);
		break;
	case OPT_ENV: {
		json_t *env = child(agent, "env", false);
		if (!env)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--env");
		return client_add_kv(env, arg, "--env", 1, e);
	}
	case OPT_META: {
		json_t *meta = child(body, "metadata", false);
		if (!meta)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--metadata");
		return client_add_kv(meta, arg, "--metadata", 0, e);
	}
	case OPT_CWD:
		obj = agent, key = "cwd", name = "--cwd";
		val = json_string(arg);
		break;
	case OPT_SDKENV:
	case OPT_ENVFD:
		obj = agent, key = opt == OPT_SDKENV ? "sdk_env" : "env_fd";
		name = opt == OPT_SDKENV ? "--sdk-env" : "--env-fd";
		val = json_true();
		break;
	case OPT_NET: {
		json_t *net = child(body, "network", false);
		json_t *allow = net ? child(net, "allow", true) : NULL;
		json_t *s = json_string(arg);
		if (!allow || !s || json_array_append_new(allow, s) != 0)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--net-allow '%s': not valid UTF-8",
					    arg);
		return 0;
	}
	default:
		return 0;
	}
	/* json_string() is NULL for text that is not UTF-8 */
	if (!val || json_object_set_new(obj, key, val) != 0)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s '%s': not valid UTF-8", name, arg);
	return 0;
}

static int ses_create(int argc, char **argv)
{
	const char *cmd = "session create";
	struct moat_err e = {0};
	_cleanup_json_ json_t *body = json_object();
	bool as_json = false;
	if (!body)
		return client_fail(cmd, "out of memory");
	optind = 0;
	int c, idx = 0;
	/* "+": the agent's command ends moat's options, with or without "--" */
	while ((c = getopt_long(argc, argv, "+:h", create_opts, &idx)) != -1) {
		if (c == 'h') {
			fputs(create_help, stdout);
			client_help_footer(stdout);
			return 0;
		}
		if (c == '?' || c == ':')
			return client_bad_option(cmd, c, argv);
		if (c == OPT_JSON)
			as_json = true;
		else if (create_opt(body, c, optarg, &e) < 0)
			return client_fail_err(cmd, &e);
	}
	if (optind >= argc)
		return client_fail(cmd, "no agent command (usage: moat session create [OPTIONS] "
				   "-- CMD...)");
	json_t *agent = child(body, "agent", false);
	json_t *argvj = agent ? child(agent, "cmd", true) : NULL;
	if (!argvj)
		return client_fail(cmd, "out of memory");
	for (int i = optind; i < argc; i++) {
		json_t *s = json_string(argv[i]);
		if (!s || json_array_append_new(argvj, s) != 0)
			return client_fail(cmd, "'%s': not valid UTF-8", argv[i]);
	}

	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	_cleanup_json_ json_t *ans = NULL;
	if (!h || moat_http_json(h, "POST", "/v1/sessions", NULL, body, &ans, &e) < 0)
		return client_fail_err(cmd, &e);
	if (as_json)
		return client_print_json(cmd, ans);
	return client_print_id(cmd, h, ans, "id", "session id");
}

/* ---- ls ------------------------------------------------------------------- */

static long long num_of(json_t *o, const char *obj, const char *key)
{
	return json_integer_value(json_object_get(json_object_get(o, obj), key));
}

static int print_sessions(json_t *list)
{
	int wid = 2, wsb = 7;
	size_t i;
	json_t *s;
	json_array_foreach(list, i, s) {
		int a = (int)strlen(client_str_or(s, "id", "?"));
		int b = (int)strlen(client_str_or(s, "sandbox_id", "-"));
		wid = a > wid ? a : wid;
		wsb = b > wsb ? b : wsb;
	}
	if (printf("%-*s  %-8s  %-*s  %9s  %8s  %8s  %s\n", wid, "ID", "STATE", wsb, "SANDBOX",
		   "TOKENS", "REQUESTS", "RESTARTS", "CREATED") < 0)
		return -1;
	json_array_foreach(list, i, s) {
		long long tokens = num_of(s, "usage", "tokens_in") + num_of(s, "usage", "tokens_out");
		if (printf("%-*s  %-8s  %-*s  %9lld  %8lld  %8lld  %s\n", wid,
			   client_str_or(s, "id", "?"), client_str_or(s, "state", "?"), wsb,
			   client_str_or(s, "sandbox_id", "-"), tokens,
			   num_of(s, "usage", "requests"),
			   (long long)json_integer_value(json_object_get(s, "restarts")),
			   client_str_or(s, "created_at", "?")) < 0)
			return -1;
	}
	return 0;
}

static int ses_ls(int argc, char **argv)
{
	const char *cmd = "session ls";
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
					     {"state", required_argument, NULL, 's'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[3] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat session ls [--json] [--state STATE]\n\n"
			     "List the sessions of moat serve.\n\n"
			     "      --json          print the server's JSON answer\n"
			     "      --state STATE   only sessions in STATE: running, exited or ended\n",
			     opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind < argc)
		return client_fail(cmd, "unexpected argument '%s'", argv[optind]);
	const char *const query[] = {"state", vals[1], NULL};
	return client_list(cmd, "/v1/sessions", vals[1] ? query : NULL, "sessions",
			   vals[0] != NULL, print_sessions);
}

/* ---- show / usage / conversation (JSON) ------------------------------------ */

static int ses_get(int argc, char **argv, const char *cmd, const char *help,
		   char *(*path)(struct moat_http *h, const char *id))
{
	int r = client_parse(argc, argv, cmd, help, client_help_only, NULL);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one session id (see moat %s --help)", cmd);
	return client_show(cmd, argv[optind], path);
}

/* ---- rm ------------------------------------------------------------------- */

static int ses_rm(int argc, char **argv)
{
	const char *cmd = "session rm";
	static const struct option opts[] = {{"purge", no_argument, NULL, 'p'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat session rm ID... [--purge]\n\n"
			     "End sessions: their sandboxes are deleted and their tokens revoked;\n"
			     "the record, conversation and artifacts stay (moat session show).\n\n"
			     "      --purge   remove the conversation and the artifacts too\n",
			     opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind >= argc)
		return client_fail(cmd, "no session given (usage: moat session rm ID...)");
	return client_delete_each(cmd, argv + optind, argc - optind,
				  vals[0] ? ses_path_purge : ses_path);
}

/* ---- restart -------------------------------------------------------------- */

static int ses_restart(int argc, char **argv)
{
	const char *cmd = "session restart";
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat session restart ID [--json]\n\n"
			     "Give the session a fresh sandbox (the old one is deleted) with its\n"
			     "agent started again and a new token; the conversation, usage and\n"
			     "artifacts carry on. Prints the new sandbox's id.\n\n"
			     "      --json   print the session object instead\n", opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one session id (usage: moat session restart ID)");
	const char *id = argv[optind];
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *path = moat_http_path(h, "sessions", id, "/restart");
	_cleanup_json_ json_t *ans = NULL;
	if (!path)
		return client_fail(cmd, "out of memory");
	if (moat_http_json(h, "POST", path, NULL, NULL, &ans, &e) < 0)
		return client_fail(cmd, "%s: %s", id, e.msg);
	if (vals[0])
		return client_print_json(cmd, ans);
	return client_print_id(cmd, h, ans, "sandbox_id", "sandbox id");
}

/* ---- artifacts / artifact-get --------------------------------------------- */

static int print_artifacts(json_t *list)
{
	int wname = 4;
	size_t i;
	json_t *a;
	json_array_foreach(list, i, a) {
		int n = (int)strlen(client_str_or(a, "name", "?"));
		wname = n > wname ? n : wname;
	}
	if (printf("%-*s  %12s  %s\n", wname, "NAME", "SIZE", "SHA256") < 0)
		return -1;
	json_array_foreach(list, i, a)
		if (printf("%-*s  %12lld  %s\n", wname, client_str_or(a, "name", "?"),
			   (long long)json_integer_value(json_object_get(a, "size")),
			   client_str_or(a, "sha256", "-")) < 0)
			return -1;
	return 0;
}

static int ses_artifacts(int argc, char **argv)
{
	const char *cmd = "session artifacts";
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat session artifacts ID [--json]\n\n"
			     "List the files the session's agent uploaded (one-time URLs).\n\n"
			     "      --json   print the server's JSON answer\n", opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one session id (usage: moat session artifacts ID)");
	struct moat_err e = {0};
	_cleanup_free_ char *path = NULL;
	{
		_cleanup_http_ struct moat_http *h = moat_http_new(&e);
		if (!h)
			return client_fail_err(cmd, &e);
		if (!(path = moat_http_path(h, "sessions", argv[optind], "/artifacts")))
			return client_fail(cmd, "out of memory");
	}
	return client_list(cmd, path, NULL, "artifacts", vals[0] != NULL, print_artifacts);
}

static int ses_artifact_get(int argc, char **argv)
{
	const char *cmd = "session artifact-get";
	static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *vals[2] = {0};
	int r = client_parse(argc, argv, cmd, "usage: moat session artifact-get ID NAME [-o FILE]\n\n"
			     "Write one of the session's artifacts to FILE (made whole or not at\n"
			     "all), or to stdout.\n\n"
			     "  -o, --output FILE   where (default and -: stdout)\n", opts, vals);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 2 != argc)
		return client_fail(cmd, "expected a session id and an artifact name (usage: moat "
				   "session artifact-get ID NAME [-o FILE])");
	const char *id = argv[optind], *name = argv[optind + 1];
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *ename = moat_http_escape(h, name);
	_cleanup_free_ char *sfx = NULL, *path = NULL, *what = NULL;
	if (!ename || asprintf(&sfx, "/artifacts/%s", ename) < 0 ||
	    !(path = moat_http_path(h, "sessions", id, sfx)) ||
	    asprintf(&what, "%s %s", id, name) < 0)
		return client_fail(cmd, "out of memory");
	/* any type: an artifact is whatever bytes the agent uploaded, maybe none */
	return client_download(cmd, h, path, "*/*", vals[0] ? vals[0] : "-", true, what);
}

/* ---- dispatch ------------------------------------------------------------- */

int moat_client_session(int argc, char **argv)
{
	const char *sub = argc >= 2 ? argv[1] : NULL;
	if (!sub)
		return client_fail("session", "expected a command (see moat session --help)");
	if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
		fputs(session_help, stdout);
		client_help_footer(stdout);
		return 0;
	}
	argc--, argv++;
	if (!strcmp(sub, "create"))
		return ses_create(argc, argv);
	if (!strcmp(sub, "ls"))
		return ses_ls(argc, argv);
	if (!strcmp(sub, "show"))
		return ses_get(argc, argv, "session show", "usage: moat session show ID\n\n"
			       "Print a session as JSON: state, agent, usage, budget and what is\n"
			       "left of it.\n", ses_path);
	if (!strcmp(sub, "usage"))
		return ses_get(argc, argv, "session usage", "usage: moat session usage ID\n\n"
			       "Print a session's usage, budget and budget left (JSON).\n",
			       ses_usage_path);
	if (!strcmp(sub, "conversation"))
		return ses_get(argc, argv, "session conversation",
			       "usage: moat session conversation ID\n\n"
			       "Print the conversation the control plane keeps for the session\n"
			       "(JSON: its messages in order and the number of turns).\n",
			       ses_conv_path);
	if (!strcmp(sub, "rm"))
		return ses_rm(argc, argv);
	if (!strcmp(sub, "restart"))
		return ses_restart(argc, argv);
	if (!strcmp(sub, "artifacts"))
		return ses_artifacts(argc, argv);
	if (!strcmp(sub, "artifact-get"))
		return ses_artifact_get(argc, argv);
	return client_fail("session", "unknown command '%s' (see moat session --help)", sub);
}
