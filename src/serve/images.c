/* The image service: see images.h. Threads: the loop owns the database,
 * the job list and every callback; a worker owns its job's pull or import
 * and unpacks, and shares with the loop only what `mu` guards (progress,
 * the end, the set of layers being unpacked). The store is swept (blobs
 * and layers no row names) only while no job runs, so a job never loses a
 * blob it has just written to a collection. */
#define _GNU_SOURCE
#include "images.h"

#include "box.h"
#include "jfield.h"
#include "store.h"
#include "../base/util.h"
#include "../oci/blobs.h"
#include "../oci/layout.h"
#include "../oci/ref.h"
#include "../oci/registry.h"
#include "../oci/unpack.h"

#include <dirent.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_JOBS 4 /* pulls and imports at once; more: 429 */

static struct images_config cfg;
static char root[PATH_MAX];    /* <data>/images */
static char layers[PATH_MAX + 8]; /* <data>/images/layers */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t unpacked_cv = PTHREAD_COND_INITIALIZER;

enum job_kind { J_PULL, J_IMPORT };

struct images_wait {
	struct job *j;
	const struct images_cbs *cbs;
	void *arg;
	struct images_wait *next;
};

struct job {
	enum job_kind kind;
	char key[600];        /* the formatted reference of a pull ("" for imports) */
	struct oci_ref ref;
	bool insecure;
	char name[512];       /* an import's name ("" none) */
	struct evbuffer *body; /* an import's archive (the worker's once started) */
	int64_t room;         /* bytes the store may still take (INT64_MAX: no limit) */
	int64_t layers_used;  /* bytes of the unpacked layers rows name, at the start */
	int efd;
	struct event *ev;
	pthread_t th;
	bool th_started;
	volatile int cancel;
	/* under mu */
	struct oci_progress prog;
	bool finished;
	int64_t last_signal_ms;
	/* the worker's, read by the loop once finished */
	int rc;
	bool room_limited;     /* the failure was the store's room (507) */
	struct moat_err err;
	struct oci_image im;
	bool have_im;
	int64_t unpacked[OCI_MAX_LAYERS];
	struct images_wait *waiters;
	struct job *next;
};
static struct job *jobs;
static size_t njobs;

/* layers being unpacked by some worker (hex of their diff_id), under mu */
struct unpacking {
	char hex[65];
	struct unpacking *next;
};
static struct unpacking *unpacking;

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void rand_hex(char *out, size_t n)
{
	unsigned char r[16];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		abort();
	for (size_t i = 0; i < n && i < 32; i++)
		out[i] = "0123456789abcdef"[(r[i / 2] >> (i % 2 ? 0 : 4)) & 15];
	out[n < 32 ? n : 32] = '\0';
}

/* ---- the database ----------------------------------------------------------- */

static int sql(const char *q)
{
	char *msg = NULL;
	int rc = sqlite3_exec(store_db(), q, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		fprintf(stderr, "moat serve: images: %s: %s\n", q, msg ? msg : "?");
	sqlite3_free(msg);
	return rc == SQLITE_OK ? 0 : -1;
}

static sqlite3_stmt *prep(const char *q)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(store_db(), q, -1, &st, NULL) != SQLITE_OK) {
		sqlite3_finalize(st);
		return NULL;
	}
	return st;
}

/* "sha256:<hex>" of the image a name, a digest or a digest's hex names;
 * 0 when none. */
static int lookup(const char *name, char id[OCI_DIGEST_LEN + 1])
{
	char d[OCI_DIGEST_LEN + 8];
	if (strlen(name) == 64 && strspn(name, "0123456789abcdef") == 64)
		snprintf(d, sizeof d, "sha256:%s", name);
	else
		snprintf(d, sizeof d, "%s", name);
	sqlite3_stmt *st = NULL;
	if (oci_digest_valid(d)) {
		st = prep("SELECT id FROM images WHERE id = ?1");
		if (st)
			sqlite3_bind_text(st, 1, d, -1, SQLITE_TRANSIENT);
	} else {
		struct oci_ref r;
		struct moat_err e = {0};
		char norm[600];
		if (oci_ref_parse(name, &r, &e) < 0 || oci_ref_format(&r, norm, sizeof norm) < 0)
			return 0;
		st = prep("SELECT image FROM image_names WHERE name = ?1");
		if (st)
			sqlite3_bind_text(st, 1, norm, -1, SQLITE_TRANSIENT);
	}
	if (!st)
		return -1;
	int rc = sqlite3_step(st);
	int found = 0;
	if (rc == SQLITE_ROW && sqlite3_column_text(st, 0)) {
		snprintf(id, OCI_DIGEST_LEN + 1, "%s", (const char *)sqlite3_column_text(st, 0));
		found = 1;
	} else if (rc != SQLITE_DONE) {
		found = -1;
	}
	sqlite3_finalize(st);
	return found;
}

