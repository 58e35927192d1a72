/* A session's artifacts and the one-time URLs that move them (artifacts.h,
 * docs/control-plane.md "Files").
 *
 * Tickets. POST /v1/files/upload-url or download-url on a session's
 * control listener makes a ticket: 32 random bytes (getrandom), shown as
 * 64 hex in the URL http://127.0.0.1:7878/files/<ticket>, kept in memory
 * only (a daemon restart forgets them: the agent asks again) with its
 * session, name, op (PUT or GET), size_max and expiry (--artifact-url-ttl).
 * The ticket is the authority for /files/<ticket> (no session token), but
 * only on the control listener of its own session's sandbox: presented on
 * another one it is "unknown" there (404) and stays usable by its owner.
 * On its own listener it is consumed by its first use, whatever the
 * outcome (an upload over size_max included); a second use, or one after
 * the expiry, is 404 not_found saying which. Used and expired tickets are
 * kept one more TTL so that the answer can say so, then dropped. A
 * session that ends loses its tickets.
 *
 * Uploads arrive whole (evhttp reads the body, bounded by the listener's
 * CP_MAX_BODY); over the ticket's size_max is 413 too_large before
 * anything is written. The bytes then go through the backend's
 * put_begin/put_write/put_commit, which stores all or nothing.
 *
 * Backends (artifacts_store.h): an ops table chosen once here. The
 * directory one (artifacts_dir.c) is <data>/artifacts/<session>/<name>.
 * An S3-compatible one plugs into the same table without the agent's side
 * changing (it only ever follows the "url" and "method" it is given):
 *  - relay (the default fit, keeps every guarantee): /files/<ticket> stays
 *    on the control listener; put_begin = CreateMultipartUpload of
 *    "<session>/<name>" (or a local spool for small ones), put_write =
 *    UploadPart, put_commit = CompleteMultipartUpload (S3 makes the object
 *    visible only then: the rename's all-or-nothing) with the sha256 as
 *    x-amz-meta-sha256, put_abort = AbortMultipartUpload; get returns a
 *    pipe fed by a libcurl GetObject (the "fd + size" stays the
 *    interface), list = ListObjectsV2 on the prefix, del = DeleteObject,
 *    purge = list + DeleteObjects. The store's credentials stay on the host.
 *  - presigned: upload-url/download-url would answer a presigned S3 URL
 *    instead of a ticket URL (an optional backend op, presign(sid, name,
 *    op, ttl, size_max) -> url). The sandbox then needs a route to the
 *    store (its network allowlist, through the egress gateway), S3 bounds
 *    the size only with a POST policy's content-length-range, and a
 *    presigned URL can be replayed until it expires: single use is lost,
 *    which is why the relay is the fit for this design.
 */
#define _GNU_SOURCE
#include "artifacts.h"
#include "artifacts_store.h"

#include "cp.h"
#include "http.h"
#include "session.h"

#include "../base/util.h"
#include "../base/utf8.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define TICKET_BYTES 32
#define TICKET_HEX (TICKET_BYTES * 2)
#define MAX_TICKETS 65536         /* in the table, all sessions */
#define MAX_SESSION_TICKETS 1024  /* live (unused, unexpired) per session */

enum ticket_op { TICKET_PUT, TICKET_GET };

struct ticket {
	unsigned char key[TICKET_BYTES];
	char sid[65];
	char name[256];
	enum ticket_op op;
	uint64_t size_max;
	int64_t expires_at; /* unix seconds, as told to the agent */
	int64_t expires_ms; /* CLOCK_MONOTONIC: what decides */
	bool used;
};

static struct {
	bool ready;
	uint64_t max_size;
	int64_t ttl_s;
	const struct artifacts_backend *be;
	struct ticket *t;
	size_t n, cap;
} A;

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int artifacts_init(const struct artifacts_config *c, struct moat_err *e)
{
	if (!c || !c->data_dir || !c->max_size || c->url_ttl_s <= 0)
		return moat_err_set(e, MOAT_E_USAGE, EINVAL,
				    "artifacts: a data directory, --artifact-max above 0 and "
				    "--artifact-url-ttl above 0 are needed");
	A.max_size = c->max_size;
	A.ttl_s = c->url_ttl_s;
	A.be = &artifacts_dir_backend;
	struct core_err ce = {0};
	if (A.be->init(c->data_dir, &ce) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EIO, "%s", ce.msg);
	A.ready = true;
	return 0;
}

