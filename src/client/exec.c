/* moat exec / ps / kill: processes in a sandbox. */
#define _GNU_SOURCE
#include "attach.h"
#include "client.h"
#include "http.h"

#include "../base/cleanup.h"
#include "../base/term.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* stdin is sent whole in the request body. */
#define MAX_STDIN ((size_t)64 << 20)
/* One server-sent event line: a chunk of output, JSON-escaped. */
#define MAX_SSE_LINE ((size_t)64 << 20)

enum { OPT_CWD = 256, OPT_ENV, OPT_TIMEOUT_MS, OPT_NO_STREAM, OPT_DETACH_KEYS };

static const struct option exec_opts[] = {
	{"cwd", required_argument, NULL, OPT_CWD},
	{"env", required_argument, NULL, OPT_ENV},
	{"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},
	{"interactive", no_argument, NULL, 'i'},
	{"tty", no_argument, NULL, 't'},
	{"detach-keys", required_argument, NULL, OPT_DETACH_KEYS},
	{"no-stream", no_argument, NULL, OPT_NO_STREAM},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void exec_usage(FILE *f)
{
	fputs("usage: moat exec [OPTIONS] ID [--] COMMAND [ARG...]\n"
	      "\n"
	      "Run a command in sandbox ID. Its output goes to stdout and stderr as it\n"
	      "comes; stdin, when it is not a terminal, is read whole and sent to it.\n"
	      "\n"
	      "      --cwd DIR           directory to start in (default: the workspace)\n"
	      "      --env NAME[=VALUE]  set NAME, or pass the caller's NAME (repeatable)\n"
	      "      --timeout-ms N      kill the command after N milliseconds\n"
	      "  -i, --interactive       keep stdin open: what you type (or pipe) goes to\n"
	      "                          the command as it comes, over one WebSocket\n"
	      "  -t, --tty               run it on a pseudo-terminal in the sandbox, this\n"
	      "                          terminal in raw mode, its size followed (implies\n"
	      "                          -i; stdin must be a terminal)\n"
	      "      --detach-keys KEYS  leave the command running and detach, with\n"
	      "                          KEYS typed (default ctrl-p,ctrl-q; \"\" for none);\n"
	      "                          moat attach ID PID re-attaches\n"
	      "      --no-stream         wait for the whole answer instead of streaming\n"
	      "\n"
	      "exit status: the command's (128+N if killed by signal N); 0 on a detach;\n"
	      "125 when moat fails or the server refuses.\n", f);
	client_help_footer(f);
}

/* ---- server-sent events ------------------------------------------------ */

struct sse {
	char *buf;           /* bytes not yet split into lines */
	size_t len, cap;
	char event[32];
	char *data;          /* "data:" lines of the current event */
	size_t dlen, dcap;
	json_t *exit;        /* the exit event's object */
};

static int grow(char **p, size_t *cap, size_t need, struct moat_err *e)
{
	if (need <= *cap)
		return 0;
	if (need > MAX_SSE_LINE)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "an event from the server is too large");
	size_t nc = *cap ? *cap : 4096;
	while (nc < need)
		nc *= 2;
	char *np = realloc(*p, nc);
	if (!np)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "event");
	*p = np;
	*cap = nc;
	return 0;
}

/* Write a JSON string's bytes (absent: nothing) to f, now. */
static int write_str(json_t *str, FILE *f, struct moat_err *e)
{
	if (!str)
		return 0;
	if (!json_is_string(str))
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "output in the answer is not a string");
	if (client_write(f, json_string_value(str), json_string_length(str), e) < 0 ||
	    fflush(f) != 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "writing the command's output");
	return 0;
}