static json_t *strv_json(char **v)
{
	if (!v)
		return json_null();
	json_t *a = json_array();
	for (size_t i = 0; v[i]; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

static json_t *config_json(const struct oci_config *c)
{
	return json_pack("{s:o,s:s?,s:s?,s:o,s:o,s:s,s:s}", "env", strv_json(c->env), "workdir",
			 c->workdir, "user", c->user, "entrypoint", strv_json(c->entrypoint),
			 "cmd", strv_json(c->cmd), "os", c->os, "architecture", c->arch);
}

static void iso_time(int64_t t, char out[32])
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *names_of(const char *id)
{
	json_t *a = json_array();
	sqlite3_stmt *st = prep("SELECT name FROM image_names WHERE image = ?1 ORDER BY name");
	if (!st)
		return a;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	while (sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(a, json_string((const char *)sqlite3_column_text(st, 0)));
	sqlite3_finalize(st);
	return a;
}

/* The image object: the list's fields, with details its layers and config. */
static json_t *image_json(const char *id, bool details)
{
	sqlite3_stmt *st = prep("SELECT size, created_at, config, config_digest FROM images "
				"WHERE id = ?1");
	if (!st)
		return NULL;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		return NULL;
	}
	char when[32];
	iso_time(sqlite3_column_int64(st, 1), when);
	json_t *o = json_pack("{s:s,s:o,s:I,s:s}", "id", id, "names", names_of(id), "size",
			      (json_int_t)sqlite3_column_int64(st, 0), "created", when);
	json_t *conf = json_loads((const char *)sqlite3_column_text(st, 2), 0, NULL);
	if (details) {
		json_object_set_new(o, "config_digest",
				    json_string((const char *)sqlite3_column_text(st, 3)));
		json_t *os = json_object_get(conf, "os"), *arch = json_object_get(conf, "architecture");
		if (os)
			json_object_set(o, "os", os);
		if (arch)
			json_object_set(o, "architecture", arch);
		json_object_del(conf, "os");
		json_object_del(conf, "architecture");
		json_object_set(o, "config", conf ? conf : json_object());
	}
	json_decref(conf);
	sqlite3_finalize(st);
	st = prep("SELECT digest, diff_id, size, unpacked, media_type FROM image_layers "
		  "WHERE image = ?1 ORDER BY idx");
	if (st)
		sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	json_t *ls = json_array();
	while (st && sqlite3_step(st) == SQLITE_ROW)
		json_array_append_new(
			ls, json_pack("{s:s,s:s,s:I,s:I,s:s}", "digest",
				      (const char *)sqlite3_column_text(st, 0), "diff_id",
				      (const char *)sqlite3_column_text(st, 1), "size",
				      (json_int_t)sqlite3_column_int64(st, 2), "unpacked_size",
				      (json_int_t)sqlite3_column_int64(st, 3), "media_type",
				      (const char *)sqlite3_column_text(st, 4)));
	sqlite3_finalize(st);
	json_object_set_new(o, "layer_count", json_integer((json_int_t)json_array_size(ls)));
	if (details)
		json_object_set_new(o, "layers", ls);
	else
		json_decref(ls);
	return o;
}

json_t *images_list(void)
{
	json_t *a = json_array();
	sqlite3_stmt *st = prep("SELECT id FROM images ORDER BY created_at, id");
	while (st && sqlite3_step(st) == SQLITE_ROW) {
		json_t *o = image_json((const char *)sqlite3_column_text(st, 0), false);
		if (o)
			json_array_append_new(a, o);
	}
	sqlite3_finalize(st);
	return json_pack("{s:o}", "images", a);
}

json_t *images_inspect(const char *name, struct core_err *e)
{
	char id[OCI_DIGEST_LEN + 1];
	int f = lookup(name, id);
	json_t *o = f > 0 ? image_json(id, true) : NULL;
	if (!o)
		cerr(e, f < 0 ? 500 : 404, f < 0 ? "internal" : "not_found", "no image %.300s", name);
	return o;
}

static int64_t layers_used(void)
{
	sqlite3_stmt *st = prep("SELECT SUM(u) FROM (SELECT MAX(unpacked) AS u FROM image_layers "
				"GROUP BY diff_id)");
	int64_t n = 0;
	if (st && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* Run q with ?1 = a, ?2 = b: 0 done, -1 failed. */
static int exec2(const char *q, const char *a, const char *b)
{
	sqlite3_stmt *st = prep(q);
	if (!st)
		return -1;
	sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
	sqlite3_finalize(st);
	return rc;
}

/* Write the image's row, its layers and its name, in one transaction. */
static int record(struct job *j, struct core_err *e)
{
	const struct oci_image *im = &j->im;
	json_t *cj = config_json(&im->config);
	char *conf = cj ? json_dumps(cj, JSON_COMPACT) : NULL;
	json_decref(cj);
	const char *name = j->kind == J_PULL ? j->key : j->name;
	int rc = conf ? sql("BEGIN IMMEDIATE") : -1;
	sqlite3_stmt *st = rc ? NULL
			      : prep("INSERT OR IGNORE INTO images(id, config, config_digest, size, "
				     "created_at) VALUES (?1, ?2, ?3, ?4, ?5)");
	if (st) {
		sqlite3_bind_text(st, 1, im->manifest, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, conf, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, im->m.config.digest, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, im->size);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)time(NULL));
		rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
		sqlite3_finalize(st);
	} else {
		rc = -1;
	}
	for (size_t i = 0; rc == 0 && i < im->m.nlayers; i++) {
		st = prep("INSERT OR REPLACE INTO image_layers VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
		if (!st) {
			rc = -1;
			break;
		}
		sqlite3_bind_text(st, 1, im->manifest, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)i);
		sqlite3_bind_text(st, 3, im->m.layers[i].digest, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, im->config.diff_ids[i], -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 5, im->m.layers[i].size);
		sqlite3_bind_int64(st, 6, j->unpacked[i]);
		sqlite3_bind_text(st, 7, im->m.layers[i].media_type, -1, SQLITE_STATIC);
		rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
		sqlite3_finalize(st);
	}
	/* the name moves from an older image: that one, left without a name,
	 * is collected once nothing uses it (see collect_orphans) */
	if (rc == 0 && name[0])
		rc = exec2("INSERT OR IGNORE INTO image_orphans SELECT image FROM image_names "
			   "WHERE name = ?1 AND image != ?2 AND (SELECT COUNT(*) FROM image_names n "
			   "WHERE n.image = image_names.image) = 1",
			   name, im->manifest);
	if (rc == 0 && name[0])
		rc = exec2("INSERT OR REPLACE INTO image_names VALUES (?1, ?2)", name, im->manifest);
	if (rc == 0)
		rc = sql("COMMIT");
	if (rc < 0) {
		sql("ROLLBACK");
		cerr(e, 500, "internal", "image store: %s", sqlite3_errmsg(store_db()));
	}
	free(conf);
	return rc;
}

/* ---- in use ------------------------------------------------------------------- */

struct use_ctx {
	const char *id;
	char who[128];
};

static void box_uses(struct box *b, void *arg)
{
	struct use_ctx *u = arg;
	json_t *o = box_json(b);
	const char *im = json_string_value(json_object_get(o, "image_id"));
	if (!u->who[0] && im && !strcmp(im, u->id))
		snprintf(u->who, sizeof u->who, "sandbox %s", box_id(b));
	json_decref(o);
}

/* Who uses image id: "" when nobody (a sandbox, a snapshot). */
static void used_by(const char *id, char who[128])
{
	struct use_ctx u = {.id = id};
	box_each(box_uses, &u);
	if (!u.who[0]) {
		/* the snapshots table is "snap"'s: absent until it exists */
		sqlite3_stmt *st = prep("SELECT id FROM snapshots WHERE image = ?1 LIMIT 1");
		if (st) {
			sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
			if (sqlite3_step(st) == SQLITE_ROW)
				snprintf(u.who, sizeof u.who, "snapshot %s",
					 (const char *)sqlite3_column_text(st, 0));
			sqlite3_finalize(st);
		}
	}
	snprintf(who, 128, "%s", u.who);
}

/* ---- the sweep ------------------------------------------------------------------- */

static void *rm_thread(void *arg)
{
	moat_rm_tree(arg);
	free(arg);
	return NULL;
}

/* Remove a layer tree off the loop: renamed out of the way at once (a
 * later pull unpacks it anew), removed by a detached thread; a daemon
 * killed meanwhile leaves a .gc-* the next start removes. */
static void drop_layer(const char *name)
{
	char from[PATH_MAX + 80], to[PATH_MAX + 80], r[17];
	rand_hex(r, 16);
	snprintf(from, sizeof from, "%s/%s", layers, name);
	snprintf(to, sizeof to, "%s/.gc-%s", layers, r);
	if (rename(from, to) < 0)
		return;
	char *p = strdup(to);
	pthread_t t;
	pthread_attr_t a;
	if (p && pthread_attr_init(&a) == 0) {
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, rm_thread, p) == 0)
			p = NULL;
		pthread_attr_destroy(&a);
	}
	if (p) { /* no thread: here, then */
		moat_rm_tree(p);
		free(p);
	}
}

