/* moat mcp: the stdio transport of moat's MCP server, as a relay onto the
 * daemon's Streamable HTTP endpoint ($MOAT_URL/mcp). The protocol and the
 * tools live in the daemon (src/serve/mcp*.c); this file only moves
 * messages: each JSON-RPC line read on stdin is POSTed as it is, and every
 * JSON-RPC message of the answer (a JSON body, or the data of each
 * server-sent event as it arrives) is written to stdout as one line.
 *
 * Why a libcurl multi loop rather than one request at a time: a long exec
 * must not hold back what the host sends meanwhile, above all the
 * notifications/cancelled meant for it, which has to reach the daemon on a
 * second connection while the first still waits. Ordering kept: nothing
 * is sent while an initialize is in flight (later messages need its
 * session id), and a notification is a barrier (what the host wrote after
 * "notifications/initialized" reaches the daemon after it); requests run
 * side by side, as they do over HTTP. Responses and cancellations never
 * wait behind requests.
 *
 * Stdout carries protocol messages only; diagnostics go to stderr. When the
 * daemon cannot answer a request (unreachable, 401, 404, 5xx...), the host
 * still gets a JSON-RPC error for it, naming the URL and the HTTP status,
 * so that it never waits for an answer that cannot come. */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"
#include "linebuf.h"
#include "sse.h"

#include "../base/cleanup.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* One JSON-RPC message, either way: a write_file or a read_file of a few
 * MiB, base64 images; anything larger is refused with a clear error. */
#define MAX_MESSAGE ((size_t)64 << 20)
/* Requests on the wire at once; stdin is not read while MAX_QUEUED wait. */
#define MAX_INFLIGHT 16
#define MAX_QUEUED 64
/* JSON-RPC codes: -32700 parse error; -32000 is the start of the range
 * left to implementations, used for "the daemon did not answer". */
#define RPC_PARSE_ERROR (-32700)
#define RPC_RELAY_ERROR (-32000)

static const char cmd[] = "mcp";

enum kind {
	K_REQUEST,   /* has a method and an id: an answer is expected */
	K_INIT,      /* the initialize request */
	K_NOTIFY,    /* a notification: a barrier */
	K_CANCEL,    /* notifications/cancelled: never waits behind requests */
	K_RESPONSE,  /* the host's answer to a server request: never waits */
	K_OTHER,     /* a batch or an invalid message: the daemon says what */
};

struct relay;

struct msg {
	struct msg *next;     /* in the queue */
	struct msg *lnext;    /* in the list of transfers */
	struct relay *r;
	enum kind kind;
	char *body;
	size_t len;
	json_t *ids;          /* ids of the requests in it not answered yet */
	char what[80];        /* "tools/call" for diagnostics */
	bool with_session;    /* it carried an Mcp-Session-Id */
	CURL *easy;
	struct curl_slist *hdrs;
	char errbuf[CURL_ERROR_SIZE];
	bool decided, streaming, too_large, out_failed;
	bool dropped;         /* cancelled while queued: not sent */
	char *rbuf;           /* a buffered answer */
	size_t rlen, rcap;
	struct sse sse;       /* a streamed answer */
	char *session;        /* the answer's Mcp-Session-Id */
	struct moat_err err;
};

struct relay {
	struct moat_http *h;
	char *url;            /* $MOAT_URL/mcp */
	CURLM *multi;
	char *session;        /* learnt from the initialize answer */
	char *version;        /* the negotiated protocol version */
	struct msg *qhead, *qtail;  /* read, not sent yet */
	struct msg *live;           /* being sent or answered */
	size_t queued, inflight, barriers;
	bool init_inflight;
	bool eof, fatal;
	unsigned long lineno;
	struct linebuf lb;
};

/* ---- stdout ---------------------------------------------------------------- */

