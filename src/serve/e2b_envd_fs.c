/* E2B envd's filesystem.Filesystem service (e2b-protocol.md §3.3) and its
 * plain HTTP /files (§3.4: downloads, multipart and octet-stream uploads,
 * signed URLs) onto the operation core. Shared plumbing: e2b_envd_int.h. */
#define _GNU_SOURCE
#include "e2b_envd_int.h"
#include "e2b_int.h"

#include "connect.h"
#include "core.h"
#include "http.h"
#include "multipart.h"
#include "../base/utf8.h"

#include <errno.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_PARTS 1000

/* Go's os.FileMode.String() for a type letter (0: regular) and mode bits. */
static void go_perm(char out[16], char type, unsigned mode)
{
	char *p = out;
	if (type)
		*p++ = type;
	if (mode & 04000)
		*p++ = 'u';
	if (mode & 02000)
		*p++ = 'g';
	if (mode & 01000)
		*p++ = 't';
	if (p == out)
		*p++ = '-';
	static const char rwx[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		*p++ = (mode & (1u << (8 - i))) ? rwx[i] : '-';
	*p = '\0';
}

/* ---- proto messages ---------------------------------------------------- */

static const char *const file_types[] = {"FILE_TYPE_UNSPECIFIED", "FILE_TYPE_FILE",
					 "FILE_TYPE_DIRECTORY", "FILE_TYPE_SYMLINK"};

static int file_type_of(const char *t)
{
	if (!t)
		return 0;
	if (!strcmp(t, "file"))
		return 1;
	if (!strcmp(t, "dir"))
		return 2;
	if (!strcmp(t, "symlink"))
		return 3;
	return 0;
}

/* A core entry as envd's EntryInfo. Symlinks report their target's type
 * when the core tells it ("target_type"), and symlinkTarget absolute. */
static json_t *entry_info(const json_t *en)
{
	if (!json_is_object(en))
		return json_object();
	const char *name = envd_jstr(en, "name"), *path = envd_jstr(en, "path"), *type = envd_jstr(en, "type");
	const char *target = envd_jstr(en, "symlink_target");
	if (!target)
		target = envd_jstr(en, "target");
	int ft = file_type_of(type);
	char tc = 0;
	if (ft == 2)
		tc = 'd';
	else if (ft == 3)
		tc = 'L';
	else if (ft == 0)
		tc = '?';
	if (ft == 3) {
		int tt = file_type_of(envd_jstr(en, "target_type"));
		if (tt == 1 || tt == 2)
			ft = tt;
	}
	unsigned mode = (unsigned)envd_jint(en, "mode");
	char perm[16];
	go_perm(perm, tc, mode);
	json_t *o = json_object();
	if (!o)
		return NULL;
	json_object_set_new(o, "name", json_string(name ? name : (path ? envd_base_name(path) : "")));
	json_object_set_new(o, "type", json_string(file_types[ft]));
	json_object_set_new(o, "path", json_string(path ? path : ""));
	json_object_set_new(o, "size", pj_int64_json(envd_jint(en, "size")));
	json_object_set_new(o, "mode", json_integer(mode & 0777));
	json_object_set_new(o, "permissions", json_string(perm));
	const char *owner = envd_jstr(en, "owner"), *group = envd_jstr(en, "group");
	char num[24];
	if (owner) {
		json_object_set_new(o, "owner", json_string(owner));
	} else {
		snprintf(num, sizeof num, "%" PRId64, envd_jint(en, "uid"));
		json_object_set_new(o, "owner", json_string(num));
	}
	if (group) {
		json_object_set_new(o, "group", json_string(group));
	} else {
		snprintf(num, sizeof num, "%" PRId64, envd_jint(en, "gid"));
		json_object_set_new(o, "group", json_string(num));
	}
	json_object_set_new(o, "modifiedTime",
			    pj_timestamp(envd_jint(en, "mtime"), envd_jint(en, "mtime_ns")));
	if (target) {
		char joined[PATH_CAP * 2], clean[PATH_CAP];
		if (target[0] == '/' || !path) {
			snprintf(joined, sizeof joined, "%s", target);
		} else {
			const char *slash = strrchr(path, '/');
			int dl = slash ? (int)(slash - path) : 0;
			snprintf(joined, sizeof joined, "%.*s/%s", dl, path, target);
		}
		if (joined[0] == '/' && envd_path_clean(joined, clean, sizeof clean) == 0)
			json_object_set_new(o, "symlinkTarget", json_string(clean));
		else
			json_object_set_new(o, "symlinkTarget", json_string(target));
	}
	json_t *md = json_object_get(en, "metadata");
	if (json_is_object(md) && json_object_size(md))
		json_object_set(o, "metadata", md);
	return o;
}

static const char *event_type(const char *t)
{
	static const struct {
		const char *core, *envd;
	} m[] = {{"create", "EVENT_TYPE_CREATE"}, {"write", "EVENT_TYPE_WRITE"},
		 {"remove", "EVENT_TYPE_REMOVE"}, {"rename", "EVENT_TYPE_RENAME"},
		 {"chmod", "EVENT_TYPE_CHMOD"}};
	for (size_t i = 0; t && i < sizeof m / sizeof m[0]; i++)
		if (!strcmp(t, m[i].core))
			return m[i].envd;
	return NULL;
}

/* A core watch event as a FilesystemEvent, or NULL (overflow, unknown). */
static json_t *fs_event(const json_t *ev)
{
	const char *t = event_type(envd_jstr(ev, "type"));
	const char *name = envd_jstr(ev, "name");
	if (!t || !name)
		return NULL;
	json_t *o = json_pack("{s:s,s:s}", "name", name, "type", t);
	json_t *en = json_object_get(ev, "entry");
	if (o && json_is_object(en))
		json_object_set_new(o, "entry", entry_info(en));
	return o;
}
static bool no_space(const struct core_err *e)
{
	return !strcmp(e->code, "no_space") || strcasestr(e->msg, "no space") ||
	       strstr(e->msg, "ENOSPC") || strcasestr(e->msg, "disk full");
}

static void on_done(void *arg, json_t *result, const char *data, size_t len,
		    const struct core_err *e);
static void files_done(void *arg, json_t *result, const char *data, size_t len,
		       const struct core_err *e);

/* ---- filesystem.Filesystem ------------------------------------------------------ */

void envd_f_stat(struct envd_call *c, json_t *msg)
{
	struct core_err e = {0};
	if (envd_path_field(c, msg, "path", "path", c->path) < 0)
		return;
	c->op = core_stat(c->b, c->path, c->user, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

void envd_f_mkdir(struct envd_call *c, json_t *msg)
{
	struct core_err e = {0};
	if (envd_path_field(c, msg, "path", "path", c->path) < 0)
		return;
	c->op = core_mkdir(c->b, c->path, c->user, true, false, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

void envd_f_move(struct envd_call *c, json_t *msg)
{
	struct core_err e = {0};
	char dst[PATH_CAP];
	if (envd_path_field(c, msg, "source", "source", c->path) < 0 ||
	    envd_path_field(c, msg, "destination", "destination", dst) < 0)
		return;
	c->op = core_move(c->b, c->path, dst, c->user, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

void envd_f_list(struct envd_call *c, json_t *msg)
{
	struct core_err e = {0};
	uint32_t depth = 0;
	if (envd_path_field(c, msg, "path", "path", c->path) < 0 ||
	    envd_opt_u32(c, msg, "depth", "depth", &depth) < 0)
		return;
	if (depth == 0)
		depth = 1;
	if (depth > 64)
		depth = 64;
	c->op = core_list(c->b, c->path, c->user, (int)depth, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

void envd_f_remove(struct envd_call *c, json_t *msg)
{
	struct core_err e = {0};
	if (envd_path_field(c, msg, "path", "path", c->path) < 0)
		return;
	c->op = core_remove(c->b, c->path, c->user, true, on_done, c, &e);
	if (!c->op) {
		if (!strcmp(e.code, "not_found"))
			envd_ok(c, json_object());
		else
			envd_fail(c, envd_code_of(&e), "%s", e.msg);
	}
}

static int watch_opts(struct envd_call *c, json_t *msg, bool *rec, bool *inc)
{
	*rec = *inc = false;
	if (envd_path_field(c, msg, "path", "path", c->path) < 0 ||
	    envd_opt_bool(c, msg, "recursive", "recursive", rec) < 0 ||
	    envd_opt_bool(c, msg, "includeEntry", "include_entry", inc) < 0)
		return -1;
	return 0;
}

static void on_wstarted(void *arg)
{
	struct envd_call *c = arg;
	if (c->first_sent)
		return;
	c->first_sent = true;
	envd_stream_send(c, json_pack("{s:{}}", "start"));
	envd_keepalive_start(c);
}

static void on_wevent(void *arg, json_t *ev)
{
	struct envd_call *c = arg;
	on_wstarted(c);
	json_t *fe = fs_event(ev);
	if (fe)
		envd_stream_send(c, json_pack("{s:o}", "filesystem", fe));
}

static void on_wfailed(void *arg, const struct core_err *e)
{
	struct envd_call *c = arg;
	c->op = NULL;
	envd_stream_end(c, envd_code_of(e), e->msg);
}

static const struct core_watch_cbs watch_cbs = {
	.started = on_wstarted, .event = on_wevent, .failed = on_wfailed,
	.backlog = envd_backlog};

void envd_f_watch(struct envd_call *c, json_t *msg)
{
	bool rec, inc;
	int64_t timeout = 0;
	if (watch_opts(c, msg, &rec, &inc) < 0 || envd_timeout_header(c, &timeout) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch(c->b, c->path, c->user, rec, inc, &watch_cbs, c, &e);
	if (!c->op) {
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
		return;
	}
	envd_deadline_start(c, timeout);
}

void envd_f_wcreate(struct envd_call *c, json_t *msg)
{
	bool rec, inc;
	if (watch_opts(c, msg, &rec, &inc) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch_create(c->b, c->path, c->user, rec, inc, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

/* watcherId: the core's watch id as a decimal string. */
static int watcher_id(struct envd_call *c, json_t *msg, int64_t *id)
{
	const char *s;
	if (envd_opt_str(c, msg, "watcherId", "watcher_id", &s) < 0)
		return -1;
	char *end;
	errno = 0;
	long long v = s ? strtoll(s, &end, 10) : 0;
	if (!s || !*s || errno || *end || v <= 0) {
		envd_fail(c, CONNECT_NOT_FOUND, "watcher with id %s not found", s ? s : "''");
		return -1;
	}
	*id = v;
	return 0;
}

void envd_f_wevents(struct envd_call *c, json_t *msg)
{
	int64_t id;
	if (watcher_id(c, msg, &id) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch_events(c->b, id, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

void envd_f_wremove(struct envd_call *c, json_t *msg)
{
	int64_t id;
	if (watcher_id(c, msg, &id) < 0)
		return;
	struct core_err e = {0};
	c->op = core_watch_remove(c->b, id, on_done, c, &e);
	if (!c->op)
		envd_fail(c, envd_code_of(&e), "%s", e.msg);
}

/* ---- /files ------------------------------------------------------------------ */

/* envd's validateSigning: the header token wins when given; else
 * signature = "v1_" + base64(sha256("path:op:user:token[:exp]")) without
 * padding, exp (unix seconds) not past. 0 ok; else the status to answer. */
int e2b_files_auth(struct evhttp_request *req, const char *tok, const char *op, char *msg,
		   size_t mcap)
{
	if (!tok)
		return 0;
	const char *h = envd_hdr(req, "X-Access-Token");
	if (h && *h) {
		if (e2b_equal(h, tok))
			return 0;
		snprintf(msg, mcap, "access token present in header but does not match");
		return 401;
	}
	char *sig = http_query(req, "signature");
	char *path = http_query(req, "path");
	char *user = http_query(req, "username");
	char *exp = http_query(req, "signature_expiration");
	int rc = 0;
	char *raw = NULL;
	long long e = 0;
	if (exp) {
		char *end;
		errno = 0;
		e = strtoll(exp, &end, 10);
		if (!*exp || errno || *end) {
			snprintf(msg, mcap, "signature_expiration: expected unix seconds");
			rc = 400;
			goto out;
		}
	}
	if (!sig) {
		snprintf(msg, mcap, "missing signature query parameter");
		rc = 401;
		goto out;
	}
	int n = exp ? asprintf(&raw, "%s:%s:%s:%s:%lld", path ? path : "", op, user ? user : "",
			       tok, e)
		    : asprintf(&raw, "%s:%s:%s:%s", path ? path : "", op, user ? user : "", tok);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
	char want[sizeof b64 + 4];
	if (n < 0 || !EVP_Digest(raw, (size_t)n, md, &mdlen, EVP_sha256(), NULL)) {
		raw = n < 0 ? NULL : raw;
		snprintf(msg, mcap, "invalid signature");
		rc = 401;
		goto out;
	}
	int bl = EVP_EncodeBlock((unsigned char *)b64, md, (int)mdlen);
	while (bl > 0 && b64[bl - 1] == '=')
		bl--;
	b64[bl > 0 ? bl : 0] = '\0';
	snprintf(want, sizeof want, "v1_%s", b64);
	if (!e2b_equal(want, sig)) {
		snprintf(msg, mcap, "invalid signature");
		rc = 401;
	} else if (exp && e < (long long)time(NULL)) {
		snprintf(msg, mcap, "signature is already expired");
		rc = 401;
	}
out:
	free(raw);
	free(sig);
	free(path);
	free(user);
	free(exp);
	return rc;
}

/* Content-Disposition: inline, the name quoted (controls dropped, " and \
 * escaped), and filename* for what is not ASCII. */
static void disposition(struct evhttp_request *req, const char *path)
{
	const char *name = envd_base_name(path);
	char q[600], pct[1800];
	size_t o = 0, p = 0;
	bool ascii = true;
	for (const unsigned char *s = (const unsigned char *)name; *s && o + 3 < sizeof q; s++) {
		if (*s < 0x20 || *s == 0x7f)
			continue;
		if (*s >= 0x80) {
			ascii = false;
			q[o++] = '_';
			continue;
		}
		if (*s == '"' || *s == '\\')
			q[o++] = '\\';
		q[o++] = (char)*s;
	}
	q[o] = '\0';
	for (const unsigned char *s = (const unsigned char *)name; *s && p + 4 < sizeof pct; s++) {
		if ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		    (*s >= '0' && *s <= '9') || strchr("-._~", *s))
			pct[p++] = (char)*s;
		else
			p += (size_t)snprintf(pct + p, sizeof pct - p, "%%%02X", *s);
	}
	pct[p] = '\0';
	char v[2600];
	if (ascii)
		snprintf(v, sizeof v, "inline; filename=\"%s\"", q);
	else
		snprintf(v, sizeof v, "inline; filename=\"%s\"; filename*=UTF-8''%s", q, pct);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Disposition", v);
}

static int files_status(const struct core_err *e)
{
	if (no_space(e))
		return 507;
	if (!strcmp(e->code, "is_directory") || !strcmp(e->code, "invalid_path"))
		return 400;
	return e->status >= 400 && e->status <= 599 ? e->status : 500;
}

/* The next part of an upload, or the answer. */
static void write_next(struct envd_call *c)
{
	if (c->next >= c->nup) {
		json_t *out = c->out;
		c->out = NULL;
		envd_ok(c, out);
		return;
	}
	struct envd_upload *u = &c->up[c->next];
	struct core_write_opts o = {.user = c->user, .metadata = c->meta};
	struct core_err e = {0};
	c->op = core_write(c->b, u->path, u->data, u->len, &o, files_done, c, &e);
	if (!c->op)
		envd_rest_fail(c, files_status(&e), "%s", e.msg);
}

static void files_done(void *arg, json_t *result, const char *data, size_t len,
		       const struct core_err *e)
{
	struct envd_call *c = arg;
	c->op = NULL;
	if (e) {
		if (c->kind == K_FREAD && !strcmp(e->code, "not_found"))
			envd_rest_fail(c, 404, "path '%s' does not exist", c->path);
		else if (c->kind == K_FREAD && !strcmp(e->code, "is_directory"))
			envd_rest_fail(c, 400, "path '%s' is a directory", c->path);
		else
			envd_rest_fail(c, files_status(e), "%s", e->msg);
		return;
	}
	if (c->kind == K_FREAD) {
		envd_call_detach(c);
		disposition(c->req, c->path);
		http_raw(c->req, 200, "application/octet-stream", data ? data : "", data ? len : 0);
		envd_call_free(c);
		return;
	}
	struct envd_upload *u = &c->up[c->next++];
	json_t *o = json_pack("{s:s,s:s,s:s}", "path", u->path, "name", envd_base_name(u->path), "type",
			      "file");
	if (o && c->meta && json_object_size(c->meta))
		json_object_set(o, "metadata", c->meta);
	json_array_append_new(c->out, o);
	write_next(c);
}

/* X-Metadata-<k>: <v> headers as an object (NULL: none). */
static json_t *upload_metadata(struct evhttp_request *req)
{
	json_t *o = NULL;
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
		if (strncasecmp(kv->key, "X-Metadata-", 11) != 0 || !kv->key[11])
			continue;
		json_t *v = json_string(kv->value);
		if (!v)
			continue;
		if (!o)
			o = json_object();
		if (o)
			json_object_set_new(o, kv->key + 11, v);
		else
			json_decref(v);
	}
	return o;
}

/* Whether an upload part targets a path already in the list. */
static bool dup_path(const struct envd_call *c, const char *p)
{
	for (size_t i = 0; i < c->nup; i++)
		if (!strcmp(c->up[i].path, p))
			return true;
	return false;
}

static void files_post(struct envd_call *c, const char *qpath)
{
	const char *ct = envd_hdr(c->req, "Content-Type");
	const char *ce = envd_hdr(c->req, "Content-Encoding");
	uint64_t max = core_config() ? core_config()->max_file : 0;
	char msg[600];
	if (ce && *ce && strcasecmp(ce, "identity") != 0) {
		envd_rest_fail(c, 400, "error decompressing request body: Content-Encoding %s is not "
				  "supported", ce);
		return;
	}
	size_t len;
	const char *body = http_body(c->req, &len);
	char mt[128] = "";
	if (ct)
		snprintf(mt, sizeof mt, "%.*s", (int)strcspn(ct, "; \t"), ct);
	if (!strcasecmp(mt, "application/octet-stream")) {
		if (!qpath) {
			envd_rest_fail(c, 400, "path query parameter is required for raw body upload");
			return;
		}
		c->up = calloc(1, sizeof *c->up);
		if (!c->up) {
			envd_rest_fail(c, 500, "out of memory");
			return;
		}
		if (envd_resolve(c->user, qpath, c->up[0].path, PATH_CAP, msg, sizeof msg) < 0) {
			envd_rest_fail(c, 400, "error resolving path: %s", msg);
			return;
		}
		c->up[0].data = body;
		c->up[0].len = len;
		c->nup = 1;
	} else if (!strncasecmp(mt, "multipart/", 10)) {
		char boundary[80];
		struct moat_err me = {0};
		if (mp_boundary(ct, boundary, sizeof boundary, &me) < 0 ||
		    mp_parse(body, len, boundary, MAX_PARTS, &c->parts, &me) < 0) {
			envd_rest_fail(c, 400, "error parsing multipart form: %s", me.msg);
			return;
		}
		c->up = calloc(c->parts.n ? c->parts.n : 1, sizeof *c->up);
		if (!c->up) {
			envd_rest_fail(c, 500, "out of memory");
			return;
		}
		/* all parts are checked before any is written */
		for (size_t i = 0; i < c->parts.n; i++) {
			const struct mp_part *pt = &c->parts.v[i];
			if (!pt->name || strcmp(pt->name, "file") != 0)
				continue; /* envd reads only "file" parts */
			const char *src = qpath ? qpath : pt->filename;
			if (!src || !*src) {
				envd_rest_fail(c, 400, "part %zu: no filename (a path) and no path query", i);
				return;
			}
			struct envd_upload *u = &c->up[c->nup];
			if (envd_resolve(c->user, src, u->path, PATH_CAP, msg, sizeof msg) < 0) {
				envd_rest_fail(c, 400, "error resolving path: %s", msg);
				return;
			}
			if (dup_path(c, u->path)) {
				envd_rest_fail(c, 400,
					  "you cannot upload multiple files to the same path '%s' in "
					  "one upload request",
					  u->path);
				return;
			}
			u->data = pt->data;
			u->len = pt->len;
			c->nup++;
		}
	} else {
		envd_rest_fail(c, 400,
			  "unsupported content type: %s, expected multipart/form-data or "
			  "application/octet-stream",
			  ct ? ct : "(none)");
		return;
	}
	for (size_t i = 0; i < c->nup; i++) {
		if (max && c->up[i].len > max) {
			envd_rest_fail(c, 413, "%s: file over the limit of %" PRIu64 " bytes",
				  c->up[i].path, max);
			return;
		}
	}
	c->meta = upload_metadata(c->req);
	c->out = json_array();
	if (!c->out) {
		envd_rest_fail(c, 500, "out of memory");
		return;
	}
	write_next(c);
}

void envd_files(struct evhttp_request *req, struct box *b)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_POST) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, POST");
		e2b_envd_error(req, 405, "method not allowed on /files");
		return;
	}
	char msg[600];
	int st = e2b_files_auth(req, e2b_access_token(b), m == EVHTTP_REQ_GET ? "read" : "write", msg,
			    sizeof msg);
	if (st) {
		e2b_envd_error(req, st, "%s", msg);
		return;
	}
	struct envd_call *c = envd_call_new(req, b, m == EVHTTP_REQ_GET ? K_FREAD : K_FWRITE);
	if (!c) {
		e2b_envd_error(req, 500, "out of memory");
		return;
	}
	char *user = http_query(req, "username");
	char *qpath = http_query(req, "path");
	if (user && !envd_user_known(user)) {
		char u[128];
		snprintf(u, sizeof u, "%s", user);
		free(user);
		free(qpath);
		envd_rest_fail(c, 401, "error looking up user '%s': user: unknown user %s", u, u);
		return;
	}
	if (user)
		snprintf(c->user, sizeof c->user, "%s", user);
	free(user);
	if (m == EVHTTP_REQ_POST) {
		files_post(c, qpath);
		free(qpath);
		return;
	}
	if (envd_resolve(c->user, qpath, c->path, sizeof c->path, msg, sizeof msg) < 0) {
		free(qpath);
		envd_rest_fail(c, 400, "error expanding and resolving path: %s", msg);
		return;
	}
	free(qpath);
	struct core_err e = {0};
	const struct core_config *cf = core_config();
	c->op = core_read(b, c->path, c->user, cf ? cf->max_file : 0, files_done, c, &e);
	if (!c->op)
		files_done(c, NULL, NULL, 0, &e);
}

/* Every simple core answer of a filesystem call. */
static void on_done(void *arg, json_t *result, const char *data, size_t len,
		    const struct core_err *e)
{
	struct envd_call *c = arg;
	c->op = NULL;
	if (e) {
		if (c->kind == K_REMOVE && !strcmp(e->code, "not_found"))
			envd_ok(c, json_object()); /* rm -rf: missing is fine */
		else
			envd_fail(c, envd_code_of(e), "%s", e->msg);
		return;
	}
	json_t *ans = NULL;
	switch (c->kind) {
	case K_STAT:
	case K_MKDIR:
	case K_MOVE:
		ans = json_pack("{s:o}", "entry", entry_info(json_object_get(result, "entry")));
		break;
	case K_LIST: {
		json_t *arr = json_array();
		size_t i;
		json_t *en;
		json_array_foreach(json_object_get(result, "entries"), i, en) {
			const char *p = envd_jstr(en, "path");
			if (p && !strcmp(p, c->path))
				continue; /* entries exclude the root */
			json_array_append_new(arr, entry_info(en));
		}
		ans = json_pack("{s:o}", "entries", arr);
		break;
	}
	case K_WCREATE: {
		char id[24];
		snprintf(id, sizeof id, "%" PRId64, envd_jint(result, "watch_id"));
		ans = json_pack("{s:s}", "watcherId", id);
		break;
	}
	case K_WEVENTS: {
		json_t *arr = json_array();
		size_t i;
		json_t *ev;
		json_array_foreach(json_object_get(result, "events"), i, ev) {
			json_t *fe = fs_event(ev);
			if (fe)
				json_array_append_new(arr, fe);
		}
		ans = json_pack("{s:o}", "events", arr);
		break;
	}
	default:
		ans = json_object();
		break;
	}
	envd_ok(c, ans);
}