void artifacts_shutdown(void)
{
	if (A.ready)
		A.be->shutdown();
	free(A.t);
	A.t = NULL;
	A.n = A.cap = 0;
	A.ready = false;
}

static int name_check_len(const char *name, size_t len, struct core_err *e)
{
	char q[MOAT_SHOWN_CAP];
	const char *why = NULL;
	if (!name || len == 0)
		why = "is empty";
	else if (len > 255)
		why = "is longer than 255 bytes";
	else if (memchr(name, '\0', len))
		why = "contains a NUL byte";
	else if (memchr(name, '/', len))
		why = "contains '/' (an artifact name is not a path)";
	else if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		why = "is \".\" or \"..\"";
	for (size_t i = 0; !why && i < len; i++) {
		unsigned char ch = (unsigned char)name[i];
		if (ch < 0x20 || ch == 0x7f)
			why = "contains a control character";
	}
	for (size_t i = 0; !why && i < len;) {
		size_t k = moat_utf8_seq((const unsigned char *)name + i, len - i);
		if (!k)
			why = "is not UTF-8";
		i += k;
	}
	if (!why)
		return 0;
	return artifacts_fail(e, 400, "invalid_request", "artifact name \"%s\" %s",
			      moat_show(q, name ? name : "", name ? len : 0), why);
}

int artifacts_name_check(const char *name, struct core_err *e)
{
	return name_check_len(name, name ? strlen(name) : 0, e);
}

static void reply_err(struct evhttp_request *req, const struct core_err *e)
{
	http_error(req, e->status ? e->status : 500, e->code[0] ? e->code : "internal", "%s",
		   e->msg);
}

/* ---- tickets ------------------------------------------------------------------- */

static void ticket_drop(size_t i)
{
	A.t[i] = A.t[--A.n];
}

/* Forget the tickets past their expiry by a TTL more (long enough for
 * "expired" or "already used" to be the answer to a late client). */
static void tickets_sweep(void)
{
	int64_t now = mono_ms();
	for (size_t i = 0; i < A.n;)
		if (now >= A.t[i].expires_ms + A.ttl_s * 1000)
			ticket_drop(i);
		else
			i++;
}

static void hex_of(const unsigned char *k, char out[TICKET_HEX + 1])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 0; i < TICKET_BYTES; i++) {
		out[2 * i] = d[k[i] >> 4];
		out[2 * i + 1] = d[k[i] & 15];
	}
	out[TICKET_HEX] = '\0';
}

static int ticket_new(const char *sid, const char *name, enum ticket_op op, uint64_t size_max,
		      char hex[TICKET_HEX + 1], int64_t *expires_at, struct core_err *e)
{
	tickets_sweep();
	int64_t now = mono_ms();
	size_t live = 0;
	for (size_t i = 0; i < A.n; i++)
		if (!strcmp(A.t[i].sid, sid) && !A.t[i].used && now < A.t[i].expires_ms)
			live++;
	if (live >= MAX_SESSION_TICKETS)
		return artifacts_fail(e, 429, "limit_reached",
				      "session %s has %d file URLs unused and unexpired; use them "
				      "or let them expire (--artifact-url-ttl %" PRId64 " s)",
				      sid, MAX_SESSION_TICKETS, A.ttl_s);
	if (A.n >= MAX_TICKETS)
		return artifacts_fail(e, 429, "limit_reached",
				      "the daemon holds %d file URLs; try again later", MAX_TICKETS);
	if (A.n == A.cap) {
		size_t cap = A.cap ? A.cap * 2 : 64;
		struct ticket *t = realloc(A.t, cap * sizeof *t);
		if (!t)
			return artifacts_fail(e, 500, "internal", "out of memory");
		A.t = t;
		A.cap = cap;
	}
	struct ticket *t = &A.t[A.n];
	memset(t, 0, sizeof *t);
	if (getrandom(t->key, sizeof t->key, 0) != (ssize_t)sizeof t->key)
		return artifacts_fail(e, 500, "internal", "getrandom: %s", strerror(errno));
	snprintf(t->sid, sizeof t->sid, "%s", sid);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->op = op;
	t->size_max = size_max;
	t->expires_ms = now + A.ttl_s * 1000;
	t->expires_at = (int64_t)time(NULL) + A.ttl_s;
	A.n++;
	hex_of(t->key, hex);
	*expires_at = t->expires_at;
	return 0;
}

