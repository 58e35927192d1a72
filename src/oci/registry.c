/* The OCI distribution API's pull side with libcurl's easy API.
 *
 * - One handle for the whole pull (connections reused).
 * - Redirects are followed here, not by libcurl: libcurl resends custom
 *   headers (our Authorization) to whatever host a Location names, so each
 *   hop is a new request and the Authorization line goes only to the
 *   origin (scheme, host, port) it was obtained for. https only unless
 *   insecure, on every hop.
 * - Bodies are never trusted to be the size they announce: a blob goes
 *   through oci_blob_write, which refuses a byte beyond the descriptor's
 *   size, and a document into a buffer capped at max_doc.
 * - Every blob is checked (size, digest) as it ends but committed only once
 *   the whole image is in: a failed pull adds nothing to the store. */
#define _GNU_SOURCE
#include "registry.h"

#include "blobs.h"
#include "base/cleanup.h"
#include "base/util.h"

#include <curl/curl.h>
#include <jansson.h>

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_HOPS 5
#define DEFAULT_MAX_DOC (4 << 20)
#define ERRBODY 1024
#define URL_MAX 8192

struct hdrs {
	char ctype[128];
	char www[2048];
	char cdigest[80];
};

/* Where a response body goes: a blob writer or a bounded buffer; a
 * non-200 body goes to errbody (for the message) whatever the sink. */
struct sink {
	struct oci_blob_writer *w;
	char *buf;
	size_t len, cap;
	const char *what; /* "manifest latest", "blob sha256:..." */
	char errbody[ERRBODY];
	size_t errlen;
	bool failed;
	struct moat_err err;
};

struct origin {
	char scheme[8];
	char host[256];
	char port[8];
};

struct puller {
	CURL *c;
	const char *root;
	const struct oci_ref *r;
	const struct oci_pull_opts *o;
	char base[320];      /* "https://host:port" */
	char *auth;          /* "Authorization: ..." for the registry's origin */
	char *basic;         /* base64 user:password from the auth file */
	bool basic_loaded;
	struct hdrs h;
	struct sink *s;
	struct oci_progress prog;
	int64_t blob_start; /* bytes_done when the current blob began */
	char name[600];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool cancelled(const struct puller *p)
{
	return p->o->cancel && *p->o->cancel;
}

/* ---- response callbacks ----------------------------------------------- */

static void hdr_copy(char *dst, size_t cap, const char *v, size_t n)
{
	while (n > 0 && (*v == ' ' || *v == '\t'))
		v++, n--;
	while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= cap)
		n = cap - 1; /* long values are cut, then refused by their parser */
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static size_t on_header(char *d, size_t sz, size_t n, void *arg)
{
	struct puller *p = arg;
	size_t len = sz * n;
	if (len >= 5 && memcmp(d, "HTTP/", 5) == 0) {
		memset(&p->h, 0, sizeof p->h); /* a new response (after a 100, say) */
		return len;
	}
	const char *colon = memchr(d, ':', len);
	if (!colon)
		return len;
	size_t kl = (size_t)(colon - d);
	const char *v = colon + 1;
	size_t vl = len - kl - 1;
	if (kl == 12 && strncasecmp(d, "content-type", 12) == 0)
		hdr_copy(p->h.ctype, sizeof p->h.ctype, v, vl);
	else if (kl == 16 && strncasecmp(d, "www-authenticate", 16) == 0 && !p->h.www[0])
		hdr_copy(p->h.www, sizeof p->h.www, v, vl);
	else if (kl == 21 && strncasecmp(d, "docker-content-digest", 21) == 0)
		hdr_copy(p->h.cdigest, sizeof p->h.cdigest, v, vl);
	return len;
}

static void sink_fail(struct sink *s, int errnum, const char *fmt, const char *arg)
{
	s->failed = true;
	moat_err_set(&s->err, MOAT_E_SYSTEM, 0, "%s: %s %s", s->what, fmt, arg ? arg : "");
	s->err.errnum = errnum;
}

static size_t on_body(char *d, size_t sz, size_t n, void *arg)
{
	struct puller *p = arg;
	struct sink *s = p->s;
	size_t len = sz * n;
	long code = 0;
	curl_easy_getinfo(p->c, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200) {
		size_t k = len < sizeof s->errbody - 1 - s->errlen ? len : sizeof s->errbody - 1 - s->errlen;
		memcpy(s->errbody + s->errlen, d, k);
		s->errlen += k;
		s->errbody[s->errlen] = '\0';
		return len;
	}
	if (cancelled(p)) {
		sink_fail(s, ECANCELED, "cancelled", NULL);
		return 0;
	}
	if (s->w) {
		if (oci_blob_write(s->w, d, len, &s->err) < 0) {
			s->failed = true;
			return 0; /* libcurl stops the transfer */
		}
		p->prog.bytes_done = p->blob_start + oci_blob_written(s->w);
		if (p->o->progress)
			p->o->progress(p->o->arg, &p->prog);
		return len;
	}
	if (len > s->cap - s->len) {
		char m[64];
		snprintf(m, sizeof m, "%zu bytes", s->cap);
		sink_fail(s, EBADMSG, "larger than", m);
		return 0;
	}
	memcpy(s->buf + s->len, d, len);
	s->len += len;
	return len;
}

static int on_xfer(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	return cancelled(arg) ? 1 : 0; /* also while a server stalls */
}

/* ---- requests ---------------------------------------------------------- */

static int origin_of(const char *url, struct origin *o)
{
	memset(o, 0, sizeof *o);
	CURLU *u = curl_url();
	char *sc = NULL, *h = NULL, *pt = NULL;
	int rc = -1;
	if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &sc, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &pt, CURLU_DEFAULT_PORT) == CURLUE_OK &&
	    strlen(sc) < sizeof o->scheme && strlen(h) < sizeof o->host && strlen(pt) < sizeof o->port) {
		strcpy(o->scheme, sc);
		for (size_t i = 0; h[i]; i++)
			o->host[i] = (char)tolower((unsigned char)h[i]);
		strcpy(o->port, pt);
		rc = 0;
	}
	curl_free(sc);
	curl_free(h);
	curl_free(pt);
	curl_url_cleanup(u);
	return rc;
}