static int dispatch(struct sse *s, struct moat_err *e)
{
	if (!s->dlen && !s->event[0])
		return 0;
	json_error_t jerr;
	_cleanup_json_ json_t *obj = json_loadb(s->data ? s->data : "", s->dlen, 0, &jerr);
	int r = 0;
	if (!obj)
		r = moat_err_set(e, MOAT_E_SYSTEM, 0, "invalid event data from the server: %s",
				 jerr.text);
	else if (strcmp(s->event, "stdout") == 0)
		r = write_str(json_object_get(obj, "data"), stdout, e);
	else if (strcmp(s->event, "stderr") == 0)
		r = write_str(json_object_get(obj, "data"), stderr, e);
	else if (strcmp(s->event, "exit") == 0) {
		json_decref(s->exit);
		s->exit = steal_ptr(&obj);
	} else if (strcmp(s->event, "error") == 0) {
		/* {"message","code"} or the API's usual {"error":{...}} shape. */
		json_t *o = json_object_get(obj, "error");
		o = json_is_object(o) ? o : obj;
		const char *msg = json_string_value(json_object_get(o, "message"));
		const char *code = json_string_value(json_object_get(o, "code"));
		r = moat_err_set(e, MOAT_E_SYSTEM, 0, "%s%s%s%s", msg ? msg : "error",
				 code ? " (" : "", code ? code : "", code ? ")" : "");
	}
	/* Other events are for newer clients: ignored. */
	s->event[0] = '\0';
	s->dlen = 0;
	return r;
}

static int sse_line(struct sse *s, char *line, size_t n, struct moat_err *e)
{
	if (n && line[n - 1] == '\r')
		line[--n] = '\0';
	if (n == 0)
		return dispatch(s, e);
	if (line[0] == ':')
		return 0; /* comment, e.g. a keep-alive */
	char *colon = memchr(line, ':', n);
	size_t fl = colon ? (size_t)(colon - line) : n;
	char *val = colon ? colon + 1 : line + n;
	if (*val == ' ')
		val++;
	size_t vl = n - (size_t)(val - line);
	if (fl == 5 && memcmp(line, "event", 5) == 0) {
		snprintf(s->event, sizeof s->event, "%.*s", (int)vl, val);
	} else if (fl == 4 && memcmp(line, "data", 4) == 0) {
		if (grow(&s->data, &s->dcap, s->dlen + vl + 2, e) < 0)
			return -1;
		if (s->dlen)
			s->data[s->dlen++] = '\n';
		memcpy(s->data + s->dlen, val, vl);
		s->dlen += vl;
		s->data[s->dlen] = '\0';
	}
	return 0;
}

static int sse_feed(void *arg, const char *data, size_t n, struct moat_err *e)
{
	struct sse *s = arg;
	if (grow(&s->buf, &s->cap, s->len + n + 1, e) < 0)
		return -1;
	memcpy(s->buf + s->len, data, n);
	s->len += n;
	size_t start = 0;
	char *nl;
	while ((nl = memchr(s->buf + start, '\n', s->len - start))) {
		*nl = '\0';
		if (sse_line(s, s->buf + start, (size_t)(nl - (s->buf + start)), e) < 0)
			return -1;
		start = (size_t)(nl - s->buf) + 1;
	}
	memmove(s->buf, s->buf + start, s->len - start);
	s->len -= start;
	return 0;
}

/* ---- exec -------------------------------------------------------------- */

/* stdin's content when it is not a terminal (NULL for none). */
static int read_stdin(json_t **out, struct moat_err *e)
{
	*out = NULL;
	if (fcntl(STDIN_FILENO, F_GETFD) < 0 || isatty(STDIN_FILENO))
		return 0;
	_cleanup_free_ char *buf = NULL;
	size_t n;
	if (client_read_all(STDIN_FILENO, MAX_STDIN, "stdin", &buf, &n, e) < 0)
		return -1;
	if (n == 0)
		return 0;
	*out = json_stringn(buf, n);
	if (!*out)
		return moat_err_set(e, MOAT_E_USAGE, 0, "stdin is not UTF-8 text (the API "
				    "carries text; upload binary data with moat cp)");
	return 0;
}