static int unhex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The ticket a URL names, or NULL. Compared in constant time over the
 * whole table: the time taken says nothing of a ticket's bytes. */
static struct ticket *ticket_find(const char *hex)
{
	unsigned char k[TICKET_BYTES];
	if (strlen(hex) != TICKET_HEX)
		return NULL;
	for (int i = 0; i < TICKET_BYTES; i++) {
		int hi = unhex(hex[2 * i]), lo = unhex(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return NULL;
		k[i] = (unsigned char)(hi << 4 | lo);
	}
	struct ticket *found = NULL;
	for (size_t i = 0; i < A.n; i++) {
		unsigned char d = 0;
		for (int j = 0; j < TICKET_BYTES; j++)
			d |= (unsigned char)(A.t[i].key[j] ^ k[j]);
		if (!d)
			found = &A.t[i];
	}
	return found;
}

void artifacts_session_ended(const char *session_id, bool purge)
{
	if (!session_id)
		return;
	for (size_t i = 0; i < A.n;)
		if (!strcmp(A.t[i].sid, session_id))
			ticket_drop(i);
		else
			i++;
	if (purge && A.ready && artifacts_sid_ok(session_id)) {
		struct core_err e = {0};
		if (A.be->purge(session_id, &e) < 0)
			fprintf(stderr, "moat serve: %s\n", e.msg);
	}
}

/* ---- sandbox side -------------------------------------------------------------- */

static char *url_of(const char *hex)
{
	return moat_strdupf("%s/files/%s", cp_url(), hex);
}

/* {"name"} (and size_max for an upload): 400 naming what is wrong. */
static int body_name(json_t *body, bool with_size, const char **name, struct core_err *e)
{
	const char *k;
	json_t *v;
	json_object_foreach(body, k, v) {
		if (strcmp(k, "name") && (!with_size || strcmp(k, "size_max"))) {
			char q[MOAT_SHOWN_CAP];
			return artifacts_fail(e, 400, "invalid_request",
					      "unknown key \"%s\" in the body (expected %s)",
					      moat_show(q, k, strlen(k)),
					      with_size ? "name, size_max" : "name");
		}
	}
	v = json_object_get(body, "name");
	if (!json_is_string(v))
		return artifacts_fail(e, 400, "invalid_request",
				      "\"name\" (a string, the artifact's name) is required");
	if (name_check_len(json_string_value(v), json_string_length(v), e) < 0)
		return -1;
	*name = json_string_value(v);
	return 0;
}

static void h_url(struct evhttp_request *req, struct session *s, enum ticket_op op)
{
	struct core_err e = {0};
	const char *sid = session_id(s);
	if (!artifacts_sid_ok(sid)) {
		http_error(req, 500, "internal", "session id %.80s cannot name a store", sid);
		return;
	}
	/* NUL allowed in strings: a name holding one is refused by the name
	 * check, naming it, rather than as malformed JSON */
	json_t *body = http_body_json_flags(req, false, JSON_ALLOW_NUL);
	if (!body)
		return;
	const char *name = NULL;
	uint64_t size_max = A.max_size, size = 0;
	if (body_name(body, op == TICKET_PUT, &name, &e) < 0)
		goto fail;
	json_t *sm = json_object_get(body, "size_max");
	if (op == TICKET_PUT && sm) {
		if (!json_is_integer(sm) || json_integer_value(sm) <= 0) {
			artifacts_fail(&e, 400, "invalid_request",
				       "\"size_max\" must be a positive integer (bytes)");
			goto fail;
		}
		if ((uint64_t)json_integer_value(sm) > A.max_size) {
			artifacts_fail(&e, 400, "invalid_request",
				       "\"size_max\" %" PRId64 " is over the daemon's "
				       "--artifact-max of %" PRIu64 " bytes",
				       (int64_t)json_integer_value(sm), A.max_size);
			goto fail;
		}
		size_max = (uint64_t)json_integer_value(sm);
	}
	if (op == TICKET_GET) {
		struct artifacts_info info;
		if (A.be->get(sid, name, NULL, &info, &e) < 0)
			goto fail;
		size = size_max = info.size;
	}
	char hex[TICKET_HEX + 1];
	int64_t expires_at = 0;
	if (ticket_new(sid, name, op, size_max, hex, &expires_at, &e) < 0)
		goto fail;
	char *url = url_of(hex);
	json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:I}", "url", url, "method",
			      op == TICKET_PUT ? "PUT" : "GET", "name", name, "expires_at",
			      (json_int_t)expires_at, "size_max", (json_int_t)size_max);
	free(url);
	if (o && op == TICKET_GET)
		json_object_set_new(o, "size", json_integer((json_int_t)size));
	json_decref(body);
	if (!o) {
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	http_json(req, 200, o);
	return;
fail:
	json_decref(body);
	reply_err(req, &e);
}