static int write_json(struct relay *r, json_t *m)
{
	_cleanup_free_ char *s = json_dumps(m, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!s) {
		fprintf(stderr, "moat mcp: cannot encode a message for stdout\n");
		return -1;
	}
	size_t n = strlen(s);
	if (fwrite(s, 1, n, stdout) != n || fputc('\n', stdout) == EOF || fflush(stdout) != 0) {
		if (!r->fatal)
			fprintf(stderr, "moat mcp: writing to stdout: %s\n", strerror(errno));
		r->fatal = true;
		return -1;
	}
	return 0;
}

/* Bytes from elsewhere (a proxy's error page) made printable ASCII, so
 * that they are a valid JSON string and one line. */
static void ascii(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			*s = '?';
}

/* {"jsonrpc":"2.0","id":id,"error":{"code","message","data":{url,status}}};
 * status 0: no HTTP answer. */
static int write_error(struct relay *r, json_t *id, int code, const char *message,
		       long status)
{
	/* status < 0: a local error (stdin), no daemon involved */
	json_t *data = status < 0 ? NULL : json_pack("{s:s}", "url", r->url);
	if (data && status > 0)
		json_object_set_new(data, "status", json_integer(status));
	/* A message cut at a byte bound or quoting a bad stdin line may not be
	 * UTF-8: then its bytes are made ASCII rather than the answer lost. */
	json_t *text = json_string(message);
	if (!text) {
		_cleanup_free_ char *copy = strdup(message);
		if (copy) {
			ascii(copy);
			text = json_string(copy);
		}
	}
	_cleanup_json_ json_t *m = text ? json_pack("{s:s, s:O, s:{s:i, s:o, s:o*}}",
		"jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code", code,
		"message", text, "data", data) : NULL;
	if (!text)
		json_decref(data);
	if (!m) {
		fprintf(stderr, "moat mcp: cannot build an error message: %s\n", message);
		return -1;
	}
	return write_json(r, m);
}

/* A JSON-RPC error for each request of m the daemon did not answer. */
static void fail_rest(struct msg *m, int code, const char *message, long status)
{
	size_t i;
	json_t *id;
	json_array_foreach(m->ids, i, id)
		write_error(m->r, id, code, message, status);
	json_array_clear(m->ids);
}

/* ---- answers --------------------------------------------------------------- */

/* One JSON-RPC message from the daemon, to stdout. */
static int emit_one(struct msg *m, json_t *j)
{
	struct relay *r = m->r;
	if (!json_is_object(j)) {
		fprintf(stderr, "moat mcp: %s answered %s with a batch holding a non-message: "
			"dropped\n", r->url, m->what);
		return 0;
	}
	json_t *id = json_object_get(j, "id");
	bool response = json_object_get(j, "result") || json_object_get(j, "error");
	if (id && response) {
		size_t i;
		json_t *want;
		json_array_foreach(m->ids, i, want) {
			if (json_equal(want, id)) {
				json_array_remove(m->ids, i);
				break;
			}
		}
	}
	const char *v = NULL;
	if (m->kind == K_INIT && json_unpack(j, "{s:{s:s}}", "result", "protocolVersion", &v) == 0) {
		/* it goes on every later request as a header: visible ASCII
		 * only, or a line break in it would add headers of its own */
		bool ok = *v && strlen(v) <= 64;
		for (const char *p = v; ok && *p; p++)
			ok = *p >= 0x21 && *p <= 0x7e;
		if (!ok) {
			fprintf(stderr, "moat mcp: %s answered initialize with an invalid "
				"protocolVersion: not sent as MCP-Protocol-Version\n", r->url);
			v = NULL;
		}
	}
	if (v) {
		char *nv = strdup(v);
		if (nv) {
			free(r->version);
			r->version = nv;
		}
	}
	return write_json(r, j);
}