static bool named(const char *q, const char *v)
{
	sqlite3_stmt *st = prep(q);
	if (!st)
		return true; /* the store failed: keep it */
	sqlite3_bind_text(st, 1, v, -1, SQLITE_TRANSIENT);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc != SQLITE_DONE;
}

static int del_image_rows(const char *id)
{
	static const char *const del[] = {"DELETE FROM image_layers WHERE image = ?1",
					  "DELETE FROM image_orphans WHERE id = ?1",
					  "DELETE FROM images WHERE id = ?1"};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < sizeof del / sizeof del[0]; i++) {
		sqlite3_stmt *st = prep(del[i]);
		if (!st)
			return -1;
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
		sqlite3_finalize(st);
	}
	return rc;
}

/* Images whose last name a later pull or import took: gone once no
 * sandbox or snapshot uses them (one that got a name again is kept). */
static void collect_orphans(void)
{
	sqlite3_stmt *st = prep("SELECT id, (SELECT COUNT(*) FROM image_names WHERE image = id) "
				"FROM image_orphans");
	struct moat_strv drop = {0}, named_again = {0};
	while (st && sqlite3_step(st) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(st, 0);
		char who[128];
		if (!id)
			continue;
		if (sqlite3_column_int64(st, 1) > 0) {
			moat_strv_add(&named_again, id);
			continue;
		}
		used_by(id, who);
		if (!who[0])
			moat_strv_add(&drop, id);
	}
	sqlite3_finalize(st);
	for (size_t i = 0; i < named_again.n; i++) {
		st = prep("DELETE FROM image_orphans WHERE id = ?1");
		if (st) {
			sqlite3_bind_text(st, 1, named_again.v[i], -1, SQLITE_STATIC);
			sqlite3_step(st);
			sqlite3_finalize(st);
		}
	}
	for (size_t i = 0; i < drop.n; i++) {
		if (sql("BEGIN IMMEDIATE") < 0)
			break;
		if (del_image_rows(drop.v[i]) == 0)
			sql("COMMIT");
		else
			sql("ROLLBACK");
	}
	moat_strv_free(&drop);
	moat_strv_free(&named_again);
}

