/* E2B envd's process.Process service (e2b-protocol.md §3.2) onto the
 * operation core: Start and Connect streams, List, SendInput, SendSignal,
 * CloseStdin, Update. Shared plumbing: e2b_envd_int.h. */
#define _GNU_SOURCE
#include "e2b_envd_int.h"
#include "e2b_int.h"

#include "connect.h"
#include "core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA_FRAME_MAX (64u << 10) /* output bytes per data event */

/* Go's syscall.Signal.String() (what envd's "signal: ..." status says). */
static const char *go_signal(int sig)
{
	static const char *const names[] = {
		NULL, "hangup", "interrupt", "quit", "illegal instruction",
		"trace/breakpoint trap", "aborted", "bus error", "floating point exception",
		"killed", "user defined signal 1", "segmentation fault", "user defined signal 2",
		"broken pipe", "alarm clock", "terminated", "stack fault", "child exited",
		"continued", "stopped (signal)", "stopped", "stopped (tty input)",
		"stopped (tty output)", "urgent I/O condition", "CPU time limit exceeded",
		"file size limit exceeded", "virtual timer expired", "profiling timer expired",
		"window changed", "I/O possible", "power failure", "bad system call"};
	if (sig > 0 && (size_t)sig < sizeof names / sizeof names[0])
		return names[sig];
	return NULL;
}

/* envd answers a process that could not start with invalid_argument (a
 * missing cwd, a missing binary). */
static enum connect_code start_code(const struct core_err *e)
{
	if (e->status == 403)
		return CONNECT_PERMISSION_DENIED;
	if (e->status == 429)
		return CONNECT_RESOURCE_EXHAUSTED;
	if (e->status >= 400 && e->status < 500 && e->status != 401)
		return CONNECT_INVALID_ARGUMENT;
	return envd_code_of(e);
}

/* ---- process events ------------------------------------------------------ */

static void send_start(struct envd_call *c, int64_t pid)
{
	if (c->first_sent)
		return;
	c->first_sent = true;
	envd_stream_send(c, json_pack("{s:{s:{s:I}}}", "event", "start", "pid", (json_int_t)pid));
	envd_keepalive_start(c);
}

static void send_data(struct envd_call *c, const char *field, const char *p, size_t n)
{
	while (n) {
		size_t k = n > DATA_FRAME_MAX ? DATA_FRAME_MAX : n;
		json_t *d = json_object();
		if (d)
			json_object_set_new(d, field, pj_bytes_json(p, k));
		envd_stream_send(c, json_pack("{s:{s:o}}", "event", "data", d));
		p += k;
		n -= k;
	}
}

static void on_started(void *arg, int64_t pid)
{
	struct envd_call *c = arg;
	c->pid = pid;
	send_start(c, pid);
}

static void on_output(void *arg, const char *out, size_t olen, const char *err, size_t elen)
{
	struct envd_call *c = arg;
	send_start(c, c->pid);
	if (olen)
		send_data(c, c->tty ? "pty" : "stdout", out, olen);
	if (elen)
		send_data(c, "stderr", err, elen);
}

/* The end event as envd's Go ProcessState gives it: a signal is exitCode
 * -1, exited false, "signal: killed"; an exit "exit status N" (error set
 * unless N is 0). */
static void on_ended(void *arg, const struct core_exit *x)
{
	struct envd_call *c = arg;
	c->op = NULL;
	send_start(c, x->pid);
	/* E2B's EndEvent has no field for it: say it in the daemon's log at
	 * least (output beyond max_output, or dropped while the client did not
	 * read: back-pressure) */
	if (x->truncated)
		fprintf(stderr, "moat serve: envd: process %lld: output dropped (truncated)\n",
			(long long)x->pid);
	if (x->timed_out) {
		envd_stream_end(c, CONNECT_DEADLINE_EXCEEDED, ENVD_DEADLINE_MSG);
		return;
	}
	char status[64];
	int code = x->exit_code;
	bool exited = true;
	if (x->signal > 0) {
		const char *n = go_signal(x->signal);
		if (n)
			snprintf(status, sizeof status, "signal: %s", n);
		else
			snprintf(status, sizeof status, "signal: signal %d", x->signal);
		code = -1;
		exited = false;
	} else {
		snprintf(status, sizeof status, "exit status %d", code);
	}
	json_t *end = json_pack("{s:i,s:b,s:s}", "exitCode", code, "exited", exited, "status",
				status);
	if (end && (x->signal > 0 || code != 0))
		json_object_set_new(end, "error", json_string(status));
	envd_stream_send(c, json_pack("{s:{s:o}}", "event", "end", end));
	envd_stream_end(c, CONNECT_OK, NULL);
}

