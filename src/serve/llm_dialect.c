/* The three dialects of the LLM proxy: see llm_dialect.h. Everything here
 * reads bytes a sandbox or an upstream chose, so each input is bounded
 * (an SSE event, the text assembled from a stream, the number of content
 * blocks and tool calls) and every JSON value is checked for its type
 * before it is used. */
#define _GNU_SOURCE
#include "llm_dialect.h"

#include "jfield.h"

#include <stdlib.h>
#include <string.h>

/* An SSE event (its data lines) is refused past this. */
#define EVENT_MAX ((size_t)4 << 20)
/* Text, thinking and tool arguments assembled from one stream, in all. */
#define ASSEMBLED_MAX ((size_t)16 << 20)
/* Content blocks (Anthropic) or tool calls (chat) in one answer. */
#define SLOTS_MAX 256
/* A complete answer parsed at most (the proxy bounds what it keeps). */
#define ANSWER_MAX ((size_t)64 << 20)

int llm_dialect_of_path(const char *path)
{
	if (!path)
		return -1;
	if (!strcmp(path, "/v1/chat/completions"))
		return LLM_CHAT;
	if (!strcmp(path, "/v1/responses"))
		return LLM_RESPONSES;
	if (!strcmp(path, "/v1/messages"))
		return LLM_MESSAGES;
	return -1;
}

const char *llm_dialect_path(enum llm_dialect d)
{
	switch (d) {
	case LLM_CHAT:
		return "/v1/chat/completions";
	case LLM_RESPONSES:
		return "/v1/responses";
	case LLM_MESSAGES:
		return "/v1/messages";
	}
	return "/";
}

/* The field that carries the messages of a request. */
static const char *msg_field(enum llm_dialect d)
{
	return d == LLM_RESPONSES ? "input" : "messages";
}

/* ---- requests ---------------------------------------------------------------- */

int llm_req_inspect(enum llm_dialect d, const json_t *body, struct llm_req_info *out,
		    struct core_err *e)
{
	memset(out, 0, sizeof *out);
	if (!json_is_object(body)) {
		cerr(e, 400, "invalid_request", "the request body must be a JSON object");
		return -1;
	}
	json_t *m = json_object_get(body, "model");
	if (!json_is_string(m) || !json_string_length(m)) {
		cerr(e, 400, "invalid_request", "model: a non-empty string is required");
		return -1;
	}
	size_t ml = json_string_length(m);
	if (ml >= sizeof out->model || memchr(json_string_value(m), '\0', ml)) {
		cerr(e, 400, "invalid_request", "model: over %zu bytes or holds a NUL",
		     sizeof out->model - 1);
		return -1;
	}
	memcpy(out->model, json_string_value(m), ml + 1);
	json_t *st = json_object_get(body, "stream");
	if (st && !json_is_null(st) && !json_is_boolean(st)) {
		cerr(e, 400, "invalid_request", "stream: must be a boolean");
		return -1;
	}
	out->stream = json_is_true(st);
	const char *f = msg_field(d);
	json_t *msgs = json_object_get(body, f);
	/* Responses also takes its input as one string (the SDKs' short form) */
	if (!json_is_array(msgs) && !(d == LLM_RESPONSES && json_is_string(msgs))) {
		cerr(e, 400, "invalid_request", "%s: an array is required", f);
		return -1;
	}
	return 0;
}

void llm_req_prepare(enum llm_dialect d, json_t *body)
{
	/* Responses and Messages streams report usage by themselves */
	if (d != LLM_CHAT || !json_is_object(body) || !json_is_true(json_object_get(body, "stream")))
		return;
	json_t *so = json_object_get(body, "stream_options");
	if (!json_is_object(so)) {
		so = json_object();
		if (!so || json_object_set_new(body, "stream_options", so) < 0)
			return;
	}
	json_object_set_new(so, "include_usage", json_true());
}

/* ---- usage and answers ----------------------------------------------------------- */

static int64_t tokens(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	return json_integer_value(v);
}

static int64_t add_tokens(int64_t a, int64_t b)
{
	if (a < 0)
		return b;
	if (b < 0 || b > INT64_MAX - a)
		return a;
	return a + b;
}