/* Blobs and layers no image row names, and what a killed daemon left
 * (layers/.tmp-*, .gc-*). Only while no job runs. */
static void sweep(bool at_start)
{
	if (jobs)
		return;
	collect_orphans();
	char dir[PATH_MAX + 32];
	snprintf(dir, sizeof dir, "%s/blobs/sha256", root);
	DIR *d = opendir(dir);
	for (struct dirent *de; d && (de = readdir(d));) {
		if (de->d_name[0] == '.')
			continue;
		char dg[OCI_DIGEST_LEN + 8];
		snprintf(dg, sizeof dg, "sha256:%s", de->d_name);
		if (!oci_digest_valid(dg)) {
			unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
		if (!named("SELECT 1 FROM images WHERE id = ?1 OR config_digest = ?1 LIMIT 1", dg) &&
		    !named("SELECT 1 FROM image_layers WHERE digest = ?1 LIMIT 1", dg))
			oci_blob_remove(root, dg);
	}
	if (d)
		closedir(d);
	d = opendir(layers);
	for (struct dirent *de; d && (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!strncmp(de->d_name, ".gc-", 4) && at_start) {
			char p[PATH_MAX + 300];
			snprintf(p, sizeof p, "%s/%s", layers, de->d_name);
			moat_rm_tree(p);
			continue;
		}
		if (de->d_name[0] == '.') {
			if (!strncmp(de->d_name, ".tmp-", 5))
				drop_layer(de->d_name);
			continue;
		}
		char dg[OCI_DIGEST_LEN + 8];
		snprintf(dg, sizeof dg, "sha256:%s", de->d_name);
		if (!oci_digest_valid(dg) ||
		    !named("SELECT 1 FROM image_layers WHERE diff_id = ?1 LIMIT 1", dg))
			drop_layer(de->d_name);
	}
	if (d)
		closedir(d);
}

void images_gc(void)
{
	sweep(true);
}

void images_collect(void)
{
	sweep(false);
}

int images_remove(const char *name, struct core_err *e)
{
	char id[OCI_DIGEST_LEN + 1];
	int f = lookup(name, id);
	if (f <= 0) {
		cerr(e, f < 0 ? 500 : 404, f < 0 ? "internal" : "not_found", "no image %.300s", name);
		return -1;
	}
	bool by_digest = oci_digest_valid(name) || strlen(name) == 64;
	char norm[600] = "";
	if (!by_digest) {
		struct oci_ref r;
		struct moat_err me = {0};
		if (oci_ref_parse(name, &r, &me) == 0)
			oci_ref_format(&r, norm, sizeof norm);
	}
	json_t *names = names_of(id);
	bool last = by_digest || json_array_size(names) <= 1;
	json_decref(names);
	char who[128];
	used_by(id, who);
	if (last && who[0]) {
		cerr(e, 409, "conflict", "image %.300s is in use by %s (remove it first)", name, who);
		return -1;
	}
	int rc = sql("BEGIN IMMEDIATE");
	sqlite3_stmt *st = rc ? NULL
			      : prep(by_digest ? "DELETE FROM image_names WHERE image = ?1"
					       : "DELETE FROM image_names WHERE name = ?1");
	if (st) {
		sqlite3_bind_text(st, 1, by_digest ? id : norm, -1, SQLITE_STATIC);
		rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
		sqlite3_finalize(st);
	} else {
		rc = -1;
	}
	if (rc == 0 && last)
		rc = del_image_rows(id);
	if (rc == 0)
		rc = sql("COMMIT");
	if (rc < 0) {
		sql("ROLLBACK");
		cerr(e, 500, "internal", "image store: %s", sqlite3_errmsg(store_db()));
		return -1;
	}
	if (last)
		sweep(false); /* else when the last job ends */
	return 0;
}

/* ---- resolve (a create) ------------------------------------------------------------ */

int images_resolve(const char *name, struct images_resolved *out, struct core_err *e)
{
	memset(out, 0, sizeof *out);
	int f = lookup(name, out->id);
	if (f < 0) {
		cerr(e, 500, "internal", "image store: %s", sqlite3_errmsg(store_db()));
		return -1;
	}
	if (!f)
		return 0;
	snprintf(out->name, sizeof out->name, "%s", name);
	sqlite3_stmt *st = prep("SELECT diff_id FROM image_layers WHERE image = ?1 ORDER BY idx DESC");
	if (!st) {
		cerr(e, 500, "internal", "image store: %s", sqlite3_errmsg(store_db()));
		return -1;
	}
	sqlite3_bind_text(st, 1, out->id, -1, SQLITE_STATIC);
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *diff = (const char *)sqlite3_column_text(st, 0);
		char *p = moat_strdupf("%s/%s", layers, diff ? diff + 7 : "");
		struct stat sb;
		if (!diff || strlen(diff) != OCI_DIGEST_LEN || stat(p, &sb) < 0) {
			cerr(e, 500, "internal", "image %.300s: layer %s missing from the store", name,
			     diff ? diff : "?");
			free(p);
			sqlite3_finalize(st);
			images_resolved_free(out);
			return -1;
		}
		moat_strv_take(&out->layers, p);
	}
	sqlite3_finalize(st);
	st = prep("SELECT config FROM images WHERE id = ?1");
	if (st) {
		sqlite3_bind_text(st, 1, out->id, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW)
			out->config = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
		sqlite3_finalize(st);
	}
	if (!out->config)
		out->config = json_object();
	if (!out->layers.n) {
		/* an image of no layer: an empty root; the engine wants one */
		cerr(e, 400, "invalid_request", "image %.300s has no layer", name);
		images_resolved_free(out);
		return -1;
	}
	return 1;
}

