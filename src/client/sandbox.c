/* moat create / ls / rm: the sandbox collection. */
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

/* Whole number in [min, max]; the option is named in the error. */
static int parse_int(const char *s, long long min, long long max, const char *opt,
		     long long *out, struct moat_err *e)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s '%s': expected a whole number "
				    "from %lld to %lld", opt, s, min, max);
	*out = v;
	return 0;
}

/* ---- create ---------------------------------------------------------- */

enum {
	OPT_MANIFEST = 256, OPT_IMAGE, OPT_MEMORY, OPT_PIDS, OPT_CPUS, OPT_DISK,
	OPT_ENV, OPT_METADATA, OPT_TIMEOUT, OPT_IDLE, OPT_QUOTA,
};

static const struct option create_opts[] = {
	{"manifest", required_argument, NULL, OPT_MANIFEST},
	{"image", required_argument, NULL, OPT_IMAGE},
	{"memory", required_argument, NULL, OPT_MEMORY},
	{"pids", required_argument, NULL, OPT_PIDS},
	{"cpus", required_argument, NULL, OPT_CPUS},
	{"disk", required_argument, NULL, OPT_DISK},
	{"env", required_argument, NULL, OPT_ENV},
	{"metadata", required_argument, NULL, OPT_METADATA},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"idle-timeout", required_argument, NULL, OPT_IDLE},
	{"quota", required_argument, NULL, OPT_QUOTA},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void create_usage(FILE *f)
{
	fputs("usage: moat create [OPTIONS]\n"
	      "\n"
	      "Create a sandbox on moat serve and print its id.\n"
	      "\n"
	      "      --manifest FILE      workspace manifest (JSON; - reads stdin)\n"
	      "      --image IMG          \"host\" (default) or a root filesystem directory\n"
	      "      --memory SIZE        memory limit, e.g. 512M, 2G\n"
	      "      --pids N             at most N processes and threads\n"
	      "      --cpus N             CPU time, in CPUs (fractions allowed)\n"
	      "      --disk SIZE          size of the workspace\n"
	      "      --env NAME[=VALUE]   environment of every exec; a bare NAME passes\n"
	      "                           the caller's value (repeatable)\n"
	      "      --metadata KEY=VALUE label the sandbox (repeatable)\n"
	      "      --timeout SECONDS    remove the sandbox after this long (0: never)\n"
	      "      --idle-timeout SECONDS  remove it after this long unused\n"
	      "      --quota NAME=N       lower a per-user kernel ceiling, e.g.\n"
	      "                           inotify_instances=4 (repeatable)\n", f);
	client_help_footer(f);
}

static int load_manifest(const char *path, json_t **out, struct moat_err *e)
{
	json_error_t jerr;
	*out = strcmp(path, "-") == 0 ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr)
				      : json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!*out)
		return moat_err_set(e, MOAT_E_USAGE, 0, "--manifest %s: line %d: %s",
				    path, jerr.line, jerr.text);
	if (!json_is_object(*out)) {
		json_decref(steal_ptr(out));
		return moat_err_set(e, MOAT_E_USAGE, 0, "--manifest %s: not a JSON object", path);
	}
	return 0;
}

/* CPU count: a positive number, sent as an integer when it is whole. */
static json_t *parse_cpus(const char *s, struct moat_err *e)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 1e6) {
		moat_err_set(e, MOAT_E_USAGE, 0, "--cpus '%s': expected a positive number", s);
		return NULL;
	}
	json_t *j = v == (double)(long long)v ? json_integer((long long)v) : json_real(v);
	if (!j)
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--cpus");
	return j;
}