/* Exit status from a finished-process object; notes on stderr. */
static int finish(const char *cmd, json_t *res)
{
	json_t *code = json_object_get(res, "exit_code");
	if (json_is_true(json_object_get(res, "running")) || !json_is_integer(code))
		return client_fail(cmd, "the server's answer has no exit status");
	if (json_is_true(json_object_get(res, "timed_out")))
		fprintf(stderr, "moat exec: the command timed out and was killed\n");
	if (json_is_true(json_object_get(res, "truncated")))
		fprintf(stderr, "moat exec: output was truncated by the server\n");
	json_int_t v = json_integer_value(code);
	return v < 0 || v > 255 ? CLIENT_FAIL : (int)v;
}

static int exec_request(const char *cmd, struct moat_http *h, const char *id,
			json_t *body, bool stream)
{
	struct moat_err e = {0};
	_cleanup_free_ char *path = moat_http_sandbox_path(h, id, "/exec");
	_cleanup_free_ char *text = json_dumps(body, JSON_COMPACT);
	if (!path || !text)
		return client_fail(cmd, "out of memory");
	struct sse s = {0};
	struct moat_http_req rq = {
		.method = "POST", .path = path, .body = text, .body_len = strlen(text),
		.content_type = "application/json",
		.accept = stream ? "text/event-stream" : "application/json",
		.sink = stream ? sse_feed : NULL, .sink_arg = &s,
		.stream_type = "text/event-stream",
	};
	struct moat_http_resp rs;
	int r;
	if (moat_http_do(h, &rq, &rs, &e) < 0) {
		r = client_fail_err(cmd, &e);
	} else if (rs.status < 200 || rs.status >= 300) {
		moat_http_error(&rs, &e);
		r = client_fail_err(cmd, &e);
	} else if (rs.streamed) {
		/* A last event without its blank line still counts. */
		if (s.len && sse_line(&s, s.buf, s.len, &e) < 0)
			r = client_fail_err(cmd, &e);
		else if (dispatch(&s, &e) < 0)
			r = client_fail_err(cmd, &e);
		else if (!s.exit)
			r = client_fail(cmd, "the connection ended before the command's exit status");
		else
			r = finish(cmd, s.exit);
	} else {
		/* Not streamed (asked not to, or an older server): one object. */
		json_error_t jerr;
		_cleanup_json_ json_t *res = json_loadb(rs.body, rs.len, 0, &jerr);
		if (!res)
			r = client_fail(cmd, "invalid JSON answer from %s: %s", moat_http_url(h),
					jerr.text);
		else if (write_str(json_object_get(res, "stdout"), stdout, &e) < 0 ||
			 write_str(json_object_get(res, "stderr"), stderr, &e) < 0)
			r = client_fail_err(cmd, &e);
		else
			r = finish(cmd, res);
	}
	moat_http_resp_free(&rs);
	free(s.buf);
	free(s.data);
	json_decref(s.exit);
	return r;
}

static int exec_opt(json_t *body, json_t *env, int c, const char *arg, bool *stream,
		    struct attach_opts *ao, struct moat_err *e)
{
	char *end;
	switch (c) {
	case OPT_CWD:
		if (!*arg)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--cwd: empty directory");
		if (json_object_set_new(body, "cwd", json_string(arg)))
			return moat_err_set(e, MOAT_E_USAGE, 0, "--cwd '%s': not valid UTF-8", arg);
		return 0;
	case OPT_ENV:
		return client_add_kv(env, arg, "--env", 1, e);
	case OPT_TIMEOUT_MS: {
		errno = 0;
		long long v = strtoll(arg, &end, 10);
		if (errno || end == arg || *end || v < 0)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--timeout-ms '%s': expected a "
					    "number of milliseconds", arg);
		return json_object_set_new(body, "timeout_ms", json_integer(v)) ?
			moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "--timeout-ms") : 0;
	}
	case OPT_NO_STREAM:
		*stream = false;
		return 0;
	case OPT_DETACH_KEYS:
		return attach_parse_keys(ao, arg, e);
	}
	return 0;
}