static void on_failed(void *arg, const struct core_err *e)
{
	struct envd_call *c = arg;
	c->op = NULL;
	envd_stream_end(c, c->first_sent ? envd_code_of(e) : start_code(e), e->msg);
}

static const struct core_exec_cbs exec_cbs = {
	.started = on_started, .output = on_output, .ended = on_ended, .failed = on_failed,
	.backlog = envd_backlog};
/* ProcessSelector {pid} | {tag}: c->pid, or c->tag to look up. */
static int selector(struct envd_call *c, const json_t *msg)
{
	json_t *sel = pj_get(msg, "process", "process");
	if (!json_is_object(sel)) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "process: a selector {pid} or {tag} is required");
		return -1;
	}
	uint32_t pid;
	int r = envd_opt_u32(c, sel, "pid", "pid", &pid);
	if (r < 0)
		return -1;
	if (r) {
		c->pid = pid;
		return 0;
	}
	if (envd_opt_str(c, sel, "tag", "tag", &c->tag) < 0)
		return -1;
	if (!c->tag) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "process: a selector {pid} or {tag} is required");
		return -1;
	}
	return 0;
}

/* ---- process.Process --------------------------------------------------------- */

static void on_done(void *arg, json_t *result, const char *data, size_t len,
		    const struct core_err *e);
static void proceed(struct envd_call *c);

/* Look the selector up in core_ps (tags; Connect also learns the tty). */
static void by_ps(struct envd_call *c)
{
	struct core_err e = {0};
	c->by_ps = true;
	c->op = core_ps(c->b, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

static void select_then(struct envd_call *c)
{
	if (c->tag || c->kind == K_CONNECT)
		by_ps(c);
	else
		proceed(c);
}

static void ps_found(struct envd_call *c, json_t *result)
{
	json_t *ps = json_object_get(result, "processes");
	size_t i;
	json_t *p;
	json_array_foreach(ps, i, p) {
		if (json_is_false(json_object_get(p, "running")))
			continue;
		const char *tag = envd_jstr(p, "tag");
		int64_t pid = envd_jint(p, "process_id");
		if (c->tag ? (tag && !strcmp(tag, c->tag)) : pid == c->pid) {
			c->pid = pid;
			c->tty = json_is_true(json_object_get(p, "tty"));
			proceed(c);
			return;
		}
	}
	if (c->tag)
		envd_fail(c, CONNECT_NOT_FOUND, "process with tag %s not found", c->tag);
	else
		envd_fail(c, CONNECT_NOT_FOUND, "process with pid %" PRId64 " not found", c->pid);
}

static void proceed(struct envd_call *c)
{
	struct core_err e = {0};
	switch (c->kind) {
	case K_CONNECT:
		c->op = core_attach(c->b, c->pid, true, -1, &exec_cbs, c, &e);
		if (c->op)
			send_start(c, c->pid);
		break;
	case K_INPUT:
		c->op = core_stdin(c->b, c->pid, c->data ? c->data : "", c->len, false, on_done, c,
				   &e);
		break;
	case K_CLOSE:
		c->op = core_stdin(c->b, c->pid, NULL, 0, true, on_done, c, &e);
		break;
	case K_SIGNAL:
		c->op = core_signal(c->b, c->pid, c->sig, on_done, c, &e);
		break;
	case K_UPDATE:
		c->op = core_resize(c->b, c->pid, c->cols, c->rows, on_done, c, &e);
		break;
	default:
		envd_fail(c, CONNECT_INTERNAL, "unexpected call");
		return;
	}
	if (!c->op) {
		if (!strcmp(e.code, "not_found"))
			envd_fail(c, CONNECT_NOT_FOUND, "process with pid %" PRId64 " not found", c->pid);
		else
			envd_fail(c, envd_code_of(&e), "%s", e.msg);
	}
}

int envd_timeout_header(struct envd_call *c, int64_t *ms)
{
	if (connect_timeout_ms(envd_hdr(c->req, "Connect-Timeout-Ms"), ms) < 0) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "Connect-Timeout-Ms: expected 1 to 10 digits");
		return -1;
	}
	return 0;
}