/* A JSON text holding a message or a batch of them. */
static int emit_text(struct msg *m, const char *text, size_t len)
{
	json_error_t jerr;
	_cleanup_json_ json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
	if (!j || !(json_is_object(j) || json_is_array(j))) {
		fprintf(stderr, "moat mcp: %s answered %s with something that is not JSON-RPC%s%s\n",
			m->r->url, m->what, j ? "" : ": ", j ? "" : jerr.text);
		return 0; /* its requests get an error when the answer ends */
	}
	if (json_is_object(j))
		return emit_one(m, j);
	size_t i;
	json_t *el;
	json_array_foreach(j, i, el)
		if (emit_one(m, el) < 0)
			return -1;
	return 0;
}

static int on_event(void *arg, const char *type, const char *data, size_t len,
		    struct moat_err *e)
{
	struct msg *m = arg;
	if (strcmp(type, "message") != 0 || len == 0)
		return 0;
	if (emit_text(m, data, len) < 0) {
		m->out_failed = true;
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "writing to stdout");
	}
	return 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
	struct msg *m = arg;
	size_t n = size * nmemb;
	if (!m->decided) {
		m->decided = true;
		m->streaming = moat_http_is_stream(m->easy, "text/event-stream");
		if (m->streaming)
			sse_init(&m->sse, MAX_MESSAGE);
	}
	if (m->streaming)
		return sse_feed(&m->sse, data, n, on_event, m, &m->err) < 0 ? 0 : n;
	/* MAX_MESSAGE bytes and the NUL */
	if (!moat_http_buf_add(&m->rbuf, &m->rlen, &m->rcap, data, n, MAX_MESSAGE + 1)) {
		m->too_large = true;
		return 0;
	}
	return n;
}

/* Keeps the answer's Mcp-Session-Id (visible ASCII, as the spec says). */
static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
	struct msg *m = arg;
	size_t n = size * nmemb;
	static const char name[] = "mcp-session-id:";
	if (n > sizeof name - 1 && strncasecmp(data, name, sizeof name - 1) == 0) {
		const char *v = data + sizeof name - 1;
		const char *end = data + n;
		while (v < end && (*v == ' ' || *v == '\t'))
			v++;
		while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
			end--;
		bool ok = end > v && end - v <= 256;
		for (const char *p = v; ok && p < end; p++)
			ok = *p >= 0x21 && *p <= 0x7e;
		free(m->session);
		m->session = ok ? strndup(v, (size_t)(end - v)) : NULL;
		if (!ok)
			fprintf(stderr, "moat mcp: %s sent an invalid Mcp-Session-Id: ignored\n",
				m->r->url);
	}
	return n;
}

/* ---- requests -------------------------------------------------------------- */

static void msg_free(struct msg *m)
{
	if (!m)
		return;
	if (m->easy) {
		if (m->r && m->r->multi)
			curl_multi_remove_handle(m->r->multi, m->easy);
		curl_easy_cleanup(m->easy);
	}
	curl_slist_free_all(m->hdrs);
	if (m->streaming)
		sse_free(&m->sse);
	json_decref(m->ids);
	free(m->body);
	free(m->rbuf);
	free(m->session);
	free(m);
}

/* "name: value" (value NULL: name is the whole line) onto *l. */
static int add_header(struct curl_slist **l, const char *name, const char *v)
{
	_cleanup_free_ char *line = NULL;
	if (asprintf(&line, "%s%s%s", name, v ? ": " : "", v ? v : "") < 0)
		return -1;
	struct curl_slist *nl = curl_slist_append(*l, line);
	if (!nl)
		return -1;
	*l = nl;
	return 0;
}

