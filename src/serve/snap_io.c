/* Snapshot export and import: see snap_io.h. */
#define _GNU_SOURCE
#include "snap_io.h"

#include "core.h"
#include "http.h"
#include "images.h"
#include "jfield.h"
#include "snap.h"
#include "../base/cleanup.h"
#include "../base/util.h"
#include "../base/walk.h"
#include "../oci/blobs.h"
#include "../oci/layout.h"
#include "../oci/unpack.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/keyvalq_struct.h>
#include <fcntl.h>
#include <limits.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define IMAGES "images"
#define DOC_MAX (4u << 20)
#define CHUNK (256u << 10)
#define LAYER_MT "application/vnd.oci.image.layer.v1.tar+gzip"
#define ANN "io.moat.snapshot"

static void fail(struct evhttp_request *req, const struct core_err *e)
{
	http_error(req, e->status ? e->status : 500, e->code[0] ? e->code : "internal", "%s",
		   e->msg);
}

/* ---- export: the thread's side ------------------------------------------- */

struct xport {
	int refs; /* the loop and the thread: the last one frees */
	/* the loop's */
	struct evhttp_request *req;
	struct http_wait w;
	struct event *ev;
	int rfd;
	bool started, done;
	/* the thread's inputs (copied before it starts) */
	int wfd;
	char id[32], dir[64], fs[64], base[128];
	char *refname, *limits;
	/* its result, read by the loop once the pipe is at its end */
	int rc;
	struct moat_err err;
};

static void x_unref(struct xport *x)
{
	if (__atomic_sub_fetch(&x->refs, 1, __ATOMIC_ACQ_REL))
		return;
	free(x->refname);
	free(x->limits);
	free(x);
}

/* A small blob (config, manifest) into the private store. */
static int put_small(const char *store, const char *data, char digest[OCI_DIGEST_LEN + 1],
		     struct moat_err *e)
{
	size_t len = strlen(data);
	char p[PATH_MAX];
	if (oci_sha256_buf(data, len, digest) < 0 || oci_blob_path(store, digest, p, sizeof p) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "export: blob");
	_cleanup_close_ int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || moat_write_all(fd, data, len) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "export: %s", p);
	return 0;
}

/* Pack a layer of the snapshot (fs/upper whole, or fs/ with only
 * workspace/) into the private store; its descriptor and diff_id out. */
static int put_layer(struct xport *x, const char *store, bool upper, json_t *layers,
		     json_t *diff_ids, struct moat_err *e)
{
	_cleanup_close_ int fsfd = open(x->fs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fsfd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "export: %s", x->fs);
	_cleanup_close_ int top = -1;
	const char *only = "workspace";
	if (upper) {
		top = openat(fsfd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (top < 0 && errno != ENOENT)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "export: %s/upper", x->fs);
		/* no upper (never written): an empty layer, the same shape */
		only = top < 0 ? "" : NULL;
	}
	char tmp[96], dg[OCI_DIGEST_LEN + 1], di[OCI_DIGEST_LEN + 1], p[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s/layer.tmp", x->dir);
	int64_t size = 0;
	_cleanup_close_ int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "export: %s", tmp);
	if (oci_pack_layer_only(top >= 0 ? top : fsfd, only, out, dg, di, &size, e) < 0)
		return moat_err_prefix(e, "export of snapshot %s (%s)", x->id,
				       upper ? "upper" : "workspace");
	if (fsync(out) < 0 || oci_blob_path(store, dg, p, sizeof p) < 0 || rename(tmp, p) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "export: %s", tmp);
	json_array_append_new(layers, json_pack("{s:s,s:s,s:I}", "mediaType", LAYER_MT, "digest",
						dg, "size", (json_int_t)size));
	json_array_append_new(diff_ids, json_string(di));
	return 0;
}

/* The base image's config (a copy to extend) and layers (hard-linked
 * into the private store, descriptors copied). */