void images_resolved_free(struct images_resolved *r)
{
	moat_strv_free(&r->layers);
	json_decref(r->config);
	r->config = NULL;
}

/* ---- workers ---------------------------------------------------------------------- */

static void signal_loop(struct job *j)
{
	uint64_t one = 1;
	if (write(j->efd, &one, sizeof one) < 0) {
		/* the counter is saturated: a wakeup is pending anyway */
	}
}

static void on_progress(void *arg, const struct oci_progress *p)
{
	struct job *j = arg;
	int64_t t = now_ms();
	pthread_mutex_lock(&mu);
	bool news = p->layers_done != j->prog.layers_done || t - j->last_signal_ms >= 100;
	j->prog = *p;
	j->prog.current = NULL; /* the worker's string: not kept */
	if (news)
		j->last_signal_ms = t;
	pthread_mutex_unlock(&mu);
	if (news)
		signal_loop(j);
}

/* Bytes of the blobs in the store now. */
static int64_t blob_bytes(void)
{
	char dir[PATH_MAX + 32];
	snprintf(dir, sizeof dir, "%s/blobs/sha256", root);
	DIR *d = opendir(dir);
	int64_t n = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		struct stat st;
		if (de->d_name[0] != '.' && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			n += (int64_t)st.st_size;
	}
	if (d)
		closedir(d);
	return n;
}

static __thread int64_t du_sum;
static int du_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	du_sum += (int64_t)st->st_blocks * 512;
	return 0;
}
static int64_t du(const char *dir)
{
	du_sum = 0;
	nftw(dir, du_one, 32, FTW_PHYS | FTW_MOUNT);
	return du_sum;
}

static int unpack_one(struct job *j, size_t i, int64_t *room)
{
	const char *diff = j->im.config.diff_ids[i];
	const char *blob = j->im.m.layers[i].digest;
	char dst[PATH_MAX + 80], tmp[PATH_MAX + 120], r[17];
	snprintf(dst, sizeof dst, "%s/%s", layers, diff + 7);
	/* one unpack per layer, whoever asks: wait for another worker's */
	pthread_mutex_lock(&mu);
	for (;;) {
		bool busy = false;
		for (struct unpacking *u = unpacking; u; u = u->next)
			busy = busy || !strcmp(u->hex, diff + 7);
		if (!busy)
			break;
		pthread_cond_wait(&unpacked_cv, &mu);
	}
	struct stat sb;
	if (stat(dst, &sb) == 0) {
		pthread_mutex_unlock(&mu);
		j->unpacked[i] = du(dst);
		return 0;
	}
	struct unpacking *me = calloc(1, sizeof *me);
	if (me) {
		snprintf(me->hex, sizeof me->hex, "%s", diff + 7);
		me->next = unpacking;
		unpacking = me;
	}
	pthread_mutex_unlock(&mu);
	if (!me)
		return moat_err_set(&j->err, MOAT_E_SYSTEM, ENOMEM, "layer %s", diff);
	int rc = -1;
	char path[PATH_MAX + 100];
	int fd = -1;
	if (oci_blob_path(root, blob, path, sizeof path) < 0 ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		moat_err_set(&j->err, MOAT_E_SYSTEM, errno, "layer blob %s", blob);
		goto out;
	}
	/* unpacked under a .tmp- name, checked, then renamed in: a layer dir
	 * named by its diff_id always holds what that diff_id says */
	rand_hex(r, 16);
	snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%s", layers, r, diff + 7);
	bool limited = cfg.store_max && *room < cfg.layer_max;
	struct oci_unpack_opts o = {.keep_owners = geteuid() == 0,
				    .max_bytes = (uint64_t)(limited ? (*room > 0 ? *room : 0)
								    : cfg.layer_max),
				    .max_entries = 1u << 20};
	char got[OCI_DIGEST_LEN + 1] = "";
	if (oci_unpack_layer(fd, tmp, &o, got, &j->err) < 0) {
		if (j->err.errnum == EFBIG && limited)
			j->room_limited = true;
		moat_err_prefix(&j->err, "layer %zu (%s)", i + 1, blob);
		goto out;
	}
	if (strcmp(got, diff)) {
		moat_rm_tree(tmp);
		moat_err_set(&j->err, MOAT_E_USAGE, EBADMSG,
			     "layer %zu (%s): its content is %s, the config's rootfs.diff_ids say %s",
			     i + 1, blob, got, diff);
		goto out;
	}
	j->unpacked[i] = du(tmp);
	*room -= j->unpacked[i];
	if (rename(tmp, dst) < 0) {
		moat_err_set(&j->err, MOAT_E_SYSTEM, errno, "layer %s", dst);
		moat_rm_tree(tmp);
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	pthread_mutex_lock(&mu);
	for (struct unpacking **u = &unpacking; *u; u = &(*u)->next)
		if (*u == me) {
			*u = me->next;
			break;
		}
	free(me);
	pthread_cond_broadcast(&unpacked_cv);
	pthread_mutex_unlock(&mu);
	return rc;
}

static int write_body(struct job *j, char *path, size_t cap)
{
	char r[17];
	rand_hex(r, 16);
	snprintf(path, cap, "%s/tmp/import-%s.tar", root, r);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return moat_err_set(&j->err, MOAT_E_SYSTEM, errno, "%s", path);
	while (evbuffer_get_length(j->body) > 0) {
		int n = evbuffer_write(j->body, fd);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			moat_err_set(&j->err, MOAT_E_SYSTEM, n < 0 ? errno : EIO, "%s", path);
			close(fd);
			unlink(path);
			return -1;
		}
	}
	if (close(fd) < 0) {
		moat_err_set(&j->err, MOAT_E_SYSTEM, errno, "%s", path);
		unlink(path);
		return -1;
	}
	return 0;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	int rc;
	int64_t room = cfg.store_max ? cfg.store_max - blob_bytes() - j->layers_used : INT64_MAX;
	if (cfg.store_max && room <= 0) {
		j->room_limited = true;
		rc = moat_err_set(&j->err, MOAT_E_USAGE, ENOSPC, "the store is full");
		goto end;
	}
	if (j->kind == J_PULL) {
		struct oci_pull_opts o = {.insecure = j->insecure, .auth_file = cfg.auth_file,
					  .max_bytes = room, .cancel = &j->cancel,
					  .progress = on_progress, .arg = j};
		rc = oci_pull(root, &j->ref, &o, &j->im, &j->err);
	} else {
		char path[PATH_MAX + 64];
		rc = write_body(j, path, sizeof path);
		evbuffer_free(j->body);
		j->body = NULL;
		if (rc == 0) {
			rc = oci_import(root, path, NULL, room, on_progress, j, &j->im, &j->err);
			unlink(path);
		}
	}
	if (rc < 0 && j->err.errnum == EFBIG && cfg.store_max)
		j->room_limited = true;
	j->have_im = rc == 0;
	if (rc == 0 && j->im.config.ndiff != j->im.m.nlayers)
		rc = moat_err_set(&j->err, MOAT_E_USAGE, EBADMSG,
				  "the manifest has %zu layers, the config's rootfs.diff_ids %zu",
				  j->im.m.nlayers, j->im.config.ndiff);
	if (rc == 0 && cfg.store_max)
		room = cfg.store_max - blob_bytes() - j->layers_used;
	for (size_t i = 0; rc == 0 && i < j->im.m.nlayers && !j->cancel; i++) {
		rc = unpack_one(j, i, &room);
		if (rc == 0) {
			struct oci_progress p;
			pthread_mutex_lock(&mu);
			p = j->prog;
			pthread_mutex_unlock(&mu);
			p.layers_total = j->im.m.nlayers;
			on_progress(j, &p);
		}
	}
	if (rc == 0 && j->cancel)
		rc = moat_err_set(&j->err, MOAT_E_SYSTEM, ECANCELED, "the daemon is stopping");
end:
	pthread_mutex_lock(&mu);
	j->rc = rc;
	j->finished = true;
	pthread_mutex_unlock(&mu);
	signal_loop(j);
	return NULL;
}