/* The dialect's usage object (u untouched where it says nothing). */
static void usage_of(enum llm_dialect d, const json_t *usage, struct llm_usage *u)
{
	if (!json_is_object(usage))
		return;
	int64_t in, out;
	if (d == LLM_CHAT) {
		in = tokens(usage, "prompt_tokens");
		out = tokens(usage, "completion_tokens");
	} else {
		in = tokens(usage, "input_tokens");
		out = tokens(usage, "output_tokens");
		/* Anthropic counts cached input apart from input_tokens; OpenAI's
		 * input_tokens already include their cached part */
		if (d == LLM_MESSAGES && in >= 0) {
			in = add_tokens(in, tokens(usage, "cache_creation_input_tokens"));
			in = add_tokens(in, tokens(usage, "cache_read_input_tokens"));
		}
	}
	if (in >= 0)
		u->in = in;
	if (out >= 0)
		u->out = out;
}

/* chat: the assistant message as a later request wants it back (the
 * answer's extra fields, refusal: null, annotations, are not request
 * fields). NULL when message is not an assistant message. */
static json_t *chat_msg(const json_t *message)
{
	if (!json_is_object(message))
		return NULL;
	json_t *c = json_object_get(message, "content");
	json_t *tc = json_object_get(message, "tool_calls");
	if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c))
		return NULL;
	if (tc && !json_is_null(tc) && !json_is_array(tc))
		return NULL;
	json_t *m = json_pack("{s:s}", "role", "assistant");
	if (!m)
		return NULL;
	json_object_set_new(m, "content", json_is_string(c) || json_is_array(c) ? json_deep_copy(c)
										 : json_null());
	if (json_array_size(tc))
		json_object_set_new(m, "tool_calls", json_deep_copy(tc));
	return m;
}

int llm_answer_parse(enum llm_dialect d, const char *body, size_t len, struct llm_usage *u,
		     json_t **msgs)
{
	u->in = u->out = -1;
	*msgs = NULL;
	if (!body || len > ANSWER_MAX)
		return -1;
	json_t *a = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(a)) {
		json_decref(a);
		return -1;
	}
	/* usage counts even when the rest is not an answer we can store */
	usage_of(d, json_object_get(a, "usage"), u);
	json_t *out = json_array();
	int rc = -1;
	if (!out)
		goto done;
	if (d == LLM_CHAT) {
		json_t *ch = json_object_get(a, "choices");
		json_t *m = chat_msg(json_object_get(json_array_get(ch, 0), "message"));
		if (m && json_array_append_new(out, m) == 0)
			rc = 0;
	} else if (d == LLM_RESPONSES) {
		json_t *o = json_object_get(a, "output");
		size_t i;
		json_t *it;
		rc = json_is_array(o) ? 0 : -1;
		json_array_foreach(o, i, it)
		{
			if (!json_is_object(it) || json_array_append_new(out, json_deep_copy(it)) < 0) {
				rc = -1;
				break;
			}
		}
	} else {
		json_t *c = json_object_get(a, "content");
		json_t *ty = json_object_get(a, "type");
		if (json_is_array(c) && (!ty || (json_is_string(ty) &&
						 !strcmp(json_string_value(ty), "message")))) {
			json_t *m = json_pack("{s:s,s:O}", "role", "assistant", "content", c);
			if (m && json_array_append_new(out, m) == 0)
				rc = 0;
		}
	}
done:
	json_decref(a);
	if (rc < 0) {
		json_decref(out);
		return -1;
	}
	*msgs = out;
	return 0;
}

/* ---- streams ---------------------------------------------------------------------- */

struct sbuf {
	char *p;
	size_t len, cap;
};