static json_t *base_of(struct xport *x, const char *store, json_t *layers, struct moat_err *e)
{
	_cleanup_free_ char *mj = NULL, *cj = NULL;
	size_t ml, cl;
	struct oci_manifest m;
	if (oci_blob_read(IMAGES, x->base, DOC_MAX, &mj, &ml, e) < 0 ||
	    oci_manifest_parse(mj, ml, &m, e) < 0 ||
	    oci_blob_read(IMAGES, m.config.digest, DOC_MAX, &cj, &cl, e) < 0) {
		moat_err_prefix(e, "export: base image %s", x->base);
		return NULL;
	}
	json_t *cfg = json_loadb(cj, cl, 0, NULL);
	json_t *ids = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
	if (!json_is_array(ids) || json_array_size(ids) != m.nlayers) {
		json_decref(cfg);
		moat_err_set(e, MOAT_E_SYSTEM, EBADMSG, "export: base image %s: its config's "
			     "diff_ids do not match its layers", x->base);
		return NULL;
	}
	for (size_t i = 0; i < m.nlayers; i++) {
		char from[PATH_MAX], to[PATH_MAX];
		if (oci_blob_path(IMAGES, m.layers[i].digest, from, sizeof from) < 0 ||
		    oci_blob_path(store, m.layers[i].digest, to, sizeof to) < 0 ||
		    (link(from, to) < 0 && errno != EEXIST)) {
			json_decref(cfg);
			moat_err_set(e, MOAT_E_SYSTEM, errno, "export: base layer %s",
				     m.layers[i].digest);
			return NULL;
		}
		/* Docker's layer types name the same gzip'd tar */
		const char *mt = strstr(m.layers[i].media_type, "docker") ? LAYER_MT
				 : m.layers[i].media_type;
		json_array_append_new(layers, json_pack("{s:s,s:s,s:I}", "mediaType", mt, "digest",
							m.layers[i].digest, "size",
							(json_int_t)m.layers[i].size));
	}
	return cfg;
}

static int build(struct xport *x, struct moat_err *e)
{
	char store[96];
	snprintf(store, sizeof store, "%s/store", x->dir);
	if (oci_blobs_open(store, e) < 0)
		return -1;
	bool host = !strcmp(x->base, "host");
	json_t *layers = json_array();
	json_t *cfg;
	if (host) {
		const char *os, *arch, *variant;
		oci_host_platform(&os, &arch, &variant);
		cfg = json_pack("{s:s,s:s,s:{s:s,s:[]},s:{}}", "architecture", arch, "os", os, "rootfs",
				"type", "layers", "diff_ids", "config");
	} else {
		cfg = base_of(x, store, layers, e);
	}
	if (!cfg || !layers) {
		json_decref(layers);
		return cfg ? moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "export") : -1;
	}
	size_t nbase = json_array_size(layers);
	json_t *ids = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
	int rc = -1;
	_cleanup_free_ char *cj = NULL, *mj = NULL;
	char cdg[OCI_DIGEST_LEN + 1], mdg[OCI_DIGEST_LEN + 1], nb[24];
	if ((!host && put_layer(x, store, true, layers, ids, e) < 0) ||
	    put_layer(x, store, false, layers, ids, e) < 0)
		goto out;
	cj = json_dumps(cfg, JSON_COMPACT);
	if (!cj || put_small(store, cj, cdg, e) < 0)
		goto out;
	snprintf(nb, sizeof nb, "%zu", nbase);
	json_t *ann = json_pack("{s:s,s:s,s:s,s:s,s:s}", ANN, "1", ANN ".id", x->id, ANN ".base",
				x->base, ANN ".base_layers", nb, ANN ".limits",
				x->limits ? x->limits : "{}");
	json_t *man = json_pack("{s:i,s:s,s:{s:s,s:s,s:I},s:O,s:o}", "schemaVersion", 2,
				"mediaType", OCI_MT_MANIFEST, "config", "mediaType", OCI_MT_CONFIG,
				"digest", cdg, "size", (json_int_t)strlen(cj), "layers", layers,
				"annotations", ann);
	mj = man ? json_dumps(man, JSON_COMPACT) : NULL;
	json_decref(man);
	if (!mj || put_small(store, mj, mdg, e) < 0)
		goto out;
	snap_crash_point("export-packed");
	rc = oci_export(store, mdg, x->refname, x->wfd, e);
out:
	json_decref(cfg);
	json_decref(layers);
	if (rc < 0 && !e->msg[0])
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "export");
	return rc;
}

static void *x_thread(void *arg)
{
	struct xport *x = arg;
	struct moat_err e = {0};
	int rc = build(x, &e);
	/* nothing of it stays on disk, whatever happened */
	if (moat_walk_rm(AT_FDCWD, x->dir, MOAT_WALK_OPEN_UP) < 0 && rc == 0)
		fprintf(stderr, "moat serve: export: cannot remove %s: %s\n", x->dir, strerror(errno));
	x->err = e;
	__atomic_store_n(&x->rc, rc, __ATOMIC_RELEASE);
	close(x->wfd); /* the loop sees the end after the result is set */
	x_unref(x);
	return NULL;
}