/* The whole body to the backend, extent by extent (no copy into one
 * buffer). All or nothing. */
static int store_body(struct evbuffer *in, const struct ticket *t, struct artifacts_info *info,
		      struct core_err *e)
{
	struct artifacts_put *p = A.be->put_begin(t->sid, t->name, t->size_max, e);
	if (!p)
		return -1;
	int n = evbuffer_peek(in, -1, NULL, NULL, 0);
	struct evbuffer_iovec *v = n > 0 ? calloc((size_t)n, sizeof *v) : NULL;
	if (n > 0 && !v) {
		A.be->put_abort(p);
		return artifacts_fail(e, 500, "internal", "out of memory");
	}
	if (n > 0)
		n = evbuffer_peek(in, -1, NULL, v, n);
	for (int i = 0; i < n; i++)
		if (A.be->put_write(p, v[i].iov_base, v[i].iov_len, e) < 0) {
			free(v);
			A.be->put_abort(p);
			return -1;
		}
	free(v);
	return A.be->put_commit(p, info, e);
}

/* The artifact as the reply's body: the file itself (sendfile or mmap
 * by libevent), with its Content-Length. */
static void send_file(struct evhttp_request *req, int fd, uint64_t size)
{
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		close(fd);
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	if (size > 0) {
		struct evbuffer_file_segment *seg =
			evbuffer_file_segment_new(fd, 0, (ev_off_t)size, EVBUF_FS_CLOSE_ON_FREE);
		if (!seg) {
			close(fd); /* not taken on failure */
			evbuffer_free(b);
			http_error(req, 500, "internal", "cannot send the artifact");
			return;
		}
		int rc = evbuffer_add_file_segment(b, seg, 0, (ev_off_t)size);
		evbuffer_file_segment_free(seg); /* b holds its own reference */
		if (rc < 0) {
			evbuffer_free(b);
			http_error(req, 500, "internal", "cannot send the artifact");
			return;
		}
	} else {
		close(fd);
	}
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", "application/octet-stream");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_send_reply(req, 200, "OK", b);
	evbuffer_free(b);
}