/* An easy handle for method on r->url with the session's headers. */
static CURL *make_easy(struct relay *r, const char *method, bool with_version,
		       struct curl_slist **hdrs, char *errbuf)
{
	if (moat_http_base_headers(r->h, hdrs) < 0 ||
	    (r->session && add_header(hdrs, "Mcp-Session-Id", r->session) < 0) ||
	    (with_version && r->version &&
	     add_header(hdrs, "MCP-Protocol-Version", r->version) < 0))
		return NULL;
	if (strcmp(method, "POST") == 0 &&
	    (add_header(hdrs, "Content-Type", "application/json") < 0 ||
	     add_header(hdrs, "Accept", "application/json, text/event-stream") < 0))
		return NULL;
	CURL *c = curl_easy_init();
	if (!c)
		return NULL;
	CURLcode rc = moat_http_setopts(r->h, c, r->url, *hdrs, errbuf);
	if (rc == CURLE_OK && strcmp(method, "POST") != 0)
		rc = curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (rc != CURLE_OK) {
		curl_easy_cleanup(c);
		return NULL;
	}
	return c;
}

static bool can_start(const struct relay *r, const struct msg *m)
{
	if (r->init_inflight)
		return false; /* everything after it needs its session id */
	switch (m->kind) {
	case K_CANCEL:
	case K_RESPONSE:
		return true;
	case K_INIT:
	case K_NOTIFY:
	case K_REQUEST:
	case K_OTHER:
		return r->barriers == 0 && r->inflight < MAX_INFLIGHT;
	}
	return true;
}

static void start(struct relay *r, struct msg *m)
{
	m->with_session = r->session != NULL;
	m->easy = make_easy(r, "POST", m->kind != K_INIT, &m->hdrs, m->errbuf);
	CURLcode rc = CURLE_OK;
	if (m->easy) {
		rc = curl_easy_setopt(m->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)m->len);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(m->easy, CURLOPT_POSTFIELDS, m->body);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(m->easy, CURLOPT_WRITEFUNCTION, on_data);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(m->easy, CURLOPT_WRITEDATA, m);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(m->easy, CURLOPT_HEADERFUNCTION, on_header);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(m->easy, CURLOPT_HEADERDATA, m);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(m->easy, CURLOPT_PRIVATE, m);
	}
	if (!m->easy || rc != CURLE_OK ||
	    curl_multi_add_handle(r->multi, m->easy) != CURLM_OK) {
		fprintf(stderr, "moat mcp: cannot set up a request to %s\n", r->url);
		fail_rest(m, RPC_RELAY_ERROR, "moat mcp could not set up the request", 0);
		if (m->easy) {
			curl_easy_cleanup(m->easy);
			m->easy = NULL;
		}
		msg_free(m);
		return;
	}
	r->inflight++;
	m->lnext = r->live;
	r->live = m;
	if (m->kind == K_INIT)
		r->init_inflight = true;
	if (m->kind == K_NOTIFY || m->kind == K_INIT)
		r->barriers++;
}

static void pump(struct relay *r)
{
	while (r->qhead && !r->fatal && (r->qhead->dropped || can_start(r, r->qhead))) {
		struct msg *m = r->qhead;
		r->qhead = m->next;
		if (!r->qhead)
			r->qtail = NULL;
		r->queued--;
		m->next = NULL;
		if (m->dropped)
			msg_free(m); /* cancelled before it was sent */
		else
			start(r, m);
	}
}

/* What an error answer says: JSON-RPC's or /v1's error.message (its
 * JSON-RPC code into *code), else its first line. */
static void error_detail(const struct msg *m, char *out, size_t cap, int *code)
{
	out[0] = '\0';
	if (!m->rbuf || !m->rlen)
		return;
	json_error_t jerr;
	_cleanup_json_ json_t *j = json_loadb(m->rbuf, m->rlen, 0, &jerr);
	json_t *err = json_object_get(j, "error");
	const char *msg = json_string_value(json_object_get(err, "message"));
	json_t *c = json_object_get(err, "code");
	if (json_is_integer(c))
		*code = (int)json_integer_value(c);
	if (msg) {
		snprintf(out, cap, "%s", msg);
		return;
	}
	size_t n = strcspn(m->rbuf, "\r\n");
	if (n > 200)
		n = 200;
	snprintf(out, cap, "%.*s", (int)n, m->rbuf);
	ascii(out);
}

