/* The MCP tools (mcp_schema.c lists them): each a thin call onto the
 * operation core, as api.c makes it for the same /v1 route, and its
 * answer shaped twice: structuredContent is the /v1 JSON answer, the text
 * content is for the model. No exec or file logic here. */
#define _GNU_SOURCE
#include "mcp_int.h"

#include "box.h"
#include "core.h"
#include "jfield.h"
#include "../base/utf8.h"
#include "../proto/entries.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Collected exec output when it also streams (the agent bounds what it
 * sends only when it must hold): as /v1's default max_output_bytes. */
#define STREAM_KEEP ((size_t)1 << 20)
/* read_file's bound: its text goes out twice (content and
 * structuredContent), each byte up to 6 when escaped (\u0001), all held in
 * memory: a model's 256 MiB file of control bytes would cost the daemon
 * gigabytes. 4 MiB keeps the answer under `moat mcp`'s 64 MiB message
 * bound; a larger file is an error naming its size (exec reads parts). */
#define READ_MAX ((uint64_t)4 << 20)

struct mcp_call {
	const struct mcp_tool *t;
	const struct mcp_call_cbs *cbs;
	void *arg;
	struct core_op *op; /* until the core answered */
	bool stream;
	bool cut;           /* streamed output over STREAM_KEEP was not kept */
	char *path;         /* read/write: the path asked */
	size_t size;        /* write: the bytes written */
	struct moat_buf out, err;
};

/* ---- results ------------------------------------------------------------------- */

static json_t *text_block(const char *s)
{
	json_t *t = json_string(s);
	if (!t) { /* not UTF-8: a message quoting the client, cut at a byte count */
		char *c = strdup(s);
		t = json_string(c ? moat_utf8_clean(c) : "");
		free(c);
	}
	return json_pack("{s:s,s:o}", "type", "text", "text", t ? t : json_string(""));
}

/* A CallToolResult: one text block, structured (stolen, may be NULL). */
static json_t *vresult(json_t *structured, bool is_error, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
static json_t *vresult(json_t *structured, bool is_error, const char *fmt, va_list ap)
{
	char *msg = NULL;
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	json_t *r = json_pack("{s:[o]}", "content", text_block(msg ? msg : "out of memory"));
	free(msg);
	if (r && is_error)
		json_object_set_new(r, "isError", json_true());
	if (r && structured)
		json_object_set(r, "structuredContent", structured);
	json_decref(structured);
	return r;
}

static json_t *result(json_t *structured, bool is_error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static json_t *result(json_t *structured, bool is_error, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	json_t *r = vresult(structured, is_error, fmt, ap);
	va_end(ap);
	return r;
}

/* A successful result */
#define ok(structured, ...) result((structured), false, __VA_ARGS__)

json_t *mcp_tool_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	json_t *r = vresult(NULL, true, fmt, ap);
	va_end(ap);
	return r;
}

/* moat's error: its message (which names the culprit) and, structured,
 * /v1's error body. */
static json_t *failure(const struct mcp_tool *t, const struct core_err *e)
{
	const char *code = e && e->code[0] ? e->code : "internal";
	const char *msg = e && e->msg[0] ? e->msg : "failed";
	return result(json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg), true,
		      "%s: %s (%s)", t->name, msg, code);
}

static json_t *output_text(const struct moat_buf *b)
{
	return jf_text(b->p, b->len);
}

/* ---- calls ------------------------------------------------------------------------ */

static struct mcp_call *call_new(const struct mcp_tool *t, const struct mcp_call_cbs *cbs,
				 void *arg, bool stream)
{
	struct mcp_call *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->t = t;
	c->cbs = cbs;
	c->arg = arg;
	c->stream = stream;
	return c;
}

static void call_free(struct mcp_call *c)
{
	if (!c)
		return;
	core_op_cancel(c->op);
	moat_buf_free(&c->out);
	moat_buf_free(&c->err);
	free(c->path);
	free(c);
}