/* ---- export: the loop's side --------------------------------------------- */

static void x_close(struct xport *x)
{
	if (x->ev)
		event_free(x->ev);
	x->ev = NULL;
	if (x->rfd >= 0)
		close(x->rfd); /* a thread still writing gets EPIPE and stops */
	x->rfd = -1;
	http_wait_stop(&x->w);
	x->done = true;
	x_unref(x);
}

static void x_gone(void *arg)
{
	x_close(arg);
}

static void x_end(struct xport *x)
{
	int rc = __atomic_load_n(&x->rc, __ATOMIC_ACQUIRE);
	struct evhttp_request *req = x->req;
	bool started = x->started;
	struct moat_err e = x->err;
	x_close(x);
	if (rc == 0 && started) {
		evhttp_send_reply_end(req);
	} else if (!started) {
		struct core_err ce = {0};
		if (e.errnum == ENOSPC || e.errnum == EDQUOT)
			cerr(&ce, 507, "insufficient_storage", "%s", e.msg);
		else
			cerr(&ce, 500, "internal", "%s", e.msg[0] ? e.msg : "export failed");
		fail(req, &ce);
	} else {
		/* the head is gone already: the client must not take a cut
		 * archive for a whole one, so no last chunk, the socket shut */
		fprintf(stderr, "moat serve: export cut: %s\n", e.msg);
		struct evhttp_connection *c = evhttp_request_get_connection(req);
		struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
		if (bev)
			shutdown(bufferevent_getfd(bev), SHUT_RDWR);
		evhttp_send_reply_end(req);
	}
}

static void x_sent(struct evhttp_connection *c, void *arg)
{
	(void)c;
	struct xport *x = arg;
	if (!x->done && x->ev)
		event_add(x->ev, NULL);
}

static void x_read(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct xport *x = arg;
	struct evbuffer *b = evbuffer_new();
	int n = b ? evbuffer_read(b, fd, CHUNK) : -1;
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		evbuffer_free(b);
		return;
	}
	if (n <= 0) {
		if (b)
			evbuffer_free(b);
		if (n < 0)
			__atomic_store_n(&x->rc, -1, __ATOMIC_RELEASE);
		x_end(x);
		return;
	}
	if (!x->started) {
		struct evkeyvalq *h = evhttp_request_get_output_headers(x->req);
		char cd[96];
		snprintf(cd, sizeof cd, "attachment; filename=\"%s.oci.tar\"", x->id);
		evhttp_add_header(h, "Content-Type", "application/x-tar");
		evhttp_add_header(h, "Content-Disposition", cd);
		evhttp_add_header(h, "Cache-Control", "no-store");
		evhttp_send_reply_start(x->req, 200, "OK");
		x->started = true;
		x->w.streaming = true; /* a hangup now ends the stream */
	}
	/* one chunk in flight: the next is read once this one is sent */
	event_del(x->ev);
	evhttp_send_reply_chunk_with_cb(x->req, b, x_sent, x);
	evbuffer_free(b);
}