/* moat exec -i/-t: start the command detached from this request (yield_ms
 * 0: the answer comes at once, with its pid), then attach to it. */
static int exec_started(const char *cmd, struct moat_http *h, const char *id, json_t *body,
			const struct attach_opts *ao)
{
	struct moat_err e = {0};
	_cleanup_free_ char *path = moat_http_sandbox_path(h, id, "/exec");
	if (!path)
		return client_fail(cmd, "out of memory");
	_cleanup_json_ json_t *res = NULL;
	if (moat_http_json(h, "POST", path, NULL, body, &res, &e) < 0) {
		moat_term_restore();
		return client_fail_err(cmd, &e);
	}
	/* what it printed in its first moment came with the answer */
	if (write_str(json_object_get(res, "stdout"), stdout, &e) < 0 ||
	    write_str(json_object_get(res, "stderr"), stderr, &e) < 0) {
		moat_term_restore();
		return client_fail_err(cmd, &e);
	}
	if (!json_is_true(json_object_get(res, "running"))) {
		moat_term_restore();
		return finish(cmd, res);
	}
	json_int_t pid = json_integer_value(json_object_get(res, "process_id"));
	if (pid <= 0) {
		moat_term_restore();
		return client_fail(cmd, "the server's answer has no process id");
	}
	return attach_run(cmd, h, id, (long long)pid, ao);
}

/* Until the attach's own handlers take over: a signal that ends the
 * client puts the terminal back first (the command, detached, runs on). */
static void restore_and_die(int sig)
{
	moat_term_restore();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int exec_interactive(const char *cmd, struct moat_http *h, const char *id,
			    json_t *body, bool tty, struct attach_opts *ao)
{
	struct moat_err e = {0};
	if (json_object_set_new(body, "yield_ms", json_integer(0)) ||
	    (tty && json_object_set_new(body, "tty", json_true())))
		return client_fail(cmd, "out of memory");
	unsigned short cols, rows;
	if (tty && moat_term_size(STDIN_FILENO, &cols, &rows) &&
	    (json_object_set_new(body, "cols", json_integer(cols)) ||
	     json_object_set_new(body, "rows", json_integer(rows))))
		return client_fail(cmd, "out of memory");
	/* raw before the command starts: its first output must not pass
	 * through this terminal's own output processing (\n to \r\n) */
	if (tty) {
		static const int sigs[] = {SIGTERM, SIGHUP, SIGINT, SIGQUIT};
		for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
			signal(sigs[i], restore_and_die);
		if (moat_term_raw(STDIN_FILENO, &e) < 0)
			return client_fail_err(cmd, &e);
		ao->raw = true;
	}
	int r = exec_started(cmd, h, id, body, ao);
	moat_term_restore();
	return r;
}

int moat_client_exec(int argc, char **argv)
{
	const char *cmd = "exec";
	struct moat_err e = {0};
	_cleanup_json_ json_t *body = json_object();
	_cleanup_json_ json_t *env = json_object();
	_cleanup_json_ json_t *argvj = json_array();
	if (!body || !env || !argvj)
		return client_fail(cmd, "out of memory");
	bool stream = true, interactive = false, tty = false;
	struct attach_opts ao = {.send_stdin = true};
	if (attach_parse_keys(&ao, ATTACH_DEFAULT_KEYS, &e) < 0)
		return client_fail_err(cmd, &e);
	optind = 0;
	int c;
	/* '+': options end at the sandbox id; the command's own follow it. */
	while ((c = getopt_long(argc, argv, "+:hit", exec_opts, NULL)) != -1) {
		if (c == 'h') {
			exec_usage(stdout);
			return 0;
		}
		if (c == '?' || c == ':')
			return client_bad_option(cmd, c, argv);
		if (c == 'i' || c == 't') {
			interactive = true;
			tty = tty || c == 't';
			continue;
		}
		if (exec_opt(body, env, c, optarg, &stream, &ao, &e) < 0)
			return client_fail_err(cmd, &e);
	}
	if (tty && isatty(STDIN_FILENO) != 1)
		return client_fail(cmd, "-t (--tty): stdin is not a terminal (run it from a "
			    "terminal, or use -i alone for a command without one)");
	if (optind >= argc)
		return client_fail(cmd, "no sandbox id given (usage: moat exec [OPTIONS] ID -- COMMAND [ARG...])");
	const char *id = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc)
		return client_fail(cmd, "no command given (usage: moat exec [OPTIONS] ID -- COMMAND [ARG...])");
	for (int i = optind; i < argc; i++)
		if (json_array_append_new(argvj, json_string(argv[i])))
			return client_fail(cmd, "argument '%s' is not valid UTF-8", argv[i]);
	json_t *in = NULL;
	if (!interactive && read_stdin(&in, &e) < 0)
		return client_fail_err(cmd, &e);
	if (json_object_set(body, "cmd", argvj) ||
	    (json_object_size(env) && json_object_set(body, "env", env)) ||
	    (in && json_object_set_new(body, "stdin", in)))
		return client_fail(cmd, "out of memory");

	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	if (interactive)
		return exec_interactive(cmd, h, id, body, tty, &ao);
	return exec_request(cmd, h, id, body, stream);
}