static bool same_origin(const struct origin *a, const struct origin *b)
{
	return strcmp(a->scheme, b->scheme) == 0 && strcmp(a->host, b->host) == 0 &&
	       strcmp(a->port, b->port) == 0;
}

/* GET url into s, following redirects; auth (a whole header line, may be
 * NULL) is sent only to url's own origin. Returns the final status, or -1
 * with e set (transport error, the sink refused the body, cancelled). */
static long http_get(struct puller *p, const char *url, const char *accept, const char *auth,
		     struct sink *s, struct moat_err *e)
{
	char cur[URL_MAX];
	struct origin first, here;
	if (strlen(url) >= sizeof cur || origin_of(url, &first) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EINVAL, "%s: bad URL %.200s", s->what, url);
	strcpy(cur, url);
	for (int hop = 0;; hop++) {
		if (origin_of(cur, &here) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, EINVAL, "%s: bad URL %.200s", s->what, cur);
		if (strcmp(here.scheme, "https") != 0 &&
		    !(p->o->insecure && strcmp(here.scheme, "http") == 0))
			return moat_err_set(e, MOAT_E_SYSTEM, EPROTO,
					    "%s: %.200s is not https (plain http only with insecure)",
					    s->what, cur);
		struct curl_slist *hl = NULL, *t;
		if (accept) {
			char a[512];
			snprintf(a, sizeof a, "Accept: %s", accept);
			if (!(t = curl_slist_append(hl, a)))
				goto nomem;
			hl = t;
		}
		if (auth && same_origin(&first, &here)) {
			if (!(t = curl_slist_append(hl, auth)))
				goto nomem;
			hl = t;
		}
		s->errlen = 0;
		s->errbody[0] = '\0';
		p->s = s;
		curl_easy_setopt(p->c, CURLOPT_URL, cur);
		curl_easy_setopt(p->c, CURLOPT_HTTPHEADER, hl);
		curl_easy_setopt(p->c, CURLOPT_HTTPGET, 1L);
		CURLcode rc = curl_easy_perform(p->c);
		curl_easy_setopt(p->c, CURLOPT_HTTPHEADER, NULL);
		curl_slist_free_all(hl);
		if (s->failed) {
			*e = s->err;
			return -1;
		}
		if (rc == CURLE_ABORTED_BY_CALLBACK && cancelled(p))
			return moat_err_set(e, MOAT_E_SYSTEM, ECANCELED, "%s", s->what);
		if (rc != CURLE_OK) {
			int en = rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT
				 : rc == CURLE_COULDNT_CONNECT ? ECONNREFUSED
				 : rc == CURLE_COULDNT_RESOLVE_HOST ? EHOSTUNREACH
								    : EIO;
			moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: GET %.300s: %s", s->what, cur,
				     curl_easy_strerror(rc));
			e->errnum = en;
			return -1;
		}
		long code = 0;
		curl_easy_getinfo(p->c, CURLINFO_RESPONSE_CODE, &code);
		if (code == 301 || code == 302 || code == 303 || code == 307 || code == 308) {
			char *loc = NULL;
			curl_easy_getinfo(p->c, CURLINFO_REDIRECT_URL, &loc);
			if (!loc || !*loc)
				return moat_err_set(e, MOAT_E_SYSTEM, EPROTO, "%s: redirect without a Location",
						    s->what);
			if (hop >= MAX_HOPS)
				return moat_err_set(e, MOAT_E_SYSTEM, ELOOP, "%s: more than %d redirects",
						    s->what, MAX_HOPS);
			if (strlen(loc) >= sizeof cur)
				return moat_err_set(e, MOAT_E_SYSTEM, ENAMETOOLONG, "%s: redirect URL too long",
						    s->what);
			strcpy(cur, loc);
			continue;
		}
		return code;
	nomem:
		curl_slist_free_all(hl);
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", s->what);
	}
}