/* Apply one option to the request body. */
static int create_opt(json_t *body, json_t *limits, json_t *env, json_t *meta,
		      const struct option *o, const char *arg, struct moat_err *e)
{
	long long v;
	json_t *obj = body, *val = NULL;
	const char *key = NULL;
	switch (o->val) {
	case OPT_MANIFEST:
		if (load_manifest(arg, &val, e) < 0)
			return -1;
		key = "manifest";
		break;
	case OPT_IMAGE:
		key = "image";
		val = json_string(arg);
		break;
	case OPT_MEMORY:
	case OPT_DISK:
		/* Sent as given: the server parses sizes (one grammar, one place). */
		if (!*arg)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--%s: empty size", o->name);
		obj = limits;
		key = o->name;
		val = json_string(arg);
		break;
	case OPT_PIDS:
		if (parse_int(arg, 1, 4194304, "--pids", &v, e) < 0)
			return -1;
		obj = limits;
		key = "pids";
		val = json_integer(v);
		break;
	case OPT_CPUS:
		if (!(val = parse_cpus(arg, e)))
			return -1;
		obj = limits;
		key = "cpus";
		break;
	case OPT_QUOTA: {
		/* limits.quotas.NAME = N; the server knows the names and ceilings */
		const char *eq = strchr(arg, '=');
		if (!eq || eq == arg)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--quota '%s': expected NAME=N", arg);
		if (parse_int(eq + 1, 0, INT64_MAX, "--quota", &v, e) < 0)
			return -1;
		json_t *q = json_object_get(limits, "quotas");
		if (!q && json_object_set_new(limits, "quotas", q = json_object()))
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--quota");
		char name[64];
		snprintf(name, sizeof name, "%.*s", (int)(eq - arg) < 63 ? (int)(eq - arg) : 63, arg);
		obj = q;
		key = name;
		val = json_integer(v);
		if (!val || json_object_set_new(obj, key, val))
			return moat_err_set(e, MOAT_E_USAGE, 0, "--quota '%s': not valid UTF-8", arg);
		return 0;
	}
	case OPT_ENV:
		return client_add_kv(env, arg, "--env", 1, e);
	case OPT_METADATA:
		return client_add_kv(meta, arg, "--metadata", 0, e);
	case OPT_TIMEOUT:
	case OPT_IDLE:
		if (parse_int(arg, 0, 100LL * 365 * 86400, o->val == OPT_TIMEOUT ?
			      "--timeout" : "--idle-timeout", &v, e) < 0)
			return -1;
		key = o->val == OPT_TIMEOUT ? "timeout_s" : "idle_timeout_s";
		val = json_integer(v);
		break;
	default:
		return 0;
	}
	/* json_string() is NULL for text that is not UTF-8. */
	if (!val || json_object_set_new(obj, key, val))
		return moat_err_set(e, MOAT_E_USAGE, 0, "--%s '%s': not valid UTF-8",
				    o->name, arg);
	return 0;
}

int moat_client_create(int argc, char **argv)
{
	const char *cmd = "create";
	struct moat_err e = {0};
	_cleanup_json_ json_t *body = json_object();
	_cleanup_json_ json_t *limits = json_object();
	_cleanup_json_ json_t *env = json_object();
	_cleanup_json_ json_t *meta = json_object();
	if (!body || !limits || !env || !meta)
		return client_fail(cmd, "out of memory");
	optind = 0;
	int c, idx = 0;
	while ((c = getopt_long(argc, argv, "+:h", create_opts, &idx)) != -1) {
		if (c == 'h') {
			create_usage(stdout);
			return 0;
		}
		if (c == '?' || c == ':')
			return client_bad_option(cmd, c, argv);
		if (create_opt(body, limits, env, meta, &create_opts[idx], optarg, &e) < 0)
			return client_fail_err(cmd, &e);
	}
	if (optind < argc)
		return client_fail(cmd, "unexpected argument '%s' (see moat create --help)",
				   argv[optind]);
	if ((json_object_size(limits) && json_object_set(body, "limits", limits)) ||
	    (json_object_size(env) && json_object_set(body, "env", env)) ||
	    (json_object_size(meta) && json_object_set(body, "metadata", meta)))
		return client_fail(cmd, "out of memory");

	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_json_ json_t *ans = NULL;
	if (moat_http_json(h, "POST", "/v1/sandboxes", NULL, body, &ans, &e) < 0)
		return client_fail_err(cmd, &e);
	return client_print_id(cmd, h, ans, "id", "sandbox id");
}

/* ---- ls -------------------------------------------------------------- */