/* ---- ps ---------------------------------------------------------------- */

static int print_procs(json_t *list)
{
	printf("%-7s  %-7s  %-3s  %s\n", "PID", "RUNNING", "TTY", "CMD");
	size_t i;
	json_t *p;
	json_array_foreach(list, i, p) {
		printf("%-7lld  %-7s  %-3s  ", (long long)json_integer_value(json_object_get(p, "process_id")),
		       json_is_true(json_object_get(p, "running")) ? "yes" : "no",
		       json_is_true(json_object_get(p, "tty")) ? "yes" : "no");
		json_t *cmdj = json_object_get(p, "cmd");
		if (json_is_string(cmdj)) {
			fputs(json_string_value(cmdj), stdout);
		} else {
			size_t k;
			json_t *a;
			json_array_foreach(cmdj, k, a)
				printf("%s%s", k ? " " : "", json_is_string(a) ? json_string_value(a) : "?");
		}
		putchar('\n');
	}
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : -1;
}

int moat_client_ps(int argc, char **argv)
{
	const char *cmd = "ps";
	struct moat_err e = {0};
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool as_json = false;
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'j') {
			as_json = true;
			continue;
		}
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		fputs("usage: moat ps [--json] ID\n\nList the processes started in sandbox ID "
		      "that are still known to it.\n", stdout);
		client_help_footer(stdout);
		return 0;
	}
	if (argc - optind != 1)
		return client_fail(cmd, "expected one sandbox id (usage: moat ps [--json] ID)");
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *path = moat_http_sandbox_path(h, argv[optind], "/processes");
	if (!path)
		return client_fail(cmd, "out of memory");
	_cleanup_json_ json_t *ans = NULL;
	if (moat_http_json(h, "GET", path, NULL, NULL, &ans, &e) < 0)
		return client_fail_err(cmd, &e);
	json_t *list = json_object_get(ans, "processes");
	if (!json_is_array(list))
		return client_fail(cmd, "the answer from %s has no process list", moat_http_url(h));
	int r = as_json ? (json_dumpf(ans, stdout, JSON_INDENT(2)) < 0 || putchar('\n') == EOF ||
			   fflush(stdout) != 0 ? -1 : 0)
			: print_procs(list);
	return r < 0 ? client_fail(cmd, "write: %s", strerror(errno)) : 0;
}

/* ---- kill -------------------------------------------------------------- */