static int sbuf_add(struct sbuf *b, const char *p, size_t n)
{
	if (n > SIZE_MAX / 2 - b->len)
		return -1;
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 256;
		while (c < b->len + n + 1)
			c *= 2;
		char *q = realloc(b->p, c);
		if (!q)
			return -1;
		b->p = q;
		b->cap = c;
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

static void sbuf_free(struct sbuf *b)
{
	free(b->p);
	*b = (struct sbuf){0};
}

/* A tool call (chat) or a content block (messages) being assembled. */
struct slot {
	bool used, stopped;
	json_t *base;        /* messages: the content_block of its start */
	struct sbuf id;      /* chat: the call's id */
	struct sbuf name;    /* chat: function.name pieces */
	struct sbuf text;    /* chat: arguments; messages: text, thinking or input JSON */
	struct sbuf sig;     /* messages: a thinking block's signature */
	enum { B_OTHER, B_TEXT, B_TOOL, B_THINKING } kind;
};

struct llm_stream {
	enum llm_dialect d;
	bool failed;   /* sticky: not SSE, too big, or not the dialect */
	bool errored;  /* the upstream said error in the stream */
	bool complete;
	bool cr;       /* the last byte was a CR (a CRLF may be split) */
	struct sbuf line;
	struct sbuf data;
	bool has_data;
	size_t event_bytes; /* bytes of the event in progress */
	size_t assembled;
	struct llm_usage u;
	struct sbuf text;   /* chat: the content */
	struct slot slots[SLOTS_MAX];
	size_t nslots;      /* highest index + 1 */
	json_t *output;     /* responses: response.output of response.completed */
};

struct llm_stream *llm_stream_new(enum llm_dialect d)
{
	struct llm_stream *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->d = d;
	s->u.in = s->u.out = -1;
	return s;
}

static void slot_free(struct slot *sl)
{
	json_decref(sl->base);
	sbuf_free(&sl->id);
	sbuf_free(&sl->name);
	sbuf_free(&sl->text);
	sbuf_free(&sl->sig);
	memset(sl, 0, sizeof *sl);
}

void llm_stream_free(struct llm_stream *s)
{
	if (!s)
		return;
	sbuf_free(&s->line);
	sbuf_free(&s->data);
	sbuf_free(&s->text);
	for (size_t i = 0; i < s->nslots; i++)
		slot_free(&s->slots[i]);
	json_decref(s->output);
	free(s);
}

/* Append a piece of assembled text, within ASSEMBLED_MAX. */
static int grow(struct llm_stream *s, struct sbuf *b, const json_t *piece)
{
	if (!piece || json_is_null(piece))
		return 0;
	if (!json_is_string(piece))
		return -1;
	size_t n = json_string_length(piece);
	if (n > ASSEMBLED_MAX - s->assembled)
		return -1;
	s->assembled += n;
	return sbuf_add(b, json_string_value(piece), n);
}

static struct slot *slot_at(struct llm_stream *s, const json_t *index)
{
	if (!json_is_integer(index) || json_integer_value(index) < 0 ||
	    json_integer_value(index) >= SLOTS_MAX)
		return NULL;
	size_t i = (size_t)json_integer_value(index);
	if (i >= s->nslots)
		s->nslots = i + 1;
	return &s->slots[i];
}

static const char *str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static int chat_event(struct llm_stream *s, const char *data, size_t len)
{
	if (len == 6 && !memcmp(data, "[DONE]", 6)) {
		if (!s->errored)
			s->complete = true;
		return 0;
	}
	json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
	int rc = -1;
	if (!json_is_object(j))
		goto out;
	rc = 0;
	if (json_object_get(j, "error")) {
		s->errored = true;
		goto out;
	}
	usage_of(LLM_CHAT, json_object_get(j, "usage"), &s->u);
	json_t *ch = json_object_get(j, "choices");
	if (ch && !json_is_array(ch)) {
		rc = -1;
		goto out;
	}
	/* with n > 1 the chunks carry other choices too: only the first is
	 * the conversation's */
	json_t *c0 = NULL, *c;
	size_t ci;
	json_array_foreach(ch, ci, c)
	{
		json_t *ix = json_object_get(c, "index");
		if (!ix || (json_is_integer(ix) && json_integer_value(ix) == 0)) {
			c0 = c;
			break;
		}
	}
	json_t *delta = json_object_get(c0, "delta");
	if (!json_is_object(delta))
		goto out; /* the usage chunk has no choices */
	if (grow(s, &s->text, json_object_get(delta, "content")) < 0) {
		rc = -1;
		goto out;
	}
	json_t *tcs = json_object_get(delta, "tool_calls");
	if (tcs && !json_is_null(tcs) && !json_is_array(tcs)) {
		rc = -1;
		goto out;
	}
	size_t i;
	json_t *tc;
	json_array_foreach(tcs, i, tc)
	{
		/* some OpenAI-compatible servers leave index out: the position */
		json_t *ix = json_object_get(tc, "index");
		json_t *pos = ix ? NULL : json_integer((json_int_t)i);
		struct slot *sl = slot_at(s, ix ? ix : pos);
		json_decref(pos);
		json_t *fn = json_object_get(tc, "function");
		if (!sl || (fn && !json_is_object(fn)) ||
		    (!sl->id.len && grow(s, &sl->id, json_object_get(tc, "id")) < 0) ||
		    grow(s, &sl->name, json_object_get(fn, "name")) < 0 ||
		    grow(s, &sl->text, json_object_get(fn, "arguments")) < 0) {
			rc = -1;
			goto out;
		}
		sl->used = true;
	}
out:
	json_decref(j);
	return rc;
}

static int responses_event(struct llm_stream *s, const char *data, size_t len)
{
	json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
	int rc = -1;
	if (!json_is_object(j))
		goto out;
	rc = 0;
	const char *t = str(j, "type");
	if (!t)
		goto out;
	json_t *r = json_object_get(j, "response");
	if (!strcmp(t, "response.completed") || !strcmp(t, "response.incomplete") ||
	    !strcmp(t, "response.failed"))
		usage_of(LLM_RESPONSES, json_object_get(r, "usage"), &s->u);
	/* response.incomplete is a whole answer cut by the model's own limit
	 * (max_output_tokens), as chat's finish_reason "length" is */
	if (!strcmp(t, "error") || !strcmp(t, "response.failed")) {
		s->errored = true;
	} else if ((!strcmp(t, "response.completed") || !strcmp(t, "response.incomplete")) &&
		   !s->errored) {
		json_t *o = json_object_get(r, "output");
		size_t i;
		json_t *it;
		if (!json_is_array(o)) {
			rc = -1;
			goto out;
		}
		json_array_foreach(o, i, it)
		{
			if (!json_is_object(it)) {
				rc = -1;
				goto out;
			}
		}
		json_decref(s->output);
		s->output = json_deep_copy(o);
		if (!s->output) {
			rc = -1;
			goto out;
		}
		s->complete = true;
	}
out:
	json_decref(j);
	return rc;
}

static int block_start(struct llm_stream *s, const json_t *j)
{
	struct slot *sl = slot_at(s, json_object_get(j, "index"));
	json_t *cb = json_object_get(j, "content_block");
	const char *ty = str(cb, "type");
	if (!sl || sl->used || !ty)
		return -1;
	sl->used = true;
	sl->base = json_deep_copy(cb);
	if (!sl->base)
		return -1;
	if (!strcmp(ty, "text")) {
		sl->kind = B_TEXT;
		return grow(s, &sl->text, json_object_get(cb, "text"));
	}
	if (!strcmp(ty, "thinking")) {
		sl->kind = B_THINKING;
		return grow(s, &sl->text, json_object_get(cb, "thinking")) < 0 ||
			       grow(s, &sl->sig, json_object_get(cb, "signature")) < 0
		       ? -1
		       : 0;
	}
	if (!strcmp(ty, "tool_use") || !strcmp(ty, "server_tool_use"))
		sl->kind = B_TOOL; /* input comes as JSON pieces */
	return 0;
}

static int block_delta(struct llm_stream *s, const json_t *j)
{
	struct slot *sl = slot_at(s, json_object_get(j, "index"));
	json_t *d = json_object_get(j, "delta");
	const char *ty = str(d, "type");
	if (!sl || !sl->used || sl->stopped || !ty)
		return -1;
	if (!strcmp(ty, "text_delta") && sl->kind == B_TEXT)
		return grow(s, &sl->text, json_object_get(d, "text"));
	if (!strcmp(ty, "input_json_delta") && sl->kind == B_TOOL)
		return grow(s, &sl->text, json_object_get(d, "partial_json"));
	if (!strcmp(ty, "thinking_delta") && sl->kind == B_THINKING)
		return grow(s, &sl->text, json_object_get(d, "thinking"));
	if (!strcmp(ty, "signature_delta") && sl->kind == B_THINKING)
		return grow(s, &sl->sig, json_object_get(d, "signature"));
	if (!strcmp(ty, "citations_delta"))
		return 0; /* annotations of text; not needed to continue */
	return -1;
}

static int set_text(json_t *o, const char *key, const struct sbuf *b)
{
	json_t *v = json_stringn(b->p ? b->p : "", b->len);
	return v ? json_object_set_new(o, key, v) : -1;
}

static int block_stop(struct llm_stream *s, const json_t *j)
{
	struct slot *sl = slot_at(s, json_object_get(j, "index"));
	if (!sl || !sl->used || sl->stopped)
		return -1;
	sl->stopped = true;
	switch (sl->kind) {
	case B_TEXT:
		return set_text(sl->base, "text", &sl->text);
	case B_THINKING:
		return set_text(sl->base, "thinking", &sl->text) < 0 ||
			       set_text(sl->base, "signature", &sl->sig) < 0
		       ? -1
		       : 0;
	case B_TOOL: {
		/* the pieces are a JSON object once all are in; none: {} */
		json_t *in = sl->text.len ? json_loadb(sl->text.p, sl->text.len,
						       JSON_REJECT_DUPLICATES, NULL)
					  : json_object();
		if (!json_is_object(in)) {
			json_decref(in);
			return -1;
		}
		return json_object_set_new(sl->base, "input", in);
	}
	case B_OTHER:
		return 0;
	}
	return -1;
}

static int messages_event(struct llm_stream *s, const char *data, size_t len)
{
	json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
	int rc = -1;
	if (!json_is_object(j))
		goto out;
	rc = 0;
	const char *t = str(j, "type");
	if (!t)
		goto out;
	if (!strcmp(t, "message_start")) {
		usage_of(LLM_MESSAGES, json_object_get(json_object_get(j, "message"), "usage"),
			 &s->u);
	} else if (!strcmp(t, "content_block_start")) {
		rc = block_start(s, j);
	} else if (!strcmp(t, "content_block_delta")) {
		rc = block_delta(s, j);
	} else if (!strcmp(t, "content_block_stop")) {
		rc = block_stop(s, j);
	} else if (!strcmp(t, "message_delta")) {
		/* output_tokens there is the total so far */
		usage_of(LLM_MESSAGES, json_object_get(j, "usage"), &s->u);
	} else if (!strcmp(t, "message_stop")) {
		for (size_t i = 0; i < s->nslots; i++)
			if (s->slots[i].used && !s->slots[i].stopped)
				rc = -1; /* a block left open: not a whole answer */
		if (rc == 0 && !s->errored)
			s->complete = true;
	} else if (!strcmp(t, "error")) {
		s->errored = true;
	}
out:
	json_decref(j);
	return rc;
}

/* An empty line: the event so far is dispatched. */
static int dispatch(struct llm_stream *s)
{
	s->event_bytes = 0;
	if (!s->has_data)
		return 0;
	s->has_data = false;
	size_t n = s->data.len;
	if (n && s->data.p[n - 1] == '\n')
		n--; /* the last data line's newline is not the data's */
	int rc = 0;
	if (!s->complete) {
		const char *p = s->data.p ? s->data.p : "";
		rc = s->d == LLM_CHAT	   ? chat_event(s, p, n)
		     : s->d == LLM_RESPONSES ? responses_event(s, p, n)
					     : messages_event(s, p, n);
	}
	s->data.len = 0;
	if (s->data.p)
		s->data.p[0] = '\0';
	return rc;
}

static int line_done(struct llm_stream *s)
{
	const char *l = s->line.p ? s->line.p : "";
	size_t n = s->line.len;
	int rc = 0;
	if (!n) {
		rc = dispatch(s);
	} else if (l[0] != ':') { /* a comment otherwise */
		const char *colon = memchr(l, ':', n);
		size_t fl = colon ? (size_t)(colon - l) : n;
		const char *v = colon ? colon + 1 : l + n;
		size_t vl = n - (size_t)(v - l);
		if (vl && *v == ' ') {
			v++;
			vl--;
		}
		/* event: names the event; the dialects say the same in data's
		 * "type", which is what is read. id: and retry: mean nothing here. */
		if (fl == 4 && !memcmp(l, "data", 4)) {
			s->has_data = true;
			rc = sbuf_add(&s->data, v, vl) < 0 || sbuf_add(&s->data, "\n", 1) < 0 ? -1 : 0;
		}
	}
	s->line.len = 0;
	if (s->line.p)
		s->line.p[0] = '\0';
	return rc;
}

int llm_stream_feed(struct llm_stream *s, const char *p, size_t n)
{
	if (!s || s->failed)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (c == '\n' && s->cr) {
			s->cr = false; /* the LF of a CRLF */
			continue;
		}
		s->cr = c == '\r';
		if (c == '\r' || c == '\n') {
			if (line_done(s) < 0)
				goto fail;
			continue;
		}
		/* a line in progress: take the run of bytes up to its end */
		size_t j = i;
		while (j < n && p[j] != '\r' && p[j] != '\n')
			j++;
		if (j - i > EVENT_MAX - s->event_bytes)
			goto fail;
		s->event_bytes += j - i;
		if (sbuf_add(&s->line, p + i, j - i) < 0)
			goto fail;
		i = j - 1;
	}
	return 0;
fail:
	/* nothing more is read: what was assembled cannot be trusted whole */
	s->failed = true;
	s->complete = false;
	sbuf_free(&s->line);
	sbuf_free(&s->data);
	return -1;
}