/* ---- jobs on the loop ------------------------------------------------------------ */

static void map_err(const struct job *j, struct core_err *e)
{
	const char *m = j->err.msg[0] ? j->err.msg : strerror(j->err.errnum);
	const char *what = j->kind == J_PULL ? j->key : "import";
	switch (j->err.errnum) {
	case ENOSPC:
	case EFBIG:
		if (j->room_limited || j->err.errnum == ENOSPC) {
			if (cfg.store_max && j->room_limited)
				cerr(e, 507, "insufficient_storage",
				     "%.300s: the image store would exceed --store-max %lld bytes: %.500s",
				     what, (long long)cfg.store_max, m);
			else
				cerr(e, 507, "insufficient_storage", "%.300s: no space left: %.500s",
				     what, m);
			return;
		}
		cerr(e, 413, "too_large", "%.300s: %.600s", what, m);
		return;
	case EINVAL:
		cerr(e, 400, "invalid_request", "%.300s: %.600s", what, m);
		return;
	case ENOENT:
		cerr(e, j->kind == J_PULL ? 404 : 400, j->kind == J_PULL ? "not_found" : "invalid_request",
		     "%.300s: %.600s", what, m);
		return;
	case EACCES:
	case EPERM:
		cerr(e, 403, "forbidden", "%.300s: %.600s", what, m);
		return;
	case EBADMSG:
		cerr(e, 422, "invalid_image", "%.300s: %.600s", what, m);
		return;
	case ECANCELED:
		cerr(e, 503, "unavailable", "%.300s: %.600s", what, m);
		return;
	default:
		if (j->kind == J_PULL)
			cerr(e, 502, "registry_error", "%.300s: %.600s", what, m);
		else
			cerr(e, j->err.kind == MOAT_E_SYSTEM ? 500 : 400,
			     j->err.kind == MOAT_E_SYSTEM ? "internal" : "invalid_request", "%.300s: %.600s",
			     what, m);
	}
}

static void job_free(struct job *j)
{
	for (struct job **p = &jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			njobs--;
			break;
		}
	if (j->ev)
		event_free(j->ev);
	if (j->efd >= 0)
		close(j->efd);
	if (j->body)
		evbuffer_free(j->body);
	if (j->have_im)
		oci_image_free(&j->im);
	while (j->waiters) {
		struct images_wait *w = j->waiters;
		j->waiters = w->next;
		free(w);
	}
	free(j);
}