/* The registry's error message ({"errors":[{"code","message"}]}) or the
 * body's start, printable only. */
static void err_detail(const struct sink *s, char *out, size_t cap)
{
	out[0] = '\0';
	json_t *j = json_loadb(s->errbody, s->errlen, 0, NULL);
	json_t *e0 = j ? json_array_get(json_object_get(j, "errors"), 0) : NULL;
	const char *c = json_string_value(json_object_get(e0, "code"));
	const char *m = json_string_value(json_object_get(e0, "message"));
	if (c || m)
		snprintf(out, cap, "%s%s%s", c ? c : "", c && m ? ": " : "", m ? m : "");
	else
		snprintf(out, cap, "%.*s", (int)(s->errlen < 200 ? s->errlen : 200), s->errbody);
	if (j)
		json_decref(j);
	for (char *q = out; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
			*q = '?';
}

static bool token_ok(const char *t)
{
	size_t n = strlen(t);
	if (n == 0 || n > 8192)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
			return false;
	return true;
}

static int load_basic(struct puller *p, struct moat_err *e)
{
	if (p->basic_loaded || !p->o->auth_file)
		return 0;
	p->basic_loaded = true;
	if (oci_auth_lookup(p->o->auth_file, p->r->registry, &p->basic, e) < 0)
		return -1;
	if (!p->basic && strcmp(p->r->registry, oci_ref_endpoint(p->r)) != 0)
		return oci_auth_lookup(p->o->auth_file, oci_ref_endpoint(p->r), &p->basic, e);
	return 0;
}

/* The 401's challenge answered: p->auth set for the retry. */
static int answer_challenge(struct puller *p, struct moat_err *e)
{
	struct oci_challenge ch;
	if (!p->h.www[0])
		return moat_err_set(e, MOAT_E_SYSTEM, EACCES,
				    "%s: 401 without a WWW-Authenticate challenge", p->name);
	if (oci_challenge_parse(p->h.www, &ch, e) < 0) {
		moat_err_prefix(e, "%s", p->name);
		e->errnum = EACCES;
		return -1;
	}
	if (load_basic(p, e) < 0)
		return -1;
	free(p->auth);
	p->auth = NULL;
	if (strcmp(ch.scheme, "Basic") == 0) {
		if (!p->basic)
			return moat_err_set(e, MOAT_E_SYSTEM, EACCES,
					    "%s: the registry wants credentials (none for %s%s%s)",
					    p->name, p->r->registry, p->o->auth_file ? " in " : "",
					    p->o->auth_file ? p->o->auth_file : "; give an auth file");
		p->auth = moat_strdupf("Authorization: Basic %s", p->basic);
		return p->auth ? 0 : moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", p->name);
	}
	/* Bearer: GET realm?service=&scope= (Basic creds when we have them) */
	char scope[600];
	if (ch.scope[0])
		snprintf(scope, sizeof scope, "%s", ch.scope);
	else
		snprintf(scope, sizeof scope, "repository:%s:pull", p->r->repo);
	char *es = curl_easy_escape(p->c, ch.service, 0);
	char *esc = curl_easy_escape(p->c, scope, 0);
	char url[URL_MAX];
	int n = es && esc ? snprintf(url, sizeof url, "%s%sservice=%s&scope=%s", ch.realm,
				     strchr(ch.realm, '?') ? "&" : "?", es, esc)
			  : -1;
	curl_free(es);
	curl_free(esc);
	if (n < 0 || (size_t)n >= sizeof url)
		return moat_err_set(e, MOAT_E_SYSTEM, EACCES, "%s: bad token realm", p->name);
	_cleanup_free_ char *basic = p->basic ? moat_strdupf("Authorization: Basic %s", p->basic) : NULL;
	char tbuf[65536];
	struct sink ts = {.buf = tbuf, .cap = sizeof tbuf - 1, .what = "token"};
	long code = http_get(p, url, "application/json", basic, &ts, e);
	if (code < 0) {
		moat_err_prefix(e, "%s", p->name);
		if (e->errnum != ECANCELED)
			e->errnum = EACCES;
		return -1;
	}
	if (code != 200) {
		char d[256];
		err_detail(&ts, d, sizeof d);
		return moat_err_set(e, MOAT_E_SYSTEM, EACCES,
				    "%s: token refused by %.300s (HTTP %ld%s%s)%s", p->name, ch.realm,
				    code, d[0] ? ": " : "", d,
				    p->basic ? "" : "; credentials may be needed (an auth file)");
	}
	tbuf[ts.len] = '\0';
	json_t *j = json_loadb(tbuf, ts.len, 0, NULL);
	const char *tok = json_string_value(json_object_get(j, "token"));
	if (!tok)
		tok = json_string_value(json_object_get(j, "access_token"));
	if (!tok || !token_ok(tok)) {
		if (j)
			json_decref(j);
		return moat_err_set(e, MOAT_E_SYSTEM, EACCES, "%s: the token answer from %.300s has no token",
				    p->name, ch.realm);
	}
	p->auth = moat_strdupf("Authorization: Bearer %s", tok);
	json_decref(j);
	return p->auth ? 0 : moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", p->name);
}

/* GET <base>/v2/<repo>/<path> with the registry's auth; a 401 answered
 * once. Non-200 answers become errors naming s->what. */
static int reg_get(struct puller *p, const char *path, const char *accept, struct sink *s,
		   struct moat_err *e)
{
	char url[URL_MAX];
	if ((size_t)snprintf(url, sizeof url, "%s/v2/%s/%s", p->base, p->r->repo, path) >= sizeof url)
		return moat_err_set(e, MOAT_E_SYSTEM, ENAMETOOLONG, "%s", s->what);
	long code = http_get(p, url, accept, p->auth, s, e);
	if (code == 401) {
		if (answer_challenge(p, e) < 0)
			return -1;
		code = http_get(p, url, accept, p->auth, s, e);
	}
	if (code < 0)
		return -1;
	if (code == 200)
		return 0;
	char d[256];
	err_detail(s, d, sizeof d);
	int en = code == 404 ? ENOENT : code == 401 || code == 403 ? EACCES : EIO;
	moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: %s (HTTP %ld%s%s)", s->what,
		     code == 404 ? "not found" : code == 401 || code == 403 ? "access refused" : "failed",
		     code, d[0] ? ": " : "", d);
	e->errnum = en;
	return -1;
}