static void h_file(struct evhttp_request *req, struct session *s, const char *hex)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	struct ticket *t = ticket_find(hex);
	/* another session's ticket is unknown here, and stays its owner's */
	if (!t || !s || strcmp(t->sid, session_id(s))) {
		http_error(req, 404, "not_found", "no such file URL on this session's control plane");
		return;
	}
	const char *want = t->op == TICKET_PUT ? "PUT" : "GET";
	if ((t->op == TICKET_PUT && m != EVHTTP_REQ_PUT) ||
	    (t->op == TICKET_GET && m != EVHTTP_REQ_GET)) {
		http_error(req, 405, "method_not_allowed", "this URL takes %s (it was not used)",
			   want);
		return;
	}
	if (t->used) {
		http_error(req, 404, "not_found", "this URL was already used");
		return;
	}
	if (mono_ms() >= t->expires_ms) {
		http_error(req, 404, "not_found",
			   "this URL expired at %" PRId64 " (unix time; it was valid for %" PRId64
			   " s)", t->expires_at, A.ttl_s);
		return;
	}
	t->used = true; /* the first use consumes it, whatever comes next */
	struct core_err e = {0};
	char q[MOAT_SHOWN_CAP];
	if (t->op == TICKET_PUT) {
		struct evbuffer *in = evhttp_request_get_input_buffer(req);
		uint64_t len = evbuffer_get_length(in);
		const char *cl =
			evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Length");
		uint64_t announced = cl ? strtoull(cl, NULL, 10) : 0;
		if (len > t->size_max || announced > t->size_max) {
			http_error(req, 413, "too_large",
				   "artifact \"%s\": %" PRIu64 " bytes, over this URL's size_max "
				   "of %" PRIu64 " (nothing stored)",
				   moat_show(q, t->name, strlen(t->name)),
				   len > announced ? len : announced, t->size_max);
			return;
		}
		struct artifacts_info info;
		if (store_body(in, t, &info, &e) < 0) {
			reply_err(req, &e);
			return;
		}
		session_account_bytes(s, len, 0);
		http_json(req, 201, json_pack("{s:s,s:I,s:s}", "name", t->name, "size",
					      (json_int_t)info.size, "sha256", info.sha256));
		return;
	}
	int fd = -1;
	struct artifacts_info info;
	if (A.be->get(t->sid, t->name, &fd, &info, &e) < 0) {
		reply_err(req, &e);
		return;
	}
	session_account_bytes(s, 0, info.size);
	send_file(req, fd, info.size);
}

void artifacts_cp_route(struct evhttp_request *req, struct session *s, const char *path)
{
	if (!A.ready) {
		http_error(req, 503, "unavailable", "the artifact store is not open");
		return;
	}
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (!strncmp(path, "/files/", 7)) {
		h_file(req, s, path + 7);
		return;
	}
	bool up = !strcmp(path, "/v1/files/upload-url");
	bool down = !strcmp(path, "/v1/files/download-url");
	if (!up && !down) {
		http_error(req, 404, "not_found", "no such route: %.200s", path);
		return;
	}
	if (!s) {
		http_error(req, 401, "unauthorized", "a session token is required");
		return;
	}
	if (m != EVHTTP_REQ_POST) {
		http_error(req, 405, "method_not_allowed", "%s takes POST", path);
		return;
	}
	h_url(req, s, up ? TICKET_PUT : TICKET_GET);
}

/* ---- host side ----------------------------------------------------------------- */

void artifacts_host_route(struct evhttp_request *req, const char *session_id, char **seg, int n)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	char q[MOAT_SHOWN_CAP];
	if (!session_id || !session_find(session_id) || !artifacts_sid_ok(session_id)) {
		const char *id = session_id ? session_id : "";
		http_error(req, 404, "not_found", "no session %s", moat_show(q, id, strlen(id)));
		return;
	}
	if (!A.ready) {
		http_error(req, 503, "unavailable", "the artifact store is not open");
		return;
	}
	struct core_err e = {0};
	if (n == 4) {
		if (m != EVHTTP_REQ_GET) {
			http_error(req, 405, "method_not_allowed", "a session's artifacts take GET");
			return;
		}
		json_t *arr = A.be->list(session_id, &e);
		if (!arr) {
			reply_err(req, &e);
			return;
		}
		http_json(req, 200, json_pack("{s:o}", "artifacts", arr));
		return;
	}
	if (n != 5) {
		http_error(req, 404, "not_found",
			   "no such route: an artifact's name is one path segment, percent-encoded");
		return;
	}
	size_t len = 0;
	char *name = evhttp_uridecode(seg[4], 0, &len);
	if (!name) {
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	if (name_check_len(name, len, &e) < 0) {
		reply_err(req, &e);
	} else if (m == EVHTTP_REQ_GET) {
		int fd = -1;
		struct artifacts_info info;
		if (A.be->get(session_id, name, &fd, &info, &e) < 0)
			reply_err(req, &e);
		else
			send_file(req, fd, info.size);
	} else if (m == EVHTTP_REQ_DELETE) {
		if (A.be->del(session_id, name, &e) < 0)
			reply_err(req, &e);
		else
			http_no_content(req);
	} else {
		http_error(req, 405, "method_not_allowed", "an artifact takes GET or DELETE");
	}
	free(name);
}