bool llm_stream_complete(const struct llm_stream *s)
{
	return s && s->complete && !s->failed;
}

void llm_stream_usage(const struct llm_stream *s, struct llm_usage *u)
{
	if (!s) {
		u->in = u->out = -1;
		return;
	}
	*u = s->u;
}

static json_t *chat_stream_msg(struct llm_stream *s)
{
	json_t *m = json_pack("{s:s}", "role", "assistant");
	json_t *calls = json_array();
	if (!m || !calls)
		goto fail;
	for (size_t i = 0; i < s->nslots; i++) {
		struct slot *sl = &s->slots[i];
		if (!sl->used)
			continue;
		json_t *fn = json_object();
		json_t *c = json_pack("{s:s}", "type", "function");
		if (!fn || !c || set_text(c, "id", &sl->id) < 0 || set_text(fn, "name", &sl->name) < 0 ||
		    set_text(fn, "arguments", &sl->text) < 0 || json_object_set_new(c, "function", fn) < 0) {
			json_decref(fn);
			json_decref(c);
			goto fail;
		}
		if (json_array_append_new(calls, c) < 0)
			goto fail;
	}
	if (s->text.len || !json_array_size(calls)) {
		if (set_text(m, "content", &s->text) < 0)
			goto fail;
	} else {
		json_object_set_new(m, "content", json_null());
	}
	if (json_array_size(calls))
		json_object_set(m, "tool_calls", calls);
	json_decref(calls);
	return m;
fail:
	json_decref(calls);
	json_decref(m);
	return NULL;
}

