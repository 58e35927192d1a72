/* Helpers shared by the client commands: see client.h. */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"

#include "../base/cleanup.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int client_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "moat %s: ", cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return CLIENT_FAIL;
}

int client_fail_err(const char *cmd, const struct moat_err *e)
{
	return client_fail(cmd, "%s", e->msg);
}

void client_help_footer(FILE *f)
{
	fputs("\nenvironment: MOAT_URL the server (default http://127.0.0.1:7070),\n"
	      "MOAT_API_TOKEN its bearer token (when it was started with one).\n", f);
}

int client_bad_option(const char *cmd, int c, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "?";
	if (c == ':')
		return client_fail(cmd, "option '%s' needs a value (see moat %s --help)", arg, cmd);
	if (optopt && optopt < 256)
		return client_fail(cmd, "unknown option '-%c' (see moat %s --help)", optopt, cmd);
	return client_fail(cmd, "unknown option '%s' (see moat %s --help)", arg, cmd);
}

int client_parse(int argc, char **argv, const char *cmd, const char *help,
		 const struct option *opts, const char **vals)
{
	bool has_o = opts[0].val == 'o';
	optind = 0;
	int c, idx = 0;
	while ((c = getopt_long(argc, argv, has_o ? ":ho:" : ":h", opts, &idx)) != -1) {
		if (c == 'h') {
			fputs(help, stdout);
			client_help_footer(stdout);
			return 1;
		}
		if (c == '?' || c == ':')
			return client_bad_option(cmd, c, argv);
		/* -o leaves idx as it was: it is --output's, opts[0] */
		if (c == 'o' && has_o)
			vals[0] = optarg;
		else
			vals[idx] = optarg ? optarg : "1";
	}
	return 0;
}

const struct option client_help_only[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};

int client_read_all(int fd, size_t cap, const char *what, char **out,
		    size_t *len, struct moat_err *e)
{
	size_t n = 0, size = 0;
	char *buf = NULL;
	for (;;) {
		if (size - n < 2) {
			size_t ns = size ? size * 2 : 65536;
			if (ns > cap + 2)
				ns = cap + 2;
			char *nb = realloc(buf, ns);
			if (!nb) {
				free(buf);
				return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "reading %s", what);
			}
			buf = nb;
			size = ns;
		}
		ssize_t r = read(fd, buf + n, size - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int err = errno;
			free(buf);
			return moat_err_set(e, MOAT_E_SYSTEM, err, "reading %s", what);
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > cap) {
			free(buf);
			return moat_err_set(e, MOAT_E_USAGE, 0, "%s is larger than %zu MiB",
					    what, cap >> 20);
		}
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int client_add_kv(json_t *obj, const char *arg, const char *opt, int allow_env,
		  struct moat_err *e)
{
	const char *eq = strchr(arg, '=');
	size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
	const char *val = eq ? eq + 1 : NULL;
	if (klen == 0)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s '%s': empty name", opt, arg);
	char *key = strndup(arg, klen);
	if (!key)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", opt);
	if (!val && allow_env)
		val = getenv(key);
	int r = 0;
	if (!val)
		r = moat_err_set(e, MOAT_E_USAGE, 0, allow_env ?
				 "%s '%s': expected NAME=VALUE (or NAME of a set variable)" :
				 "%s '%s': expected KEY=VALUE", opt, arg);
	else if (json_object_set_new(obj, key, json_string(val)) != 0)
		r = moat_err_set(e, MOAT_E_USAGE, 0, "%s '%s': not valid UTF-8", opt, arg);
	free(key);
	return r;
}

int client_write(FILE *f, const void *data, size_t n, struct moat_err *e)
{
	if (n && fwrite(data, 1, n, f) != n)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "write");
	return 0;
}

const char *client_str_or(json_t *o, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : dflt;
}

int client_print_json(const char *cmd, json_t *o)
{
	if (json_dumpf(o, stdout, JSON_INDENT(2)) < 0 || putchar('\n') == EOF ||
	    fflush(stdout) != 0)
		return client_fail(cmd, "write: %s", strerror(errno));
	return 0;
}