void mcp_call_cancel(struct mcp_call *c)
{
	call_free(c);
}

/* The core answered: hand the result on, then free (the core's op has
 * freed itself). */
static void finish(struct mcp_call *c, json_t *r)
{
	c->op = NULL;
	const struct mcp_call_cbs *cbs = c->cbs;
	void *arg = c->arg;
	call_free(c);
	cbs->done(arg, r ? r : mcp_tool_error("out of memory"));
}

/* ---- processes ---------------------------------------------------------------------- */

static void x_output(void *arg, const char *out, size_t olen, const char *err, size_t elen)
{
	struct mcp_call *c = arg;
	if (c->stream && c->cbs->output)
		c->cbs->output(c->arg, out, olen, err, elen);
	if (c->stream && (c->out.len + olen > STREAM_KEEP || c->err.len + elen > STREAM_KEEP)) {
		c->cut = true;
		olen = c->out.len + olen > STREAM_KEEP ? 0 : olen;
		elen = c->err.len + elen > STREAM_KEEP ? 0 : elen;
	}
	/* not streaming, the agent bounds what it sends (max_output) */
	if (moat_buf_add(&c->out, out, olen) < 0 || moat_buf_add(&c->err, err, elen) < 0)
		c->cut = true;
}

static size_t x_backlog(void *arg)
{
	struct mcp_call *c = arg;
	return c->cbs->backlog ? c->cbs->backlog(c->arg) : 0;
}

static char *blocks(json_t *o)
{
	char *s = NULL;
	if (asprintf(&s, "stdout:\n%s\nstderr:\n%s", json_string_value(json_object_get(o, "stdout")),
		     json_string_value(json_object_get(o, "stderr"))) < 0)
		s = NULL;
	return s;
}

static void x_yielded(void *arg, const struct core_exit *x)
{
	struct mcp_call *c = arg;
	/* /v1's running answer, keys in its order */
	json_t *o = json_pack("{s:b,s:I,s:o,s:o,s:b}", "running", 1, "process_id",
			      (json_int_t)x->pid, "stdout", output_text(&c->out), "stderr",
			      output_text(&c->err), "truncated", x->truncated || c->cut);
	char *b = o ? blocks(o) : NULL;
	json_t *r = ok(o, "process %lld is still running (write_stdin with process_id %lld)\n%s",
		       (long long)x->pid, (long long)x->pid, b ? b : "");
	free(b);
	finish(c, r);
}

static void x_ended(void *arg, const struct core_exit *x)
{
	struct mcp_call *c = arg;
	json_t *o = jf_exit(x, c->t->op == MCP_OP_STDIN);
	json_object_set_new(o, "stdout", output_text(&c->out));
	json_object_set_new(o, "stderr", output_text(&c->err));
	json_object_set_new(o, "truncated", json_boolean(x->truncated || c->cut));
	char note[160] = "";
	if (x->timed_out || x->signal || x->truncated || c->cut)
		snprintf(note, sizeof note, "\n(%s%s%s)",
			 x->timed_out ? "timed out, killed" : x->signal ? "killed by a signal" : "",
			 (x->timed_out || x->signal) && (x->truncated || c->cut) ? "; " : "",
			 x->truncated || c->cut ? "output truncated" : "");
	char *b = blocks(o);
	json_t *r = ok(o, "exit code %d%s\n%s", x->exit_code, note, b ? b : "");
	free(b);
	finish(c, r);
}

static void x_failed(void *arg, const struct core_err *e)
{
	struct mcp_call *c = arg;
	finish(c, failure(c->t, e));
}

static const struct core_exec_cbs exec_cbs = {.output = x_output, .yielded = x_yielded,
					      .ended = x_ended, .failed = x_failed,
					      .backlog = x_backlog};