/* ---- the pull ---------------------------------------------------------- */

struct pending {
	struct oci_blob_writer *w[OCI_MAX_LAYERS + 2];
	char digest[OCI_MAX_LAYERS + 2][OCI_DIGEST_LEN + 1];
	size_t n;
};

static void pending_abort(struct pending *pd)
{
	for (size_t i = 0; i < pd->n; i++)
		oci_blob_abort(pd->w[i]);
	pd->n = 0;
}

static bool pending_has(const struct pending *pd, const char *d)
{
	for (size_t i = 0; i < pd->n; i++)
		if (strcmp(pd->digest[i], d) == 0)
			return true;
	return false;
}

static int pending_add(struct pending *pd, struct oci_blob_writer *w, const char *d)
{
	if (pd->n >= sizeof pd->w / sizeof pd->w[0])
		return -1;
	pd->w[pd->n] = w;
	memcpy(pd->digest[pd->n], d, OCI_DIGEST_LEN + 1);
	pd->n++;
	return 0;
}

/* A document (manifest): fetched into memory, at most max bytes. */
static int fetch_doc(struct puller *p, const char *path, const char *what, size_t max,
		     char **out, size_t *len, struct moat_err *e)
{
	_cleanup_free_ char *buf = malloc(max + 1);
	if (!buf)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", what);
	struct sink s = {.buf = buf, .cap = max, .what = what};
	if (reg_get(p, path, OCI_ACCEPT, &s, e) < 0)
		return -1;
	buf[s.len] = '\0';
	*len = s.len;
	*out = steal_ptr(&buf);
	return 0;
}