void snap_io_export(struct evhttp_request *req, const char *ref)
{
	struct core_err e = {0};
	struct snap_info si = {0};
	if (snap_info(ref, &si, &e) < 0) {
		fail(req, &e);
		return;
	}
	if (strcmp(si.image, "host") && !oci_digest_valid(si.image)) {
		cerr(&e, 409, "conflict",
		     "snapshot %s is of a root filesystem directory (%.200s), not of a store image "
		     "or the host: it has no OCI form",
		     si.id, si.image);
		snap_info_free(&si);
		fail(req, &e);
		return;
	}
	struct xport *x = calloc(1, sizeof *x);
	int p[2] = {-1, -1};
	if (!x || pipe2(p, O_CLOEXEC) < 0) {
		free(x);
		snap_info_free(&si);
		http_error(req, 500, "internal", "export: %s", strerror(errno));
		return;
	}
	x->refs = 2;
	x->req = req;
	x->rfd = p[0];
	x->wfd = p[1];
	memcpy(x->id, si.id, sizeof x->id);
	char rid[32];
	snap_new_id(rid);
	snprintf(x->dir, sizeof x->dir, "snapshots/.export-%s", rid + 1);
	snprintf(x->fs, sizeof x->fs, "snapshots/%s/fs", si.id);
	snprintf(x->base, sizeof x->base, "%s", si.image);
	x->refname = moat_strdupf("localhost/moat-export:%s", si.name ? si.name : si.id);
	json_t *spec = si.spec ? json_loads(si.spec, 0, NULL) : NULL;
	json_t *lim = json_object_get(spec, "limits");
	x->limits = json_is_object(lim) ? json_dumps(lim, JSON_COMPACT) : NULL;
	json_decref(spec);
	snap_info_free(&si);
	struct event_base *base = evhttp_connection_get_base(evhttp_request_get_connection(req));
	pthread_t t;
	pthread_attr_t a;
	bool ok = x->refname && base && mkdir(x->dir, 0700) == 0 &&
		  fcntl(x->rfd, F_SETFL, O_NONBLOCK) == 0 &&
		  (x->ev = event_new(base, x->rfd, EV_READ | EV_PERSIST, x_read, x)) &&
		  event_add(x->ev, NULL) == 0 && pthread_attr_init(&a) == 0;
	if (ok) {
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		ok = pthread_create(&t, &a, x_thread, x) == 0;
		pthread_attr_destroy(&a);
	}
	if (!ok) {
		int err = errno;
		rmdir(x->dir);
		close(x->wfd);
		x->refs = 1;
		x_close(x);
		http_error(req, 500, "internal", "export: %s", strerror(err));
		return;
	}
	http_wait_start(&x->w, base, req, x_gone, x);
}

/* ---- import ---------------------------------------------------------------- */

struct ximport {
	struct evhttp_request *req; /* NULL once the client left */
	struct http_wait w;
	struct images_wait *iw;
	char id[32];
	char *name, *image; /* the snapshot's name (may be NULL), the image's name */
};

static void im_free(struct ximport *m)
{
	free(m->name);
	free(m->image);
	free(m);
}

static void im_gone(void *arg)
{
	struct ximport *m = arg;
	/* the import goes on; its end undoes it (no one takes the snapshot) */
	http_wait_stop(&m->w);
	m->req = NULL;
}

static const char *ann(json_t *a, const char *k)
{
	return json_string_value(json_object_get(a, k));
}

/* The image is in the store: check it is a snapshot export, make the
 * snapshot. NULL and e when it is not one. */
static json_t *adopt(struct ximport *m, const char *digest, struct core_err *e)
{
	_cleanup_free_ char *mj = NULL;
	size_t ml;
	struct moat_err me = {0};
	if (oci_blob_read(IMAGES, digest, DOC_MAX, &mj, &ml, &me) < 0) {
		cerr(e, 500, "internal", "%s", me.msg);
		return NULL;
	}
	json_t *doc = json_loadb(mj, ml, 0, NULL);
	json_t *a = json_object_get(doc, "annotations");
	size_t nl = json_array_size(json_object_get(doc, "layers"));
	const char *base = ann(a, ANN ".base"), *nb = ann(a, ANN ".base_layers");
	const char *lims = ann(a, ANN ".limits");
	char *end = NULL;
	long nbase = nb ? strtol(nb, &end, 10) : -1;
	json_t *limits = lims ? json_loads(lims, 0, NULL) : NULL;
	json_t *out = NULL, *spec = NULL;
	struct images_resolved ir = {0};
	bool host = base && !strcmp(base, "host");
	if (!ann(a, ANN) || strcmp(ann(a, ANN), "1")) {
		cerr(e, 400, "invalid_request",
		     "image %s is not a moat snapshot export (no " ANN " annotation \"1\" on its "
		     "manifest): import it as an image (POST /v1/images/import)",
		     digest);
	} else if (!base || (!host && !oci_digest_valid(base)) || !end || *end || nbase < 0 ||
		   (size_t)nbase + (host ? 1 : 2) != nl || (lims && !json_is_object(limits))) {
		cerr(e, 400, "invalid_request",
		     "snapshot export %s: its annotations " ANN ".base (%.80s), .base_layers "
		     "(%.20s) and .limits do not fit its %zu layers",
		     digest, base ? base : "none", nb ? nb : "none", nl);
	} else if (images_resolve(digest, &ir, e) == 1 && ir.layers.n == nl) {
		/* the top layer is the workspace's: <layer>/workspace */
		_cleanup_free_ char *ws = moat_strdupf("%s/workspace", ir.layers.v[0]);
		struct stat st;
		if (!ws || lstat(ws, &st) < 0 || !S_ISDIR(st.st_mode)) {
			cerr(e, 400, "invalid_request",
			     "snapshot export %s: its top layer has no workspace/ directory", digest);
		} else {
			spec = host ? json_object() : json_pack("{s:s,s:s}", "image", m->image,
								 "image_id", digest);
			if (spec && json_is_object(limits))
				json_object_set(spec, "limits", limits);
			if (spec)
				out = snap_adopt(m->id, m->name, host ? "host" : digest, spec, ws, e);
			else
				cerr(e, 500, "internal", "out of memory");
		}
	} else if (!e->status) {
		cerr(e, 500, "internal", "image %s: its layers are not all in the store", digest);
	}
	images_resolved_free(&ir);
	json_decref(spec);
	json_decref(limits);
	json_decref(doc);
	return out;
}