json_t *llm_stream_msgs(struct llm_stream *s)
{
	if (!llm_stream_complete(s))
		return NULL;
	if (s->d == LLM_RESPONSES)
		return json_deep_copy(s->output);
	json_t *out = json_array();
	if (!out)
		return NULL;
	if (s->d == LLM_CHAT) {
		json_t *m = chat_stream_msg(s);
		if (!m || json_array_append_new(out, m) < 0)
			goto fail;
		return out;
	}
	json_t *content = json_array();
	if (!content)
		goto fail;
	for (size_t i = 0; i < s->nslots; i++)
		if (s->slots[i].used && json_array_append(content, s->slots[i].base) < 0) {
			json_decref(content);
			goto fail;
		}
	json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", content);
	if (!m || json_array_append_new(out, m) < 0)
		goto fail;
	return out;
fail:
	json_decref(out);
	return NULL;
}

/* ---- conversation mode ---------------------------------------------------------------- */

const json_t *llm_conv_new(enum llm_dialect d, const json_t *turn)
{
	json_t *m = json_object_get(turn, msg_field(d));
	return json_is_array(m) ? m : NULL;
}

json_t *llm_conv_body(enum llm_dialect d, const json_t *turn, const json_t *history,
		      struct core_err *e)
{
	struct llm_req_info info;
	if (llm_req_inspect(d, turn, &info, e) < 0)
		return NULL;
	const char *f = msg_field(d);
	const json_t *new = llm_conv_new(d, turn);
	if (!new) {
		/* stored messages are items: a string input has none */
		cerr(e, 400, "invalid_request", "%s: an array is required in conversation mode", f);
		return NULL;
	}
	size_t i;
	json_t *it;
	json_array_foreach(new, i, it)
	{
		if (!json_is_object(it)) {
			cerr(e, 400, "invalid_request", "%s[%zu]: must be an object", f, i);
			return NULL;
		}
	}
	if (history && !json_is_array(history)) {
		cerr(e, 500, "internal", "the stored conversation is not an array");
		return NULL;
	}
	json_t *body = json_copy((json_t *)turn);
	json_t *all = json_array();
	if (!body || !all || (history && json_array_extend(all, (json_t *)history) < 0) ||
	    json_array_extend(all, (json_t *)new) < 0) {
		json_decref(body);
		json_decref(all);
		cerr(e, 500, "internal", "out of memory");
		return NULL;
	}
	if (json_object_set_new(body, f, all) < 0) { /* all is stolen either way */
		json_decref(body);
		cerr(e, 500, "internal", "out of memory");
		return NULL;
	}
	/* the control plane's own keys: not the upstream's business */
	json_object_del(body, "route");
	json_object_del(body, "dialect");
	json_object_del(body, "turn_id");
	return body;
}