/* A bytes-in-hand blob (manifest, config) into the pending commits. */
static int keep_bytes(struct puller *p, struct pending *pd, const char *digest, const char *buf,
		      size_t len, struct moat_err *e)
{
	if (oci_blob_has(p->root, digest) || pending_has(pd, digest))
		return 0;
	struct oci_blob_writer *w = oci_blob_begin(p->root, digest, (int64_t)len, -1, e);
	if (!w)
		return -1;
	if (oci_blob_write(w, buf, len, e) < 0 || oci_blob_check(w, e) < 0 ||
	    pending_add(pd, w, digest) < 0) {
		oci_blob_abort(w);
		return -1;
	}
	return 0;
}

/* One manifest or index by tag or digest; its digest computed (pulled by
 * digest, it must be that one; by tag, it must be the Docker-Content-Digest
 * the registry names, if any) and its kind found. */
static int fetch_manifest(struct puller *p, const char *want, const char *what, char **buf,
			  size_t *len, char digest[OCI_DIGEST_LEN + 1], enum oci_doc *kind,
			  struct moat_err *e)
{
	size_t max = p->o->max_doc > 0 ? (size_t)p->o->max_doc : DEFAULT_MAX_DOC;
	char path[300];
	snprintf(path, sizeof path, "manifests/%s", want);
	_cleanup_free_ char *b = NULL;
	size_t n = 0;
	if (fetch_doc(p, path, what, max, &b, &n, e) < 0)
		return -1;
	if (oci_sha256_buf(b, n, digest) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EIO, "%s: sha256", what);
	const char *named = oci_digest_valid(want) ? want
			    : oci_digest_valid(p->h.cdigest) ? p->h.cdigest
							     : NULL;
	if (named && strcmp(digest, named) != 0) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: digest mismatch: %s%s expected, the content is %s",
			     what, named, named == want ? "" : " (Docker-Content-Digest)", digest);
		e->errnum = EBADMSG;
		return -1;
	}
	if (oci_doc_kind(b, n, p->h.ctype[0] ? p->h.ctype : NULL, kind, e) < 0)
		return moat_err_prefix(e, "%s", what);
	*buf = steal_ptr(&b);
	*len = n;
	return 0;
}

/* The image manifest for the reference: an index resolved for this host
 * (one level: an index inside an index is refused). */
static int get_manifest(struct puller *p, char **buf, size_t *len, char digest[OCI_DIGEST_LEN + 1],
			struct moat_err *e)
{
	const char *want = p->r->digest[0] ? p->r->digest : p->r->tag;
	char what[300];
	snprintf(what, sizeof what, "manifest %s", want);
	enum oci_doc kind;
	_cleanup_free_ char *ib = NULL;
	size_t ilen = 0;
	if (fetch_manifest(p, want, what, &ib, &ilen, digest, &kind, e) < 0)
		return -1;
	if (kind == OCI_DOC_MANIFEST) {
		*buf = steal_ptr(&ib);
		*len = ilen;
		return 0;
	}
	const char *os, *arch, *variant;
	oci_host_platform(&os, &arch, &variant);
	struct oci_desc d;
	if (oci_index_pick(ib, ilen, os, arch, variant, &d, e) < 0)
		return moat_err_prefix(e, "%s", what);
	snprintf(what, sizeof what, "manifest %s (for %s/%s)", d.digest, os, arch);
	if (fetch_manifest(p, d.digest, what, buf, len, digest, &kind, e) < 0)
		return -1;
	if (kind != OCI_DOC_MANIFEST) {
		free(steal_ptr(buf));
		moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: an index inside an index", what);
		e->errnum = EBADMSG;
		return -1;
	}
	return 0;
}