static const struct option ls_opts[] = {
	{"json", no_argument, NULL, 'j'},
	{"metadata", required_argument, NULL, 'm'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void ls_usage(FILE *f)
{
	fputs("usage: moat ls [--json] [--metadata KEY=VALUE]...\n"
	      "\n"
	      "List the sandboxes of moat serve.\n"
	      "\n"
	      "      --json               print the server's JSON answer\n"
	      "      --metadata KEY=VALUE only sandboxes with this label (repeatable)\n", f);
	client_help_footer(f);
}

/* "k=v,k=v" of a metadata object (malloc'd; "-" when empty). */
static char *metadata_text(json_t *meta)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	const char *k;
	json_t *v;
	bool first = true;
	json_object_foreach(meta, k, v) {
		const char *sv = json_string_value(v);
		fprintf(f, "%s%s=%s", first ? "" : ",", k, sv ? sv : "?");
		first = false;
	}
	if (first)
		fputs("-", f);
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

static int print_table(json_t *list)
{
	int wid = 2, wstate = 5, wcreated = 7;
	size_t i;
	json_t *sb;
	json_array_foreach(list, i, sb) {
		int a = (int)strlen(client_str_or(sb, "id", "?"));
		int b = (int)strlen(client_str_or(sb, "state", "?"));
		int c = (int)strlen(client_str_or(sb, "created_at", "?"));
		wid = a > wid ? a : wid;
		wstate = b > wstate ? b : wstate;
		wcreated = c > wcreated ? c : wcreated;
	}
	printf("%-*s  %-*s  %-*s  %s\n", wid, "ID", wstate, "STATE", wcreated,
	       "CREATED", "METADATA");
	json_array_foreach(list, i, sb) {
		_cleanup_free_ char *meta = metadata_text(json_object_get(sb, "metadata"));
		if (!meta)
			return -1;
		printf("%-*s  %-*s  %-*s  %s\n", wid, client_str_or(sb, "id", "?"), wstate,
		       client_str_or(sb, "state", "?"), wcreated, client_str_or(sb, "created_at", "?"), meta);
	}
	return 0;
}

int moat_client_ls(int argc, char **argv)
{
	const char *cmd = "ls";
	struct moat_err e = {0};
	bool as_json = false;
	/* Query pairs: at most one per argument, plus the terminator. */
	_cleanup_free_ char **keys = calloc((size_t)argc + 1, sizeof *keys);
	_cleanup_free_ const char **query = calloc(2 * (size_t)argc + 1, sizeof *query);
	if (!keys || !query)
		return client_fail(cmd, "out of memory");
	size_t nq = 0;
	int r = 0;
	optind = 0;
	int c;
	while (r == 0 && (c = getopt_long(argc, argv, ":h", ls_opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			ls_usage(stdout);
			goto out;
		case 'j':
			as_json = true;
			break;
		case 'm': {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg) {
				r = client_fail(cmd, "--metadata '%s': expected KEY=VALUE", optarg);
				break;
			}
			if (asprintf(&keys[nq / 2], "metadata.%.*s", (int)(eq - optarg), optarg) < 0) {
				keys[nq / 2] = NULL;
				r = client_fail(cmd, "out of memory");
				break;
			}
			query[nq] = keys[nq / 2];
			query[nq + 1] = eq + 1;
			nq += 2;
			break;
		}
		default:
			r = client_bad_option(cmd, c, argv);
		}
	}
	if (r == 0 && optind < argc)
		r = client_fail(cmd, "unexpected argument '%s' (see moat ls --help)", argv[optind]);
	if (r == 0) {
		_cleanup_http_ struct moat_http *h = moat_http_new(&e);
		_cleanup_json_ json_t *ans = NULL;
		json_t *list;
		if (!h || moat_http_json(h, "GET", "/v1/sandboxes", query, NULL, &ans, &e) < 0)
			r = client_fail_err(cmd, &e);
		else if (!json_is_array(list = json_object_get(ans, "sandboxes")))
			r = client_fail(cmd, "the answer from %s has no sandbox list", moat_http_url(h));
		else if (as_json ? json_dumpf(ans, stdout, JSON_INDENT(2)) < 0 || putchar('\n') == EOF
				 : print_table(list) < 0)
			r = client_fail(cmd, "write: %s", strerror(errno));
		if (r == 0 && fflush(stdout) != 0)
			r = client_fail(cmd, "write: %s", strerror(errno));
	}
out:
	for (size_t i = 0; i < nq / 2; i++)
		free(keys[i]);
	return r;
}

/* ---- rm -------------------------------------------------------------- */

static char *sandbox_path(struct moat_http *h, const char *id)
{
	return moat_http_sandbox_path(h, id, "");
}

int moat_client_rm(int argc, char **argv)
{
	const char *cmd = "rm";
	optind = 0;
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		fputs("usage: moat rm ID...\n\nRemove sandboxes: kill their processes, "
		      "delete their files.\n", stdout);
		client_help_footer(stdout);
		return 0;
	}
	if (optind >= argc)
		return client_fail(cmd, "no sandbox id given (usage: moat rm ID...)");
	return client_delete_each(cmd, argv + optind, argc - optind, sandbox_path);
}