static struct core_op *t_exec(struct mcp_call *c, struct box *b, json_t *args,
			      struct core_err *e)
{
	json_t *cmd = json_object_get(args, "cmd");
	json_t *argv = json_is_string(cmd) ? json_pack("[s,s,O]", "/bin/sh", "-c", cmd)
					   : json_incref(cmd);
	int64_t yield = mcp_arg_int(args, "yield_ms", -1);
	/* the core streams or yields, not both: yield_ms (the model's ask)
	 * wins over progress notifications */
	bool yields = yield >= 0;
	c->stream = c->stream && !yields;
	struct core_exec_req r = {
		.argv = argv,
		.cwd = mcp_arg_str(args, "cwd", NULL),
		.stdin_mode = yields ? CORE_STDIN_PIPE : CORE_STDIN_CLOSED,
		.stdin_data = "",
		.timeout_ms = mcp_arg_int(args, "timeout_ms", 0),
		.stream = c->stream,
		.yield_ms = yields ? yield : -1,
		.detached = yields, /* like /v1's yield: it outlives this call */
	};
	struct core_op *op = argv ? core_exec(b, &r, &exec_cbs, c, e) : NULL;
	if (!argv)
		snprintf(e->msg, sizeof e->msg, "out of memory");
	json_decref(argv);
	return op;
}

static void ignore(void *arg, json_t *result, const char *data, size_t len,
		   const struct core_err *e)
{
}

static struct core_op *t_stdin(struct mcp_call *c, struct box *b, json_t *args,
			       struct core_err *e)
{
	int64_t pid = mcp_arg_int(args, "process_id", 0);
	int64_t yield = mcp_arg_int(args, "yield_ms", 250);
	size_t len;
	const char *data = mcp_arg_str(args, "data", &len);
	/* as /v1: the write, then the output for yield_ms (in order on the
	 * agent's connection); a failed write (the process ended) shows in
	 * the wait's answer */
	if (!core_stdin(b, pid, data, len, false, ignore, NULL, e))
		return NULL;
	c->stream = false;
	return core_attach(b, pid, false, yield ? yield : 1, &exec_cbs, c, e);
}

/* ---- files and the rest -------------------------------------------------------- */

static bool utf8_text(const char *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t l = p[i] ? moat_utf8_seq((const unsigned char *)p + i, n - i) : 0;
		if (!l)
			return false;
		i += l;
	}
	return true;
}

static const char *type_tag(const char *t)
{
	return !t ? "?" : !strcmp(t, "dir") ? "dir " : !strcmp(t, "symlink") ? "link" :
	       !strcmp(t, "file") ? "file" : "othr";
}

static json_t *listing_text(json_t *res)
{
	json_t *entries = json_object_get(res, "entries");
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (!m)
		return NULL;
	size_t i;
	json_t *en;
	json_array_foreach(entries, i, en)
	{
		const char *type = json_string_value(json_object_get(en, "type"));
		const char *path = json_string_value(json_object_get(en, "path"));
		if (type && !strcmp(type, "file"))
			fprintf(m, "%s %10lld %s\n", type_tag(type),
				(long long)json_integer_value(json_object_get(en, "size")),
				path ? path : "");
		else
			fprintf(m, "%s %10s %s\n", type_tag(type), "-", path ? path : "");
	}
	if (!json_array_size(entries))
		fputs("(empty directory)\n", m);
	if (json_is_true(json_object_get(res, "truncated")))
		fputs("(listing truncated)\n", m);
	fclose(m);
	json_t *r = ok(json_incref(res), "%s", buf ? buf : "");
	free(buf);
	return r;
}

static json_t *patch_text(json_t *res)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (!m)
		return NULL;
	fputs("patch applied:", m);
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(res, "files"), i, f)
	{
		const char *op = json_string_value(json_object_get(f, "op"));
		const char *path = json_string_value(json_object_get(f, "path"));
		fprintf(m, "\n%s %s", op ? op : "?", path ? path : "?");
	}
	fclose(m);
	json_t *r = ok(json_incref(res), "%s", buf ? buf : "");
	free(buf);
	return r;
}