int client_print_id(const char *cmd, struct moat_http *h, json_t *ans, const char *key,
		    const char *what)
{
	const char *id = json_string_value(json_object_get(ans, key));
	if (!id)
		return client_fail(cmd, "the answer from %s has no %s", moat_http_url(h), what);
	if (printf("%s\n", id) < 0 || fflush(stdout) != 0)
		return client_fail(cmd, "write: %s", strerror(errno));
	return 0;
}

int client_delete_each(const char *cmd, char **names, int n,
		       char *(*path)(struct moat_http *h, const char *name))
{
	int r = 0;
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	for (int i = 0; i < n; i++) {
		char *p = path(h, names[i]);
		if (!p)
			return client_fail(cmd, "out of memory");
		int rc = moat_http_json(h, "DELETE", p, NULL, NULL, NULL, &e);
		free(p);
		if (rc < 0) {
			r = client_fail(cmd, "%s: %s", names[i], e.msg);
			if (strncmp(e.msg, "cannot reach", 12) == 0)
				break;
		}
	}
	return r;
}

int client_show(const char *cmd, const char *name,
		char *(*path)(struct moat_http *h, const char *name))
{
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	char *p = path(h, name);
	json_t *ans = NULL;
	if (!p)
		return client_fail(cmd, "out of memory");
	int rc = moat_http_json(h, "GET", p, NULL, NULL, &ans, &e);
	free(p);
	if (rc < 0)
		return client_fail(cmd, "%s: %s", name, e.msg);
	rc = client_print_json(cmd, ans);
	json_decref(ans);
	return rc;
}

int client_list(const char *cmd, const char *path, const char *const *query, const char *key,
		bool as_json, int (*print)(json_t *list))
{
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	_cleanup_json_ json_t *ans = NULL;
	if (!h || moat_http_json(h, "GET", path, query, NULL, &ans, &e) < 0)
		return client_fail_err(cmd, &e);
	json_t *list = json_object_get(ans, key);
	if (!json_is_array(list))
		return client_fail(cmd, "the answer from %s has no %s list", moat_http_url(h), key);
	if (as_json)
		return client_print_json(cmd, ans);
	if (print(list) < 0 || fflush(stdout) != 0)
		return client_fail(cmd, "write: %s", strerror(errno));
	return 0;
}

static int sink_file(void *f, const char *data, size_t n, struct moat_err *e)
{
	return client_write(f, data, n, e);
}

int client_download(const char *cmd, struct moat_http *h, const char *path, const char *accept,
		    const char *out, bool empty_ok, const char *what)
{
	bool to_stdout = !strcmp(out, "-");
	_cleanup_free_ char *part = NULL;
	if (!to_stdout && asprintf(&part, "%s.part", out) < 0)
		return client_fail(cmd, "out of memory");
	FILE *f = to_stdout ? stdout : fopen(part, "wxe");
	if (!f)
		return client_fail(cmd, "%s: %s", part, strerror(errno));
	struct moat_err e = {0};
	struct moat_http_req rq = {.method = "GET", .path = path, .accept = accept,
				   .sink = sink_file, .sink_arg = f};
	struct moat_http_resp rs = {0};
	int r = 0;
	if (moat_http_do(h, &rq, &rs, &e) < 0)
		r = client_fail(cmd, "%s: %s", what, e.msg);
	else if (!rs.streamed && (!empty_ok || rs.status / 100 != 2))
		r = (moat_http_error(&rs, &e), client_fail(cmd, "%s: %s", what, e.msg));
	else if (!rs.streamed && client_write(f, rs.body, rs.len, &e) < 0)
		r = client_fail(cmd, "%s: %s", to_stdout ? "stdout" : part, e.msg);
	moat_http_resp_free(&rs);
	if (to_stdout)
		return r == 0 && fflush(stdout) != 0 ? client_fail(cmd, "write: %s",
								    strerror(errno)) : r;
	if (fclose(f) != 0 && r == 0)
		r = client_fail(cmd, "%s: %s", part, strerror(errno));
	if (r == 0 && rename(part, out) != 0)
		r = client_fail(cmd, "%s: %s", out, strerror(errno));
	if (r != 0)
		unlink(part);
	return r;
}