/* Every blob and layer of the finished job's image is in place. */
static int check_complete(struct job *j, struct core_err *e)
{
	const struct oci_image *im = &j->im;
	if (!oci_blob_has(root, im->manifest) || !oci_blob_has(root, im->m.config.digest)) {
		cerr(e, 500, "internal", "image %s: its manifest or config blob is missing", im->manifest);
		return -1;
	}
	for (size_t i = 0; i < im->m.nlayers; i++) {
		char p[PATH_MAX + 80];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", layers, im->config.diff_ids[i] + 7);
		if (!oci_blob_has(root, im->m.layers[i].digest) || stat(p, &st) < 0) {
			cerr(e, 500, "internal", "image %s: layer %s is missing", im->manifest,
			     im->m.layers[i].digest);
			return -1;
		}
	}
	return 0;
}

/* An import's name from the archive (ref.name / RepoTags), normalised;
 * "" when it has none usable. */
static void archive_name(struct job *j)
{
	if (j->kind != J_IMPORT || j->name[0] || !j->im.name[0])
		return;
	struct oci_ref r;
	struct moat_err me = {0};
	if (oci_ref_parse(j->im.name, &r, &me) == 0)
		oci_ref_format(&r, j->name, sizeof j->name);
}

static void on_job(evutil_socket_t fd, short what, void *arg)
{
	struct job *j = arg;
	uint64_t n;
	if (read(j->efd, &n, sizeof n) < 0 && errno != EAGAIN)
		return;
	pthread_mutex_lock(&mu);
	struct oci_progress p = j->prog;
	bool fin = j->finished;
	pthread_mutex_unlock(&mu);
	if (!fin) {
		for (struct images_wait *w = j->waiters; w; w = w->next)
			if (w->cbs->progress)
				w->cbs->progress(w->arg, &p);
		return;
	}
	pthread_join(j->th, NULL);
	j->th_started = false;
	struct core_err e = {0};
	json_t *image = NULL;
	if (j->rc < 0)
		map_err(j, &e);
	else if (archive_name(j), check_complete(j, &e) == 0 && record(j, &e) == 0)
		image = image_json(j->im.manifest, true);
	if (!image && !e.status)
		cerr(&e, 500, "internal", "image store: cannot read the image back");
	/* the waiters leave first: a callback may start another job */
	struct images_wait *ws = j->waiters;
	j->waiters = NULL;
	job_free(j);
	while (ws) {
		struct images_wait *w = ws;
		ws = w->next;
		w->cbs->done(w->arg, image, image ? NULL : &e);
		free(w);
	}
	json_decref(image);
	sweep(false); /* a failure's blobs; only once no job runs */
}

static struct images_wait *wait_on(struct job *j, const struct images_cbs *cbs, void *arg,
				   struct core_err *e)
{
	struct images_wait *w = calloc(1, sizeof *w);
	if (!w) {
		cerr(e, 500, "internal", "out of memory");
		return NULL;
	}
	w->j = j;
	w->cbs = cbs;
	w->arg = arg;
	w->next = j->waiters;
	j->waiters = w;
	return w;
}

static struct job *job_new(enum job_kind k, struct core_err *e)
{
	if (njobs >= MAX_JOBS) {
		cerr(e, 429, "limit_reached", "%d pulls and imports are running; try again later",
		     MAX_JOBS);
		return NULL;
	}
	struct job *j = calloc(1, sizeof *j);
	if (!j) {
		cerr(e, 500, "internal", "out of memory");
		return NULL;
	}
	j->kind = k;
	j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	j->ev = j->efd >= 0 ? event_new(cfg.base, j->efd, EV_READ | EV_PERSIST, on_job, j) : NULL;
	if (!j->ev || event_add(j->ev, NULL) < 0) {
		if (j->ev)
			event_free(j->ev);
		if (j->efd >= 0)
			close(j->efd);
		free(j);
		cerr(e, 500, "internal", "cannot watch a worker: %s", strerror(errno));
		return NULL;
	}
	j->layers_used = layers_used();
	j->next = jobs;
	jobs = j;
	njobs++;
	return j;
}

static int job_run(struct job *j, struct core_err *e)
{
	if (pthread_create(&j->th, NULL, worker, j) != 0) {
		cerr(e, 500, "internal", "cannot start a worker thread");
		return -1;
	}
	j->th_started = true;
	return 0;
}

static bool loopback_host(const char *reg)
{
	return !strncmp(reg, "127.", 4) || !strcmp(reg, "localhost") ||
	       !strncmp(reg, "localhost:", 10) || !strncmp(reg, "[::1]", 5);
}

static bool matches(char *const *pats, const char *reg)
{
	for (size_t i = 0; pats && pats[i]; i++)
		if (!fnmatch(pats[i], reg, FNM_CASEFOLD))
			return true;
	return false;
}

/* The registries a pull may contact unless the operator says otherwise
 * (--registry): the well-known public ones and loopback. docs/SECURITY.md. */
static char *const default_registries[] = {
	"docker.io", "registry-1.docker.io", "ghcr.io", "quay.io", "registry.k8s.io", "gcr.io",
	"*.gcr.io", "*.pkg.dev", "public.ecr.aws", "mcr.microsoft.com", "registry.gitlab.com",
	"registry.fedoraproject.org", "127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*",
	"[::1]", "[::1]:*", NULL};