static int get_blob(struct puller *p, struct pending *pd, const struct oci_desc *d,
		    struct moat_err *e)
{
	char what[120], path[120];
	snprintf(what, sizeof what, "blob %s", d->digest);
	snprintf(path, sizeof path, "blobs/%s", d->digest);
	struct oci_blob_writer *w = oci_blob_begin(p->root, d->digest, d->size, -1, e);
	if (!w)
		return -1;
	struct sink s = {.w = w, .what = what};
	p->blob_start = p->prog.bytes_done;
	p->prog.current = d->digest;
	if (reg_get(p, path, NULL, &s, e) < 0 || oci_blob_check(w, e) < 0) {
		/* more than the descriptor said: the registry's fault, not room */
		if (e->errnum == EFBIG)
			e->errnum = EBADMSG;
		oci_blob_abort(w);
		return -1;
	}
	p->prog.bytes_done = p->blob_start + d->size;
	if (pending_add(pd, w, d->digest) < 0) {
		oci_blob_abort(w);
		return moat_err_set(e, MOAT_E_SYSTEM, E2BIG, "%s: too many blobs", what);
	}
	return 0;
}

/* The config: from the store when there, else fetched (bounded by its
 * descriptor and max_doc) and kept for the commit. */
static int get_config(struct puller *p, struct pending *pd, const struct oci_desc *d, char **buf,
		      size_t *len, struct moat_err *e)
{
	size_t max = p->o->max_doc > 0 ? (size_t)p->o->max_doc : DEFAULT_MAX_DOC;
	char what[120], path[120];
	snprintf(what, sizeof what, "config %s", d->digest);
	if ((uint64_t)d->size > max)
		return moat_err_set(e, MOAT_E_SYSTEM, EFBIG, "%s: %lld bytes (at most %zu)", what,
				    (long long)d->size, max);
	if (oci_blob_has(p->root, d->digest))
		return oci_blob_read(p->root, d->digest, max, buf, len, e);
	snprintf(path, sizeof path, "blobs/%s", d->digest);
	_cleanup_free_ char *b = malloc((size_t)d->size + 1);
	if (!b)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", what);
	struct sink s = {.buf = b, .cap = (size_t)d->size, .what = what};
	if (reg_get(p, path, NULL, &s, e) < 0)
		return -1;
	b[s.len] = '\0';
	char got[OCI_DIGEST_LEN + 1];
	if ((int64_t)s.len != d->size || oci_sha256_buf(b, s.len, got) < 0 ||
	    strcmp(got, d->digest) != 0) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: %s", what,
			     (int64_t)s.len != d->size ? "size mismatch" : "digest mismatch");
		e->errnum = EBADMSG;
		return -1;
	}
	if (keep_bytes(p, pd, d->digest, b, s.len, e) < 0)
		return -1;
	*len = s.len;
	*buf = steal_ptr(&b);
	return 0;
}