void envd_p_start(struct envd_call *c, json_t *msg)
{
	json_t *proc = pj_get(msg, "process", "process");
	if (!json_is_object(proc)) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "process: required");
		return;
	}
	const char *cmd, *cwd, *tag;
	if (envd_opt_str(c, proc, "cmd", "cmd", &cmd) < 0 || envd_opt_str(c, proc, "cwd", "cwd", &cwd) < 0 ||
	    envd_opt_str(c, msg, "tag", "tag", &tag) < 0)
		return;
	if (!cmd || !*cmd) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "process.cmd: required");
		return;
	}
	c->argv = json_array();
	if (!c->argv || json_array_append_new(c->argv, json_string(cmd)) < 0) {
		envd_fail(c, CONNECT_INTERNAL, "out of memory");
		return;
	}
	json_t *args = pj_get(proc, "args", "args");
	size_t i;
	json_t *a;
	if (args && !json_is_array(args)) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "process.args: expected an array of strings");
		return;
	}
	json_array_foreach(args, i, a) {
		if (!json_is_string(a)) {
			envd_fail(c, CONNECT_INVALID_ARGUMENT, "process.args[%zu]: expected a string", i);
			return;
		}
		json_array_append(c->argv, a);
	}
	json_t *envs = pj_get(proc, "envs", "envs");
	if (envs) {
		const char *k;
		json_t *v;
		if (!json_is_object(envs)) {
			envd_fail(c, CONNECT_INVALID_ARGUMENT, "process.envs: expected an object of strings");
			return;
		}
		json_object_foreach(envs, k, v) {
			if (!json_is_string(v)) {
				envd_fail(c, CONNECT_INVALID_ARGUMENT, "process.envs.%s: expected a string", k);
				return;
			}
		}
	}
	char msgbuf[600];
	if (envd_resolve(c->user, cwd, c->path, sizeof c->path, msgbuf, sizeof msgbuf) < 0) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "%s", msgbuf);
		return;
	}
	bool use_stdin = true;
	if (envd_opt_bool(c, msg, "stdin", "stdin", &use_stdin) < 0)
		return;
	uint32_t cols = 0, rows = 0;
	json_t *pty = pj_get(msg, "pty", "pty");
	if (pty) {
		json_t *size = pj_get(pty, "size", "size");
		if (!json_is_object(pty) || (size && !json_is_object(size))) {
			envd_fail(c, CONNECT_INVALID_ARGUMENT, "pty: expected {size:{cols,rows}}");
			return;
		}
		if (size && (envd_opt_u32(c, size, "cols", "cols", &cols) < 0 ||
			     envd_opt_u32(c, size, "rows", "rows", &rows) < 0))
			return;
		c->tty = true;
	}
	int64_t timeout = 0;
	if (envd_timeout_header(c, &timeout) < 0)
		return;
	struct core_exec_req r = {
		.argv = c->argv,
		.env = envs,
		.cwd = c->path,
		.user = c->user,
		.tty = c->tty,
		.cols = cols > 65535 ? 65535 : cols,
		.rows = rows > 65535 ? 65535 : rows,
		.stdin_mode = (use_stdin || c->tty) ? CORE_STDIN_PIPE : CORE_STDIN_NULL,
		.timeout_ms = timeout,
		.tag = tag,
		.stream = true,
		.yield_ms = -1,
		.detached = true, /* a client leaving does not kill it (envd) */
	};
	struct core_err e = {0};
	c->op = core_exec(c->b, &r, &exec_cbs, c, &e);
	if (!c->op) {
		envd_fail(c, start_code(&e), "%s", e.msg);
		return;
	}
	/* the core kills it at the deadline and says timed_out; this only
	 * ends a stream whose end never came */
	if (timeout > 0)
		envd_deadline_start(c, timeout + 5000);
}

void envd_p_connect(struct envd_call *c, json_t *msg)
{
	int64_t timeout = 0;
	if (selector(c, msg) < 0 || envd_timeout_header(c, &timeout) < 0)
		return;
	envd_deadline_start(c, timeout); /* bounds the stream, not the process */
	select_then(c);
}

void envd_p_list(struct envd_call *c, json_t *msg)
{
	struct core_err e = {0};
	c->op = core_ps(c->b, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

void envd_p_input(struct envd_call *c, json_t *msg)
{
	if (selector(c, msg) < 0)
		return;
	json_t *in = pj_get(msg, "input", "input");
	if (in && !json_is_object(in)) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "input: expected {stdin} or {pty}");
		return;
	}
	json_t *v = pj_get(in, "stdin", "stdin");
	const char *field = "stdin";
	if (!v) {
		v = pj_get(in, "pty", "pty");
		field = "pty";
	}
	if (v) {
		c->data = pj_bytes(v, &c->len);
		if (!c->data) {
			envd_fail(c, CONNECT_INVALID_ARGUMENT, "input.%s: invalid base64", field);
			return;
		}
	}
	select_then(c);
}