static bool connect_error(CURLcode c)
{
	return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST ||
	       c == CURLE_COULDNT_RESOLVE_PROXY || c == CURLE_URL_MALFORMAT ||
	       c == CURLE_UNSUPPORTED_PROTOCOL || c == CURLE_OPERATION_TIMEDOUT;
}

static void finish_failed(struct relay *r, struct msg *m, CURLcode rc)
{
	char text[MOAT_ERR_MSG + 256];
	long st = 0;
	curl_easy_getinfo(m->easy, CURLINFO_RESPONSE_CODE, &st);
	if (m->out_failed)
		return; /* stdout is gone: nobody to tell */
	if (m->too_large)
		snprintf(text, sizeof text, "the answer of moat serve at %s to %s is larger than %zu MiB",
			 r->url, m->what, MAX_MESSAGE >> 20);
	else if (m->streaming && m->err.msg[0])
		snprintf(text, sizeof text, "the event stream of moat serve at %s for %s: %s",
			 r->url, m->what, m->err.msg);
	else if (connect_error(rc) && st == 0)
		snprintf(text, sizeof text, "cannot reach moat serve at %s: %s", r->url,
			 m->errbuf[0] ? m->errbuf : curl_easy_strerror(rc));
	else
		snprintf(text, sizeof text, "the connection to moat serve at %s failed during %s: %s",
			 r->url, m->what, m->errbuf[0] ? m->errbuf : curl_easy_strerror(rc));
	fprintf(stderr, "moat mcp: %s\n", text);
	fail_rest(m, RPC_RELAY_ERROR, text, st);
}

static void finish_refused(struct relay *r, struct msg *m, long st)
{
	char detail[1024], text[MOAT_ERR_MSG + 1400];
	int code = RPC_RELAY_ERROR;
	error_detail(m, detail, sizeof detail, &code);
	const char *hint = "";
	if (st == 401)
		hint = " (check MOAT_API_TOKEN: moat serve's token)";
	else if (st == 404 && m->with_session)
		hint = " (the daemon does not know this MCP session: it was restarted or the "
		       "session was deleted; restart the MCP client)";
	else if (st == 404)
		hint = " (is MOAT_URL a moat serve with MCP?)";
	snprintf(text, sizeof text, "moat serve at %s answered HTTP %ld to %s%s%s%s", r->url,
		 st, m->what, detail[0] ? ": " : "", detail, hint);
	fprintf(stderr, "moat mcp: %s\n", text);
	if (json_array_size(m->ids) == 0 && m->kind != K_OTHER)
		return; /* a notification or a response: the stderr line is all */
	if (json_array_size(m->ids) == 0 && m->rlen) {
		/* an invalid message: the daemon's JSON-RPC error is the answer */
		json_error_t jerr;
		_cleanup_json_ json_t *j = json_loadb(m->rbuf, m->rlen, 0, &jerr);
		if (json_is_object(j) && json_object_get(j, "jsonrpc"))
			write_json(r, j);
		return;
	}
	fail_rest(m, code, text, st);
}

/* A transfer is over: the accounting of the loop. */
static void finish(struct relay *r, struct msg *m)
{
	r->inflight--;
	if (m->kind == K_INIT)
		r->init_inflight = false;
	if (m->kind == K_NOTIFY || m->kind == K_INIT)
		r->barriers--;
	for (struct msg **p = &r->live; *p; p = &(*p)->lnext) {
		if (*p == m) {
			*p = m->lnext;
			break;
		}
	}
}