static int pull(struct puller *p, struct oci_image *out, struct moat_err *e)
{
	struct pending pd = {0};
	_cleanup_free_ char *mbuf = NULL, *cbuf = NULL;
	size_t mlen = 0, clen = 0;
	int rc = -1;
	char committed[OCI_MAX_LAYERS + 2][OCI_DIGEST_LEN + 1];
	size_t ncommitted = 0;

	if (get_manifest(p, &mbuf, &mlen, out->manifest, e) < 0)
		goto fail;
	if (oci_manifest_parse(mbuf, mlen, &out->m, e) < 0) {
		moat_err_prefix(e, "manifest %s", out->manifest);
		goto fail;
	}
	/* room: every blob not yet in the store */
	int64_t need = oci_blob_has(p->root, out->manifest) ? 0 : (int64_t)mlen;
	int64_t total = (int64_t)mlen + out->m.config.size;
	if (!oci_blob_has(p->root, out->m.config.digest))
		need += out->m.config.size;
	p->prog.layers_total = out->m.nlayers;
	p->prog.bytes_total = 0;
	for (size_t i = 0; i < out->m.nlayers; i++) {
		total += out->m.layers[i].size;
		p->prog.bytes_total += out->m.layers[i].size;
		if (!oci_blob_has(p->root, out->m.layers[i].digest))
			need += out->m.layers[i].size;
	}
	if (p->o->max_bytes > 0 && need > p->o->max_bytes) {
		moat_err_set(e, MOAT_E_SYSTEM, EFBIG,
			     "%lld bytes of new blobs, the store has room for %lld", (long long)need,
			     (long long)p->o->max_bytes);
		goto fail;
	}
	out->size = total;
	if (get_config(p, &pd, &out->m.config, &cbuf, &clen, e) < 0)
		goto fail;
	if (oci_config_parse(cbuf, clen, &out->config, e) < 0) {
		moat_err_prefix(e, "config %s", out->m.config.digest);
		goto fail;
	}
	if (out->config.ndiff != out->m.nlayers) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "config %s: %zu diff_ids for %zu layers",
			     out->m.config.digest, out->config.ndiff, out->m.nlayers);
		e->errnum = EBADMSG;
		goto fail;
	}
	for (size_t i = 0; i < out->m.nlayers; i++) {
		const struct oci_desc *d = &out->m.layers[i];
		if (!oci_blob_has(p->root, d->digest) && !pending_has(&pd, d->digest)) {
			if (get_blob(p, &pd, d, e) < 0)
				goto fail;
		} else {
			p->prog.bytes_done += d->size;
		}
		p->prog.layers_done = i + 1;
		p->prog.current = NULL;
		if (p->o->progress)
			p->o->progress(p->o->arg, &p->prog);
	}
	if (cancelled(p)) {
		moat_err_set(e, MOAT_E_SYSTEM, ECANCELED, "cancelled");
		goto fail;
	}
	if (keep_bytes(p, &pd, out->manifest, mbuf, mlen, e) < 0)
		goto fail;
	/* all checked: in they go, the manifest last (it was added last) */
	for (size_t i = 0; i < pd.n; i++) {
		struct oci_blob_writer *w = pd.w[i];
		pd.w[i] = NULL;
		if (oci_blob_commit(w, NULL, e) < 0) {
			for (size_t k = i + 1; k < pd.n; k++)
				oci_blob_abort(pd.w[k]);
			pd.n = 0;
			for (size_t k = 0; k < ncommitted; k++)
				oci_blob_remove(p->root, committed[k]);
			goto fail_nopending;
		}
		memcpy(committed[ncommitted++], pd.digest[i], OCI_DIGEST_LEN + 1);
	}
	pd.n = 0;
	oci_ref_format(p->r, out->name, sizeof out->name);
	return 0;
fail:
	pending_abort(&pd);
fail_nopending:
	oci_config_free(&out->config);
	moat_err_prefix(e, "pull %s", p->name);
	return rc;
}

int oci_pull(const char *root, const struct oci_ref *r, const struct oci_pull_opts *o,
	     struct oci_image *out, struct moat_err *e)
{
	memset(out, 0, sizeof *out);
	pthread_once(&curl_once, curl_init_once);
	struct puller p = {.root = root, .r = r, .o = o};
	oci_ref_format(r, p.name, sizeof p.name);
	snprintf(p.base, sizeof p.base, "%s://%s", o->insecure ? "http" : "https", oci_ref_endpoint(r));
	p.c = curl_easy_init();
	if (!p.c)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "pull %s: curl", p.name);
	CURL *c = p.c;
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L); /* see the top of the file */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_USERAGENT, "moat");
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* bytes/s ... */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);    /* ... over a minute */
	curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &p);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &p);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, &p);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	if (o->insecure) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	int rc = pull(&p, out, e);
	curl_easy_cleanup(c);
	free(p.auth);
	free(p.basic);
	return rc;
}