void envd_p_signal(struct envd_call *c, json_t *msg)
{
	static const char *const names[16] = {[0] = "SIGNAL_UNSPECIFIED", [9] = "SIGNAL_SIGKILL",
					      [15] = "SIGNAL_SIGTERM"};
	if (selector(c, msg) < 0)
		return;
	json_t *v = pj_get(msg, "signal", "signal");
	int sig = 0;
	if (v && pj_enum(v, names, 16, &sig) < 0) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "signal: unknown value");
		return;
	}
	if (sig == 9)
		c->sig = "KILL";
	else if (sig == 15)
		c->sig = "TERM";
	else {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM required");
		return;
	}
	select_then(c);
}

void envd_p_close(struct envd_call *c, json_t *msg)
{
	if (selector(c, msg) < 0)
		return;
	select_then(c);
}

void envd_p_update(struct envd_call *c, json_t *msg)
{
	if (selector(c, msg) < 0)
		return;
	json_t *pty = pj_get(msg, "pty", "pty");
	if (!pty) { /* nothing to change */
		envd_ok(c, json_object());
		return;
	}
	json_t *size = json_is_object(pty) ? pj_get(pty, "size", "size") : NULL;
	uint32_t cols = 0, rows = 0;
	if (!json_is_object(size)) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "pty.size: required");
		return;
	}
	if (envd_opt_u32(c, size, "cols", "cols", &cols) < 0 ||
	    envd_opt_u32(c, size, "rows", "rows", &rows) < 0)
		return;
	if (!cols || !rows || cols > 65535 || rows > 65535) {
		envd_fail(c, CONNECT_INVALID_ARGUMENT, "pty.size: cols and rows must be 1..65535");
		return;
	}
	c->cols = cols;
	c->rows = rows;
	select_then(c);
}

static json_t *ps_json(json_t *result)
{
	json_t *out = json_array();
	json_t *ps = json_object_get(result, "processes");
	size_t i;
	json_t *p;
	json_array_foreach(ps, i, p) {
		if (json_is_false(json_object_get(p, "running")))
			continue;
		json_t *cmd = json_object_get(p, "cmd");
		json_t *cfg = json_object();
		json_t *args = json_array();
		size_t j;
		json_t *a;
		json_array_foreach(cmd, j, a) {
			if (j == 0)
				json_object_set(cfg, "cmd", a);
			else
				json_array_append(args, a);
		}
		json_object_set_new(cfg, "args", args);
		json_t *env = json_object_get(p, "env");
		json_t *envs = json_object();
		if (json_is_object(env)) {
			json_object_update(envs, env);
		} else if (json_is_array(env)) {
			json_array_foreach(env, j, a) {
				const char *s = json_string_value(a);
				const char *eq = s ? strchr(s, '=') : NULL;
				if (!eq)
					continue;
				char *k = strndup(s, (size_t)(eq - s));
				if (k)
					json_object_set_new(envs, k, json_string(eq + 1));
				free(k);
			}
		}
		json_object_set_new(cfg, "envs", envs);
		const char *cwd = envd_jstr(p, "cwd");
		if (cwd)
			json_object_set_new(cfg, "cwd", json_string(cwd));
		json_t *o = json_pack("{s:o,s:I}", "config", cfg, "pid",
				      (json_int_t)envd_jint(p, "process_id"));
		const char *tag = envd_jstr(p, "tag");
		if (o && tag)
			json_object_set_new(o, "tag", json_string(tag));
		json_array_append_new(out, o);
	}
	return json_pack("{s:o}", "processes", out);
}

/* Every simple core answer of a process call (and the core_ps of a
 * selector). */
static void on_done(void *arg, json_t *result, const char *data, size_t len,
		    const struct core_err *e)
{
	struct envd_call *c = arg;
	c->op = NULL;
	if (c->by_ps) {
		c->by_ps = false;
		if (e)
			envd_fail(c, envd_code_of(e), "%s", e->msg);
		else
			ps_found(c, result);
		return;
	}
	if (e) {
		if (c->kind != K_PLIST && !strcmp(e->code, "not_found"))
			envd_fail(c, CONNECT_NOT_FOUND, "process with pid %" PRId64 " not found", c->pid);
		else if (c->kind == K_UPDATE && !strcmp(e->code, "conflict"))
			envd_fail(c, CONNECT_FAILED_PRECONDITION, "%s", e->msg);
		else
			envd_fail(c, envd_code_of(e), "%s", e->msg);
		return;
	}
	envd_ok(c, c->kind == K_PLIST ? ps_json(result) : json_object());
}