struct images_wait *images_pull(const char *ref, bool insecure, const struct images_cbs *cbs,
				void *arg, struct core_err *e)
{
	struct oci_ref r;
	struct moat_err me = {0};
	char key[600];
	if (!ref || !*ref) {
		cerr(e, 400, "invalid_request", "ref must be an image reference");
		return NULL;
	}
	if (oci_ref_parse(ref, &r, &me) < 0 || oci_ref_format(&r, key, sizeof key) < 0) {
		cerr(e, 400, "invalid_request", "ref: %.600s", me.msg[0] ? me.msg : "too long");
		return NULL;
	}
	if (!matches(cfg.registries ? cfg.registries : default_registries, r.registry)) {
		cerr(e, 403, "forbidden",
		     "registry %.256s is not one this daemon pulls from (moat serve --registry)",
		     r.registry);
		return NULL;
	}
	if (insecure && !loopback_host(r.registry) && !matches(cfg.insecure, r.registry)) {
		cerr(e, 403, "forbidden",
		     "insecure (plain http) pulls are for loopback registries and those of "
		     "--insecure-registry; not %.256s",
		     r.registry);
		return NULL;
	}
	for (struct job *j = jobs; j; j = j->next)
		if (j->kind == J_PULL && !strcmp(j->key, key) && j->insecure == insecure)
			return wait_on(j, cbs, arg, e); /* downloaded once */
	struct job *j = job_new(J_PULL, e);
	if (!j)
		return NULL;
	snprintf(j->key, sizeof j->key, "%s", key);
	j->ref = r;
	j->insecure = insecure;
	struct images_wait *w = wait_on(j, cbs, arg, e);
	if (!w || job_run(j, e) < 0) {
		job_free(j);
		return NULL;
	}
	return w;
}

struct images_wait *images_import(struct evbuffer *body, const char *name,
				  const struct images_cbs *cbs, void *arg, struct core_err *e)
{
	char norm[600] = "";
	if (name && *name) {
		struct oci_ref r;
		struct moat_err me = {0};
		if (oci_ref_parse(name, &r, &me) < 0 || oci_ref_format(&r, norm, sizeof norm) < 0) {
			cerr(e, 400, "invalid_request", "name: %.600s", me.msg[0] ? me.msg : "too long");
			return NULL;
		}
	}
	if (!evbuffer_get_length(body)) {
		cerr(e, 400, "invalid_request", "the body must be the image archive (a tar)");
		return NULL;
	}
	struct job *j = job_new(J_IMPORT, e);
	if (!j)
		return NULL;
	snprintf(j->name, sizeof j->name, "%s", norm);
	j->body = evbuffer_new();
	struct images_wait *w = j->body && evbuffer_add_buffer(j->body, body) == 0
					? wait_on(j, cbs, arg, e)
					: NULL;
	if (!w && !e->status)
		cerr(e, 500, "internal", "out of memory");
	if (!w || job_run(j, e) < 0) {
		job_free(j);
		return NULL;
	}
	return w;
}

void images_wait_cancel(struct images_wait *w)
{
	if (!w)
		return;
	for (struct images_wait **p = &w->j->waiters; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	free(w);
}

/* ---- start and stop ------------------------------------------------------------ */

int images_init(const struct images_config *c, struct moat_err *e)
{
	cfg = *c;
	if (!cfg.layer_max)
		cfg.layer_max = (int64_t)16 << 30;
	snprintf(root, sizeof root, "%s/images", c->data_dir);
	snprintf(layers, sizeof layers, "%s/layers", root);
	if ((mkdir(root, 0700) < 0 && errno != EEXIST) ||
	    (mkdir(layers, 0755) < 0 && errno != EEXIST))
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "image store %s", root);
	if (oci_blobs_open(root, e) < 0)
		return -1;
	if (sql("CREATE TABLE IF NOT EXISTS images (id TEXT PRIMARY KEY, config TEXT NOT NULL,"
		" config_digest TEXT NOT NULL, size INTEGER NOT NULL, created_at INTEGER NOT NULL);"
		"CREATE TABLE IF NOT EXISTS image_names (name TEXT PRIMARY KEY,"
		" image TEXT NOT NULL);"
		"CREATE TABLE IF NOT EXISTS image_layers (image TEXT NOT NULL, idx INTEGER NOT NULL,"
		" digest TEXT NOT NULL, diff_id TEXT NOT NULL, size INTEGER NOT NULL,"
		" unpacked INTEGER NOT NULL, media_type TEXT NOT NULL, PRIMARY KEY (image, idx));"
		"CREATE TABLE IF NOT EXISTS image_orphans (id TEXT PRIMARY KEY);"
		"CREATE INDEX IF NOT EXISTS image_layers_diff ON image_layers(diff_id);"
		"CREATE INDEX IF NOT EXISTS image_layers_digest ON image_layers(digest);") < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "image store tables: %s",
				    sqlite3_errmsg(store_db()));
	return 0;
}

void images_shutdown(void)
{
	for (struct job *j = jobs; j; j = j->next)
		j->cancel = 1;
	while (jobs) {
		struct job *j = jobs;
		if (j->th_started)
			pthread_join(j->th, NULL);
		j->th_started = false;
		job_free(j);
	}
}