static void on_done(void *arg, json_t *res, const char *data, size_t len,
		    const struct core_err *e)
{
	struct mcp_call *c = arg;
	if (e) {
		finish(c, failure(c->t, e));
		return;
	}
	json_object_del(res, "id"); /* the agent's request id, as api.c drops it */
	json_t *r = NULL;
	switch (c->t->op) {
	case MCP_OP_READ:
		if (!utf8_text(data, len)) {
			struct core_err be = {.status = 415};
			snprintf(be.code, sizeof be.code, "unsupported_media_type");
			snprintf(be.msg, sizeof be.msg,
				 "%.900s is binary (%zu bytes, not UTF-8 text): read_file returns "
				 "text only",
				 c->path, len);
			r = failure(c->t, &be);
			break;
		}
		r = result(json_pack("{s:s,s:I,s:s%}", "path", c->path, "size", (json_int_t)len,
				     "content", data ? data : "", len),
			   false, "%.*s", (int)len, data ? data : "");
		break;
	case MCP_OP_WRITE: {
		const char *abs = json_string_value(
			json_object_get(json_object_get(res, "entry"), "path"));
		const char *p = abs ? abs : c->path;
		r = ok(json_pack("{s:s,s:I}", "path", p, "size", (json_int_t)c->size),
		       "wrote %zu bytes to %s", c->size, p);
		break;
	}
	case MCP_OP_LS:
		r = listing_text(res);
		break;
	case MCP_OP_PATCH:
		r = patch_text(res);
		break;
	case MCP_OP_IMAGE: {
		const char *mime = json_string_value(json_object_get(res, "mime"));
		json_t *d = json_object_get(res, "data");
		/* the bytes once, as image content: structuredContent is /v1's
		 * answer without "data", or a host that shows structured results
		 * would give the model the base64 as text, twice the size */
		json_t *meta = json_is_object(res) ? json_deep_copy(res) : NULL;
		if (meta)
			json_object_del(meta, "data");
		r = mime && json_is_string(d) && meta
			    ? json_pack("{s:[{s:s,s:O,s:s}],s:O}", "content", "type", "image", "data",
					d, "mimeType", mime, "structuredContent", meta)
			    : mcp_tool_error("%s: the image answer has no data", c->t->name);
		json_decref(meta);
		break;
	}
	default:
		r = mcp_tool_error("%s: unexpected answer", c->t->name);
		break;
	}
	finish(c, r);
}

static void on_created(void *arg, struct box *b, const struct core_err *e)
{
	struct mcp_call *c = arg;
	if (!b) {
		finish(c, failure(c->t, e));
		return;
	}
	json_t *o = box_json(b);
	const char *img = json_string_value(json_object_get(o, "image"));
	const char *ws = json_string_value(json_object_get(o, "workspace"));
	finish(c, ok(o, "created sandbox %s (image %s, workspace %s); pass \"id\": \"%s\" to the "
			"other tools",
		     box_id(b), img ? img : "?", ws ? ws : "/workspace", box_id(b)));
}

static struct core_op *t_create(struct mcp_call *c, json_t *args, struct core_err *e)
{
	json_t *body = json_object();
	static const char *const keys[] = {"image", "manifest", "network", NULL};
	for (size_t i = 0; body && keys[i]; i++) {
		json_t *v = json_object_get(args, keys[i]);
		if (v && !json_is_null(v))
			json_object_set(body, keys[i], v);
	}
	struct core_create_opts o = {0};
	struct core_op *op = body ? core_create(body, &o, on_created, c, e) : NULL;
	if (!body)
		snprintf(e->msg, sizeof e->msg, "out of memory");
	json_decref(body);
	return op;
}

static void list_one(struct box *b, void *arg)
{
	json_array_append_new(arg, box_json(b));
}