/* A transfer ended: its answer is out; errors for what it left unanswered. */
static void done(struct relay *r, struct msg *m, CURLcode rc)
{
	finish(r, m);
	long st = 0;
	curl_easy_getinfo(m->easy, CURLINFO_RESPONSE_CODE, &st);
	if (rc != CURLE_OK) {
		finish_failed(r, m, rc);
	} else if (st < 200 || st >= 300) {
		finish_refused(r, m, st);
	} else {
		if (m->kind == K_INIT && m->session) {
			free(r->session);
			r->session = steal_ptr(&m->session);
		}
		if (!m->streaming && m->rlen && emit_text(m, m->rbuf, m->rlen) < 0)
			m->out_failed = true;
		if (!m->out_failed && json_array_size(m->ids)) {
			char text[512];
			snprintf(text, sizeof text, "moat serve at %s answered %s (HTTP %ld) "
				 "without a response to it", r->url, m->what, st);
			fprintf(stderr, "moat mcp: %s\n", text);
			fail_rest(m, RPC_RELAY_ERROR, text, st);
		}
	}
	if (m->out_failed)
		r->fatal = true;
	msg_free(m);
}

static void reap(struct relay *r)
{
	CURLMsg *cm;
	int left;
	while ((cm = curl_multi_info_read(r->multi, &left))) {
		if (cm->msg != CURLMSG_DONE)
			continue;
		struct msg *m = NULL;
		curl_easy_getinfo(cm->easy_handle, CURLINFO_PRIVATE, (char **)&m);
		CURLcode rc = cm->data.result;
		if (m)
			done(r, m, rc);
	}
}

/* ---- stdin ----------------------------------------------------------------- */

static void note_ids(json_t *ids, json_t *j)
{
	json_t *id = json_object_get(j, "id");
	if (id && json_is_string(json_object_get(j, "method")))
		json_array_append(ids, id);
}

/* The host cancelled this request: it expects no answer (the daemon ends
 * the exchange with 202), so none is made up for it; one still queued is
 * not sent at all. An answer the daemon still sends is relayed: the spec
 * lets a cancellation arrive too late. */
static void forget(struct relay *r, json_t *rid)
{
	struct msg *lists[] = {r->live, r->qhead};
	for (size_t l = 0; rid && l < 2; l++) {
		for (struct msg *m = lists[l]; m; m = l == 0 ? m->lnext : m->next) {
			size_t i;
			json_t *id;
			json_array_foreach(m->ids, i, id) {
				if (json_equal(id, rid)) {
					json_array_remove(m->ids, i);
					/* not sent yet: it never will be (the cancel still
					 * goes: the daemon ignores one for an unknown id) */
					if (l == 1 && m->kind == K_REQUEST)
						m->dropped = true;
					return;
				}
			}
		}
	}
}