int moat_client_kill(int argc, char **argv)
{
	const char *cmd = "kill";
	struct moat_err e = {0};
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		fputs("usage: moat kill ID PID [SIGNAL]\n\nSend SIGNAL (a name such as TERM, "
		      "or a number; default KILL) to\nprocess PID of sandbox ID (see moat ps).\n",
		      stdout);
		client_help_footer(stdout);
		return 0;
	}
	int n = argc - optind;
	if (n < 2 || n > 3)
		return client_fail(cmd, "expected ID PID [SIGNAL] (see moat kill --help)");
	const char *pid = argv[optind + 1];
	if (!*pid || strspn(pid, "0123456789") != strlen(pid) || strlen(pid) > 10)
		return client_fail(cmd, "'%s' is not a process id", pid);
	const char *sig = n == 3 ? argv[optind + 2] : NULL;
	if (sig && strncasecmp(sig, "SIG", 3) == 0)
		sig += 3; /* kill(1) habits: SIGTERM means TERM */
	if (sig && !*sig)
		return client_fail(cmd, "empty signal name");
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	char suffix[32];
	snprintf(suffix, sizeof suffix, "/processes/%s", pid);
	_cleanup_free_ char *path = moat_http_sandbox_path(h, argv[optind], suffix);
	if (!path)
		return client_fail(cmd, "out of memory");
	const char *query[] = {"signal", sig, NULL};
	if (moat_http_json(h, "DELETE", path, sig ? query : NULL, NULL, NULL, &e) < 0)
		return client_fail_err(cmd, &e);
	return 0;
}

/* ---- attach ------------------------------------------------------------ */

int moat_client_attach(int argc, char **argv)
{
	const char *cmd = "attach";
	struct moat_err e = {0};
	enum { OPT_KEYS = 256, OPT_NO_STDIN };
	static const struct option opts[] = {
		{"detach-keys", required_argument, NULL, OPT_KEYS},
		{"no-stdin", no_argument, NULL, OPT_NO_STDIN},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct attach_opts ao = {.send_stdin = true};
	if (attach_parse_keys(&ao, ATTACH_DEFAULT_KEYS, &e) < 0)
		return client_fail_err(cmd, &e);
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs("usage: moat attach [OPTIONS] ID PID\n"
			      "\n"
			      "Attach this terminal to process PID of sandbox ID (see moat ps): its\n"
			      "output from now on, what you type as its input, and for a process on a\n"
			      "pseudo-terminal (moat exec -t) raw mode and the window size. One attach\n"
			      "at a time per process. Detaching leaves the process running.\n"
			      "\n"
			      "      --detach-keys KEYS  detach with KEYS (default ctrl-p,ctrl-q; \"\" for none)\n"
			      "      --no-stdin          only follow the output\n"
			      "\n"
			      "exit status: the process's when it ends (128+N if killed by signal N);\n"
			      "0 on a detach; 125 when moat fails or the server refuses.\n"
			      "environment: MOAT_URL (default http://127.0.0.1:7070), MOAT_API_TOKEN.\n",
			      stdout);
			return 0;
		}
		if (c == OPT_KEYS) {
			if (attach_parse_keys(&ao, optarg, &e) < 0)
				return client_fail_err(cmd, &e);
			continue;
		}
		if (c == OPT_NO_STDIN) {
			ao.send_stdin = false;
			continue;
		}
		return client_bad_option(cmd, c, argv);
	}
	if (argc - optind != 2)
		return client_fail(cmd, "expected ID PID (usage: moat attach [OPTIONS] ID PID)");
	const char *pid = argv[optind + 1];
	if (!*pid || strspn(pid, "0123456789") != strlen(pid) || strlen(pid) > 10)
		return client_fail(cmd, "'%s' is not a process id", pid);
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	return attach_run(cmd, h, argv[optind], strtoll(pid, NULL, 10), &ao);
}