static json_t *t_list(void)
{
	json_t *all = json_array();
	box_each(list_one, all);
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (m) {
		fprintf(m, "%zu sandbox%s", json_array_size(all),
			json_array_size(all) == 1 ? "" : "es");
		size_t i;
		json_t *s;
		json_array_foreach(all, i, s)
		{
			const char *id = json_string_value(json_object_get(s, "id"));
			const char *st = json_string_value(json_object_get(s, "state"));
			const char *img = json_string_value(json_object_get(s, "image"));
			const char *at = json_string_value(json_object_get(s, "created_at"));
			fprintf(m, "\n%s %s image %s created %s", id ? id : "?", st ? st : "?",
				img ? img : "?", at ? at : "?");
		}
		fclose(m);
	}
	json_t *r = ok(json_pack("{s:o}", "sandboxes", all), "%s", buf ? buf : "");
	free(buf);
	return r;
}

/* ---- dispatch --------------------------------------------------------------------- */

struct mcp_call *mcp_tools_call(const struct mcp_tool *t, json_t *args, bool stream,
				const struct mcp_call_cbs *cbs, void *arg, json_t **now)
{
	char why[512];
	*now = NULL;
	if (!mcp_args_check(t, args, why, sizeof why)) {
		*now = mcp_tool_error("%s", why);
		return NULL;
	}
	if (t->op == MCP_OP_LIST) {
		*now = t_list();
		return NULL;
	}
	struct box *b = NULL;
	if (t->op != MCP_OP_CREATE) {
		const char *id = mcp_arg_str(args, "id", NULL);
		b = box_find(id);
		if (!b) {
			struct core_err ne = {.status = 404};
			snprintf(ne.code, sizeof ne.code, "not_found");
			snprintf(ne.msg, sizeof ne.msg, "no sandbox \"%.64s\" (argument \"id\")", id);
			*now = failure(t, &ne);
			return NULL;
		}
		box_touch(b);
	}
	if (t->op == MCP_OP_DELETE) {
		char id[80];
		snprintf(id, sizeof id, "%s", box_id(b));
		core_delete(b);
		*now = ok(json_pack("{s:s,s:b}", "id", id, "deleted", 1), "deleted sandbox %s", id);
		return NULL;
	}
	struct mcp_call *c = call_new(t, cbs, arg, stream);
	if (!c) {
		*now = mcp_tool_error("%s: out of memory", t->name);
		return NULL;
	}
	struct core_err e = {0};
	struct core_op *op = NULL;
	const char *path = mcp_arg_str(args, "path", NULL);
	size_t len = 0;
	const char *data;
	if ((t->op == MCP_OP_READ || t->op == MCP_OP_WRITE) && !(c->path = strdup(path))) {
		call_free(c);
		*now = mcp_tool_error("%s: out of memory", t->name);
		return NULL;
	}
	switch (t->op) {
	case MCP_OP_CREATE:
		op = t_create(c, args, &e);
		break;
	case MCP_OP_EXEC:
		op = t_exec(c, b, args, &e);
		break;
	case MCP_OP_STDIN:
		op = t_stdin(c, b, args, &e);
		break;
	case MCP_OP_READ:
		op = core_read(b, path, NULL,
			       core_config()->max_file < READ_MAX ? core_config()->max_file : READ_MAX,
			       on_done, c, &e);
		break;
	case MCP_OP_WRITE:
		data = mcp_arg_str(args, "content", &len);
		c->size = len;
		op = core_write(b, path, data, len, NULL, on_done, c, &e);
		break;
	case MCP_OP_LS:
		op = core_list(b, path ? path : ".", NULL, (int)mcp_arg_int(args, "depth", 1), on_done,
			       c, &e);
		break;
	case MCP_OP_PATCH:
		data = mcp_arg_str(args, "patch", &len);
		op = core_patch(b, data, len, on_done, c, &e);
		break;
	case MCP_OP_IMAGE:
		op = core_image(b, path, on_done, c, &e);
		break;
	case MCP_OP_LIST:
	case MCP_OP_DELETE:
		break;
	}
	if (op) {
		c->op = op;
		return c;
	}
	call_free(c);
	*now = failure(t, &e);
	return NULL;
}