static int on_line(void *arg, const char *line, size_t len, bool too_long,
		   struct moat_err *e)
{
	struct relay *r = arg;
	r->lineno++;
	if (too_long) {
		char text[256];
		snprintf(text, sizeof text, "Parse error: line %lu of stdin is longer than %zu MiB: dropped",
			 r->lineno, MAX_MESSAGE >> 20);
		fprintf(stderr, "moat mcp: %s\n", text);
		write_error(r, NULL, RPC_PARSE_ERROR, text, -1); /* a failure sets r->fatal */
		return 0;
	}
	size_t sp = 0;
	while (sp < len && strchr(" \t\r", line[sp]))
		sp++;
	if (sp == len)
		return 0; /* blank lines carry nothing */
	json_error_t jerr;
	_cleanup_json_ json_t *j = json_loadb(line, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
	if (!j) {
		char text[400];
		snprintf(text, sizeof text, "Parse error: line %lu of stdin is not JSON: %s (at byte %d)",
			 r->lineno, jerr.text, jerr.position);
		fprintf(stderr, "moat mcp: %s\n", text);
		write_error(r, NULL, RPC_PARSE_ERROR, text, -1);
		return 0;
	}
	struct msg *m = calloc(1, sizeof *m);
	if (!m)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "message");
	m->r = r;
	m->ids = json_array();
	m->body = malloc(len ? len : 1);
	if (!m->ids || !m->body) {
		msg_free(m);
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "message");
	}
	memcpy(m->body, line, len);
	m->len = len;
	const char *method = json_string_value(json_object_get(j, "method"));
	if (json_is_object(j) && method) {
		bool req = json_object_get(j, "id") != NULL;
		m->kind = !req ? (strcmp(method, "notifications/cancelled") == 0 ? K_CANCEL : K_NOTIFY)
			: strcmp(method, "initialize") == 0 ? K_INIT : K_REQUEST;
		note_ids(m->ids, j);
		snprintf(m->what, sizeof m->what, "%s", method);
		ascii(m->what);
	} else if (json_is_object(j) && (json_object_get(j, "result") || json_object_get(j, "error"))) {
		m->kind = K_RESPONSE;
		snprintf(m->what, sizeof m->what, "a response");
	} else {
		m->kind = K_OTHER;
		size_t i;
		json_t *el;
		json_array_foreach(j, i, el)
			note_ids(m->ids, el);
		snprintf(m->what, sizeof m->what, json_is_array(j) ? "a batch" : "line %lu",
			 r->lineno);
	}
	if (m->kind == K_CANCEL)
		forget(r, json_object_get(json_object_get(j, "params"), "requestId"));
	if (r->qtail)
		r->qtail->next = m;
	else
		r->qhead = m;
	r->qtail = m;
	r->queued++;
	return 0;
}

/* One read(2) of what stdin has: never blocks after poll said readable. */
static int read_stdin(struct relay *r, struct moat_err *e)
{
	char buf[65536];
	ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n < 0) {
		fprintf(stderr, "moat mcp: reading stdin: %s\n", strerror(errno));
		n = 0;
	}
	if (n == 0) {
		r->eof = true;
		return linebuf_finish(&r->lb, on_line, r, e);
	}
	return linebuf_feed(&r->lb, buf, (size_t)n, on_line, r, e);
}

/* ---- the loop -------------------------------------------------------------- */

static int sigpipe_fds[2] = {-1, -1};

static void on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;
	if (write(sigpipe_fds[1], &c, 1) < 0) {
		/* full pipe: a signal is already pending */
	}
	errno = saved;
}