static void im_done(void *arg, json_t *image, const struct core_err *ie)
{
	struct ximport *m = arg;
	struct core_err e = {0};
	json_t *out = NULL;
	if (image) {
		const char *digest = json_string_value(json_object_get(image, "id"));
		out = digest ? adopt(m, digest, &e) : NULL;
		if (!digest)
			cerr(&e, 500, "internal", "the imported image has no id");
		json_t *row = out;
		bool keep = row && strcmp(json_string_value(json_object_get(row, "image")), "host");
		if (!m->req && out) { /* no one takes it: undone */
			struct core_err de = {0};
			snap_delete(m->id, &de);
			json_decref(out);
			out = NULL;
			keep = false;
		}
		/* a host snapshot's image, or a refused one's: removed again
		 * (only this name; the image goes when nothing else uses it) */
		struct core_err re = {0};
		if (!keep && images_remove(m->image, &re) < 0)
			fprintf(stderr, "moat serve: snapshot import: %s: %s\n", m->image, re.msg);
	} else {
		e = *ie;
	}
	if (m->req) {
		http_wait_stop(&m->w);
		if (out)
			http_json(m->req, 201, out);
		else
			fail(m->req, &e);
	} else {
		json_decref(out);
	}
	im_free(m);
}

static const struct images_cbs im_cbs = {.progress = NULL, .done = im_done};

void snap_io_import(struct evhttp_request *req)
{
	char *name = http_query(req, "name");
	struct core_err e = {0};
	if (name && !snap_name_ok(name)) {
		free(name);
		http_error(req, 400, "invalid_request",
			   "name must be 1 to 64 letters, digits, '.', '_' or '-' (not first), not "
			   "\"host\"");
		return;
	}
	struct ximport *m = calloc(1, sizeof *m);
	if (!m) {
		free(name);
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	m->req = req;
	m->name = name;
	snap_new_id(m->id);
	m->image = moat_strdupf("localhost/snapshot:%s", m->id);
	struct event_base *base = evhttp_connection_get_base(evhttp_request_get_connection(req));
	if (!m->image) {
		im_free(m);
		http_error(req, 500, "internal", "out of memory");
		return;
	}
	http_wait_start(&m->w, base, req, im_gone, m);
	m->iw = images_import(evhttp_request_get_input_buffer(req), m->image, &im_cbs, m, &e);
	if (!m->iw) {
		http_wait_stop(&m->w);
		im_free(m);
		fail(req, &e);
	}
}

void snap_io_sweep(void)
{
	/* the image of an import whose snapshot was never recorded (a daemon
	 * killed between the two): only this door makes these names */
	static const char pre[] = "localhost/snapshot:";
	json_t *l = images_list();
	size_t i, j;
	json_t *im, *n;
	json_array_foreach(json_object_get(l, "images"), i, im) {
		json_array_foreach(json_object_get(im, "names"), j, n) {
			const char *name = json_string_value(n);
			struct snap_info si = {0};
			struct core_err e = {0};
			if (!name || strncmp(name, pre, sizeof pre - 1))
				continue;
			if (snap_info(name + sizeof pre - 1, &si, &e) == 0) {
				snap_info_free(&si);
				continue;
			}
			fprintf(stderr, "moat serve: %s: an import that did not finish; removed\n", name);
			if (images_remove(name, &e) < 0)
				fprintf(stderr, "moat serve: %s: %s\n", name, e.msg);
		}
	}
	json_decref(l);
}