static int setup_signals(void)
{
	if (pipe2(sigpipe_fds, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	struct sigaction ign = {.sa_handler = SIG_IGN};
	sigemptyset(&ign.sa_mask);
	/* SIGPIPE ignored: a host that went away is a write error, not a death. */
	if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0 ||
	    sigaction(SIGHUP, &sa, NULL) < 0 || sigaction(SIGPIPE, &ign, NULL) < 0)
		return -1;
	return 0;
}

/* DELETE /mcp: the daemon forgets the session (its sandboxes stay). */
static void end_session(struct relay *r)
{
	if (!r->session)
		return;
	struct curl_slist *hdrs = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	CURL *c = make_easy(r, "DELETE", true, &hdrs, errbuf);
	if (c) {
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
		curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
		CURLcode rc = curl_easy_perform(c);
		long st = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
		if (rc != CURLE_OK)
			fprintf(stderr, "moat mcp: ending the session at %s: %s\n", r->url,
				errbuf[0] ? errbuf : curl_easy_strerror(rc));
		else if ((st < 200 || st >= 300) && st != 404 && st != 405)
			fprintf(stderr, "moat mcp: ending the session at %s: HTTP %ld\n", r->url, st);
		curl_easy_cleanup(c);
	}
	curl_slist_free_all(hdrs);
}

static void relay_free(struct relay *r)
{
	while (r->qhead) {
		struct msg *m = r->qhead;
		r->qhead = m->next;
		msg_free(m);
	}
	/* transfers still running (a signal): abandon them */
	while (r->live) {
		struct msg *m = r->live;
		r->live = m->lnext;
		msg_free(m);
	}
	if (r->multi)
		curl_multi_cleanup(r->multi);
	linebuf_free(&r->lb);
	free(r->session);
	free(r->version);
	free(r->url);
	moat_http_free(r->h);
}

static void usage(FILE *f)
{
	fputs("usage: moat mcp\n"
	      "\n"
	      "Serve the Model Context Protocol over stdio for an MCP host (Claude Code,\n"
	      "Codex CLI...): each JSON-RPC message read on stdin (one per line) goes to\n"
	      "moat serve's MCP endpoint, $MOAT_URL/mcp, and its answers come back on\n"
	      "stdout, one per line. The tools are moat serve's (docs/mcp.md).\n"
	      "exit status: 0 at the end of stdin; 125 when moat mcp cannot go on.\n", f);
	client_help_footer(f);
}

int moat_client_mcp(int argc, char **argv)
{
	static const struct option opts[] = {
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		return client_bad_option(cmd, c, argv);
	}
	if (optind < argc)
		return client_fail(cmd, "unexpected argument '%s' (see moat mcp --help)", argv[optind]);

	struct moat_err e = {0};
	struct relay r = {0};
	linebuf_init(&r.lb, MAX_MESSAGE);
	r.h = moat_http_new(&e);
	if (!r.h) {
		relay_free(&r);
		return client_fail_err(cmd, &e);
	}
	if (asprintf(&r.url, "%s/mcp", moat_http_url(r.h)) < 0) {
		r.url = NULL;
		relay_free(&r);
		return client_fail(cmd, "out of memory");
	}
	for (const char *p = r.url; *p; p++) {
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p > 0x7e) {
			relay_free(&r);
			return client_fail(cmd, "MOAT_URL must be a URL (printable ASCII, no spaces)");
		}
	}
	r.multi = curl_multi_init();
	if (!r.multi || setup_signals() < 0) {
		relay_free(&r);
		return client_fail(cmd, "cannot set up: %s", strerror(errno));
	}

	bool stopped = false;
	int status = 0;
	while (!r.fatal && !stopped) {
		int running = 0;
		if (curl_multi_perform(r.multi, &running) != CURLM_OK) {
			fprintf(stderr, "moat mcp: libcurl failed\n");
			status = CLIENT_FAIL;
			break;
		}
		reap(&r);
		pump(&r);
		if (r.eof && !r.qhead && r.inflight == 0)
			break;
		bool want_stdin = !r.eof && r.queued < MAX_QUEUED;
		struct curl_waitfd w[2] = {
			{.fd = sigpipe_fds[0], .events = CURL_WAIT_POLLIN},
			{.fd = STDIN_FILENO, .events = CURL_WAIT_POLLIN},
		};
		curl_multi_poll(r.multi, w, want_stdin ? 2 : 1, 1000, NULL);
		/* poll(2) again to tell readable from hung up portably across
		 * libcurl versions; it does not wait. */
		struct pollfd p[2] = {
			{.fd = sigpipe_fds[0], .events = POLLIN},
			{.fd = STDIN_FILENO, .events = POLLIN},
		};
		if (poll(p, want_stdin ? 2 : 1, 0) < 0 && errno != EINTR) {
			fprintf(stderr, "moat mcp: poll: %s\n", strerror(errno));
			status = CLIENT_FAIL;
			break;
		}
		if (p[0].revents & POLLIN) {
			stopped = true;
			break;
		}
		if (want_stdin && (p[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
			if (p[1].revents & POLLNVAL) {
				r.eof = true;
			} else if (read_stdin(&r, &e) < 0) {
				fprintf(stderr, "moat mcp: %s\n", e.msg);
				status = CLIENT_FAIL;
				break;
			}
		}
	}
	if (r.fatal)
		status = CLIENT_FAIL;
	end_session(&r);
	relay_free(&r);
	return status;
}
