/* Snapshots, restore, fork: see snap.h. */
#define _GNU_SOURCE
#include "snap.h"
#include "snap_size.h"

#include "box.h"
#include "core.h"
#include "jfield.h"
#include "store.h"
#include "../base/cleanup.h"
#include "../base/own.h"
#include "../base/util.h"

#include <moat/jail.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SNAPS "snapshots"
#define FORK_MAX 32

static enum moat_fsclone backend = MOAT_FSCLONE_COPY;
static uint64_t store_max;
static const char *crash_at;
/* the overlay's work directory: never copied (the kernel's scratch),
 * made empty in a writable clone */
static const char *const skip_work[] = {"work", NULL};

/* MOAT_TEST_CRASH_AT=<step>: SIGKILL ourselves there (tests/e2e/test_snapshots.py) */
void snap_crash_point(const char *step)
{
	if (crash_at && !strcmp(crash_at, step)) {
		fprintf(stderr, "moat serve: MOAT_TEST_CRASH_AT=%s: killing myself\n", step);
		raise(SIGKILL);
	}
}

enum moat_fsclone snap_backend(void)
{
	return backend;
}

static void random_id(char *out, size_t len, const char *prefix)
{
	static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char r[32];
	size_t pl = strlen(prefix);
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		abort(); /* no entropy: nothing sensible to do */
	memcpy(out, prefix, pl);
	for (size_t i = pl; i < len && i < sizeof r; i++)
		out[i] = al[r[i] % 36];
	out[len] = '\0';
}

/* ---- the table ------------------------------------------------------------ */

struct snap_row {
	char id[32];
	char *name, *sandbox, *image, *spec;
	int64_t created_at, size;
};

static void row_free(struct snap_row *r)
{
	free(r->name);
	free(r->sandbox);
	free(r->image);
	free(r->spec);
	*r = (struct snap_row){0};
}

static char *col(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	return t ? strdup((const char *)t) : NULL;
}

static void row_read(sqlite3_stmt *st, struct snap_row *r)
{
	const unsigned char *id = sqlite3_column_text(st, 0);
	snprintf(r->id, sizeof r->id, "%s", id ? (const char *)id : "");
	r->name = col(st, 1);
	r->sandbox = col(st, 2);
	r->image = col(st, 3);
	r->spec = col(st, 4);
	r->created_at = sqlite3_column_int64(st, 5);
	/* NULL: being measured (snap_size.h) */
	r->size = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 6);
}

#define COLS "id, name, sandbox, image, spec, created_at, size"

/* 1 found, 0 not, -1 error. ref: an id or a name. */
static int row_find(const char *ref, struct snap_row *r)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(store_db(),
				    "SELECT " COLS " FROM snapshots WHERE state = 'ready' AND "
				    "(id = ?1 OR name = ?1) ORDER BY id = ?1 DESC LIMIT 1",
				    -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, ref, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	int out = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
	if (out == 1)
		row_read(st, r);
	sqlite3_finalize(st);
	return out;
}

static int row_put(const struct snap_row *r)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(store_db(),
				    "INSERT INTO snapshots (" COLS ", state) VALUES (?,?,?,?,?,?,?,'ready')",
				    -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
		if (r->name)
			sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(st, 2);
		sqlite3_bind_text(st, 3, r->sandbox, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, r->image, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, r->spec, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 6, r->created_at);
		if (r->size >= 0)
			sqlite3_bind_int64(st, 7, r->size);
		else
			sqlite3_bind_null(st, 7);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int row_del(const char *id)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(store_db(), "DELETE FROM snapshots WHERE id = ?1", -1, &st,
				    NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int64_t total_size(void)
{
	sqlite3_stmt *st = NULL;
	int64_t n = 0;
	if (sqlite3_prepare_v2(store_db(), "SELECT COALESCE(SUM(size), 0) FROM snapshots", -1, &st,
			       NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static json_t *row_json(const struct snap_row *r)
{
	char when[32];
	time_t t = (time_t)r->created_at;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_pack("{s:s,s:s?,s:s,s:s,s:o,s:s,s:s}", "id", r->id, "name", r->name,
			 "sandbox_id", r->sandbox ? r->sandbox : "", "created_at", when, "size",
			 r->size >= 0 ? json_integer((json_int_t)r->size) : json_null(), "backend",
			 moat_fsclone_name(backend), "image", r->image ? r->image : "host");
}

/* ---- start: the table, and what a killed daemon left ---------------------- */

static bool known_dir(const char *name)
{
	sqlite3_stmt *st = NULL;
	bool known = false;
	if (sqlite3_prepare_v2(store_db(), "SELECT 1 FROM snapshots WHERE id = ?1", -1, &st,
			       NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
		known = sqlite3_step(st) == SQLITE_ROW;
	}
	sqlite3_finalize(st);
	return known;
}

static void sweep(void)
{
	/* directories: half-made ones (.tmp-*) and any without a row */
	DIR *d = opendir(SNAPS);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (de->d_name[0] != '.' && known_dir(de->d_name))
			continue;
		fprintf(stderr, "moat serve: %s/%s: no complete snapshot; removed\n", SNAPS,
			de->d_name);
		if (moat_fsclone_remove(dirfd(d), de->d_name) < 0)
			fprintf(stderr, "moat serve: %s/%s: %s\n", SNAPS, de->d_name, strerror(errno));
	}
	if (d)
		closedir(d);
	/* rows: any whose directory is not there (or not ready) */
	sqlite3_stmt *st = NULL;
	struct moat_strv gone = {0};
	if (sqlite3_prepare_v2(store_db(), "SELECT id, state FROM snapshots", -1, &st, NULL) ==
	    SQLITE_OK) {
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *id = (const char *)sqlite3_column_text(st, 0);
			const char *state = (const char *)sqlite3_column_text(st, 1);
			char p[128];
			struct stat sb;
			snprintf(p, sizeof p, "%s/%s/fs", SNAPS, id ? id : "");
			if (!id || !state || strcmp(state, "ready") || strchr(id, '/') ||
			    id[0] == '.' || stat(p, &sb) < 0)
				moat_strv_add(&gone, id ? id : "");
		}
	}
	sqlite3_finalize(st);
	for (size_t i = 0; i < gone.n; i++) {
		fprintf(stderr, "moat serve: snapshot %s has no files; its record is removed\n",
			gone.v[i]);
		row_del(gone.v[i]);
	}
	moat_strv_free(&gone);
}

static int row_set_size(const char *id, int64_t size)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(store_db(), "UPDATE snapshots SET size = ?2 WHERE id = ?1", -1,
				    &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, size);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* The size of snapshots/<id>/fs walked now (0 and a log line if it cannot be) */
static int64_t size_now(const char *id)
{
	char p[64];
	snprintf(p, sizeof p, "%s/%s/fs", SNAPS, id);
	int64_t n = moat_fsclone_size(AT_FDCWD, p);
	if (n < 0) {
		fprintf(stderr, "moat serve: size of %s: %s\n", p, strerror(errno));
		n = 0;
	}
	return n;
}

/* Measured later if nothing needs it now (no --store-max) and the worker
 * takes it; else walked here and written. The size known now, or -1. */
static int64_t size_later_or_now(const char *id)
{
	if (!store_max && snap_size_later(id))
		return -1;
	int64_t n = size_now(id);
	if (row_set_size(id, n) < 0)
		fprintf(stderr, "moat serve: snapshot %s: cannot record its size: %s\n", id,
			sqlite3_errmsg(store_db()));
	return n;
}

/* rows a killed daemon left unmeasured */
static void measure_pending(void)
{
	sqlite3_stmt *st = NULL;
	struct moat_strv ids = {0};
	if (sqlite3_prepare_v2(store_db(),
			       "SELECT id FROM snapshots WHERE size IS NULL AND state = 'ready'", -1,
			       &st, NULL) == SQLITE_OK)
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *id = (const char *)sqlite3_column_text(st, 0);
			if (id)
				moat_strv_add(&ids, id);
		}
	sqlite3_finalize(st);
	for (size_t i = 0; i < ids.n; i++)
		size_later_or_now(ids.v[i]);
	moat_strv_free(&ids);
}

int snap_init(struct event_base *base, uint64_t max, struct moat_err *e)
{
	store_max = max;
	crash_at = getenv("MOAT_TEST_CRASH_AT");
	char why[512];
	backend = moat_fsclone_probe(AT_FDCWD, why, sizeof why);
	box_set_fsclone((int)backend);
	fprintf(stderr, "moat serve: snapshots: %s, %s%s%s\n", moat_fsclone_name(backend),
		moat_fsclone_cost(backend), why[0] ? " (" : "", why[0] ? why : "");
	if (why[0])
		fprintf(stderr, ")\n");
	int fd = moat_own_dir(AT_FDCWD, SNAPS, 0700, e);
	if (fd < 0)
		return moat_err_prefix(e, "snapshots");
	close(fd);
	char *msg = NULL;
	if (sqlite3_exec(store_db(),
			 "CREATE TABLE IF NOT EXISTS snapshots(id TEXT PRIMARY KEY, name TEXT "
			 "UNIQUE, sandbox TEXT, image TEXT, spec TEXT, created_at INTEGER, size "
			 "INTEGER, state TEXT)",
			 NULL, NULL, &msg) != SQLITE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "snapshots table: %s", msg ? msg : "?");
		sqlite3_free(msg);
		return -1;
	}
	sweep();
	if (snap_size_init(base, e) < 0)
		return -1;
	measure_pending();
	return 0;
}

/* ---- capture ---------------------------------------------------------------- */

static void storage_err(struct core_err *e, int err, const char *what, const char *msg)
{
	if (err == ENOSPC || err == EDQUOT)
		cerr(e, 507, "insufficient_storage", "no space left for %s: %s", what, msg);
	else
		cerr(e, 500, "internal", "%s: %s", what, msg);
}

/* Freeze b's processes while its fs/ is copied, so that the copy is of
 * one moment: a tree walk (copy, reflink) would otherwise see a file
 * half-written, or one directory before and another after a rename. A
 * btrfs snapshot is atomic: no freeze. A sandbox its user paused stays
 * paused (box_hold leaves it). Without a freezer (a daemon that cannot
 * make freezer cgroups) the copy runs beside the processes, said once in
 * the log. 0, or -1 and e (the freeze failed: nothing was copied). */
static int hold(struct box *b, struct core_err *e)
{
	static bool warned;
	if (backend == MOAT_FSCLONE_BTRFS)
		return 0;
	struct moat_err me = {0};
	/* a freeze that did not settle (tasks forking fast on a loaded
	 * machine, FREEZING past the freezer's wait) is thawed and tried
	 * again, a few times, before the snapshot is refused */
	for (int i = 0; i < 3; i++) {
		me = (struct moat_err){0};
		if (box_hold(b, true, &me) == 0)
			return 0;
		if (me.errnum != ETIMEDOUT)
			break;
	}
	if (me.errnum == ENOTSUP) {
		if (!warned)
			fprintf(stderr, "moat serve: snapshots are copied beside the sandbox's "
				"processes (no freezer: %s)\n", me.msg);
		warned = true;
		return 0;
	}
	struct moat_err ign = {0};
	box_hold(b, false, &ign); /* a freeze that did not complete: undone */
	cerr(e, 503, "unavailable", "cannot freeze sandbox %s for a consistent copy (try again): %s",
	     box_id(b), me.msg);
	return -1;
}

static void release(struct box *b)
{
	if (backend == MOAT_FSCLONE_BTRFS)
		return;
	struct moat_err me = {0};
	if (box_hold(b, false, &me) < 0 && me.errnum != ENOTSUP)
		fprintf(stderr, "moat serve: %s: cannot thaw after a copy: %s\n", box_id(b), me.msg);
}

bool snap_name_ok(const char *n)
{
	size_t l = strlen(n);
	return l >= 1 && l <= 64 && strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					      "0123456789._-") == l &&
	       strcmp(n, "host") && n[0] != '.' && n[0] != '-';
}

static bool snapshotable(struct box *b, const char *what, struct core_err *e)
{
	if (box_workspace_tmpfs(b)) {
		cerr(e, 409, "conflict",
		     "sandbox %s keeps its workspace in memory (limits.disk): a %s needs it on "
		     "disk (create the sandbox without limits.disk)",
		     box_id(b), what);
		return false;
	}
	return true;
}

/* Under a root daemon a sandbox with users owns a host id range of its
 * own, and its files carry those ids: a copy cannot serve another one. */
static bool ids_fit(const json_t *from, const json_t *to, struct core_err *e)
{
	json_t *a = json_object_get(from, "idbase"), *b = to ? json_object_get(to, "idbase") : NULL;
	if (!a || (b && json_equal(a, b)))
		return true;
	cerr(e, 409, "conflict",
	     "the files of a sandbox with users belong to its own host id range: they cannot "
	     "start another sandbox under this (root) daemon");
	return false;
}

static const char *image_of(const json_t *spec)
{
	const char *id = json_string_value(json_object_get(spec, "image_id"));
	const char *img = json_string_value(json_object_get(spec, "image"));
	return id ? id : img ? img : "host";
}

/* The row of a snapshot whose directory dst is in place (r's strings
 * made, NULL when out of memory): written, or dst removed. Frees r. */
static json_t *record(struct snap_row *r, const char *name, const char *dst,
		      struct core_err *e)
{
	r->created_at = (int64_t)time(NULL);
	json_t *out = NULL;
	if (!r->sandbox || !r->image || !r->spec || (name && !r->name) || row_put(r) < 0) {
		moat_fsclone_remove(AT_FDCWD, dst);
		cerr(e, 500, "internal", "cannot record the snapshot: %s", sqlite3_errmsg(store_db()));
	} else {
		out = row_json(r);
	}
	row_free(r);
	return out;
}

json_t *snap_create(struct box *b, const char *name, struct core_err *e)
{
	if (!snapshotable(b, "snapshot", e))
		return NULL;
	struct snap_row r = {0};
	if (name && !snap_name_ok(name)) {
		cerr(e, 400, "invalid_request",
		     "name must be 1 to 64 letters, digits, '.', '_' or '-' (not first), not \"host\"");
		return NULL;
	}
	if (name && row_find(name, &r) != 0) {
		row_free(&r);
		cerr(e, 409, "already_exists", "a snapshot named %s exists", name);
		return NULL;
	}
	int64_t used = total_size();
	if (store_max && (uint64_t)used >= store_max) {
		cerr(e, 507, "insufficient_storage",
		     "the store is full: snapshots take %lld bytes of --store-max %llu",
		     (long long)used, (unsigned long long)store_max);
		return NULL;
	}
	random_id(r.id, 16, "s");
	char tmp[64], tmpfs[72], dst[64];
	snprintf(tmp, sizeof tmp, "%s/.tmp-%s", SNAPS, r.id);
	snprintf(tmpfs, sizeof tmpfs, "%s/fs", tmp);
	snprintf(dst, sizeof dst, "%s/%s", SNAPS, r.id);
	struct moat_err me = {0};
	if (mkdir(tmp, 0700) < 0) {
		storage_err(e, errno, "the snapshot", strerror(errno));
		return NULL;
	}
	if (hold(b, e) < 0) {
		moat_fsclone_remove(AT_FDCWD, tmp);
		return NULL;
	}
	snap_crash_point("snapshot-frozen");
	int rc = moat_fsclone_clone(backend, AT_FDCWD, box_fs(b), AT_FDCWD, tmpfs, true, skip_work,
				    &r.size, &me);
	release(b);
	if (rc < 0) {
		moat_fsclone_remove(AT_FDCWD, tmp);
		char what[64];
		snprintf(what, sizeof what, "the snapshot of sandbox %s", box_id(b));
		storage_err(e, me.errnum, what, me.msg);
		return NULL;
	}
	snap_crash_point("snapshot-captured");
	/* btrfs does not count while it clones: with --store-max the size is
	 * needed now; without, it is measured after the answer (snap_size.h) */
	if (r.size < 0 && store_max) {
		r.size = moat_fsclone_size(AT_FDCWD, tmpfs);
		if (r.size < 0) {
			fprintf(stderr, "moat serve: size of %s: %s\n", tmpfs, strerror(errno));
			r.size = 0;
		}
	}
	if (store_max && (uint64_t)(used + r.size) > store_max) {
		moat_fsclone_remove(AT_FDCWD, tmp);
		cerr(e, 507, "insufficient_storage",
		     "the snapshot of sandbox %s (%lld bytes) does not fit under --store-max %llu "
		     "(%lld used)",
		     box_id(b), (long long)r.size, (unsigned long long)store_max, (long long)used);
		return NULL;
	}
	if (rename(tmp, dst) < 0) {
		int err = errno;
		moat_fsclone_remove(AT_FDCWD, tmp);
		storage_err(e, err, "the snapshot", strerror(err));
		return NULL;
	}
	snap_crash_point("snapshot-renamed");
	r.name = name ? strdup(name) : NULL;
	r.sandbox = strdup(box_id(b));
	r.image = strdup(image_of(box_spec_json(b)));
	r.spec = json_dumps(box_spec_json(b), JSON_COMPACT);
	bool later = r.size < 0;
	char id[sizeof r.id];
	memcpy(id, r.id, sizeof id);
	json_t *out = record(&r, name, dst, e);
	if (out && later) {
		int64_t n = size_later_or_now(id);
		if (n >= 0)
			json_object_set_new(out, "size", json_integer((json_int_t)n));
	}
	return out;
}

json_t *snap_list(void)
{
	json_t *a = json_array();
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(store_db(),
			       "SELECT " COLS " FROM snapshots WHERE state = 'ready' ORDER BY "
			       "created_at, id",
			       -1, &st, NULL) == SQLITE_OK)
		while (sqlite3_step(st) == SQLITE_ROW) {
			struct snap_row r = {0};
			row_read(st, &r);
			json_array_append_new(a, row_json(&r));
			row_free(&r);
		}
	sqlite3_finalize(st);
	return json_pack("{s:o}", "snapshots", a);
}

static bool find(const char *ref, struct snap_row *r, struct core_err *e)
{
	int f = row_find(ref, r);
	if (f == 1)
		return true;
	if (f == 0)
		cerr(e, 404, "not_found", "no snapshot %.64s", ref);
	else
		cerr(e, 500, "internal", "snapshots: %s", sqlite3_errmsg(store_db()));
	return false;
}

json_t *snap_get(const char *ref, struct core_err *e)
{
	struct snap_row r = {0};
	if (!find(ref, &r, e))
		return NULL;
	json_t *o = row_json(&r);
	row_free(&r);
	return o;
}

int snap_delete(const char *ref, struct core_err *e)
{
	struct snap_row r = {0};
	if (!find(ref, &r, e))
		return -1;
	/* the row first: a daemon killed before the files are gone leaves a
	 * directory without a row, which the next start removes. Clones of
	 * it (sandboxes made from it) are copies of their own on every
	 * backend (btrfs snapshots share extents, not subvolumes). */
	if (row_del(r.id) < 0) {
		cerr(e, 500, "internal", "snapshots: %s", sqlite3_errmsg(store_db()));
		row_free(&r);
		return -1;
	}
	char dir[64];
	snprintf(dir, sizeof dir, "%s/%s", SNAPS, r.id);
	if (moat_fsclone_remove(AT_FDCWD, dir) < 0)
		fprintf(stderr, "moat serve: snapshot %s: could not remove all of %s: %s\n", r.id, dir,
			strerror(errno));
	row_free(&r);
	return 0;
}

/* ---- clones --------------------------------------------------------------- */

/* A writable clone of src at dst (relative to the data dir). */
static int clone_to(const char *src, const char *dst, struct core_err *e)
{
	struct moat_err me = {0};
	if (moat_fsclone_clone(backend, AT_FDCWD, src, AT_FDCWD, dst, false, skip_work, NULL,
			       &me) < 0) {
		storage_err(e, me.errnum, "a copy of the files", me.msg);
		return -1;
	}
	return 0;
}

/* sandboxes/.fs-<random>: swept at a start if a daemon dies holding it */
static char *new_clone_name(void)
{
	char id[24];
	random_id(id, 16, "f");
	return moat_strdupf("sandboxes/.fs-%s", id);
}

void snap_drop_fs(const char *fs)
{
	if (fs && moat_fsclone_remove(AT_FDCWD, fs) < 0)
		fprintf(stderr, "moat serve: could not remove %s: %s\n", fs, strerror(errno));
}

static char *snap_fs(const struct snap_row *r)
{
	return moat_strdupf("%s/%s/fs", SNAPS, r->id);
}

json_t *snap_restore(struct box *b, const char *ref, struct core_err *e)
{
	struct snap_row r = {0};
	if (!snapshotable(b, "restore", e) || !find(ref, &r, e))
		return NULL;
	json_t *spec = json_loads(r.spec, 0, NULL);
	json_t *out = NULL;
	_cleanup_free_ char *src = snap_fs(&r);
	char dst[128];
	snprintf(dst, sizeof dst, "%s/fs.new", box_dir(b));
	if (strcmp(image_of(spec), image_of(box_spec_json(b)))) {
		cerr(e, 409, "conflict",
		     "snapshot %s is of image %.200s, sandbox %s runs %.200s: its files do not fit",
		     r.id, image_of(spec), box_id(b), image_of(box_spec_json(b)));
		goto out;
	}
	if (!ids_fit(spec, box_spec_json(b), e))
		goto out;
	moat_fsclone_remove(AT_FDCWD, dst); /* a previous restore's, if it died */
	if (clone_to(src, dst, e) < 0)
		goto out;
	snap_crash_point("restore-cloned");
	struct moat_err me = {0};
	if (box_respawn(b, dst, &me) < 0) {
		snap_drop_fs(dst);
		cerr(e, 500, "internal", "%s", me.msg);
		goto out;
	}
	out = json_pack("{s:o,s:s,s:s}", "sandbox", box_json(b), "snapshot", r.id, "processes",
			"restarted");
out:
	json_decref(spec);
	row_free(&r);
	return out;
}

json_t *snap_fork(struct box *b, int count, struct core_err *e)
{
	if (count < 1 || count > FORK_MAX) {
		cerr(e, 400, "invalid_request", "count must be 1 to %d", FORK_MAX);
		return NULL;
	}
	if (!snapshotable(b, "fork", e) || !ids_fit(box_spec_json(b), NULL, e))
		return NULL;
	char *fs[FORK_MAX] = {0};
	struct box *made[FORK_MAX] = {0};
	json_t *out = NULL;
	int i;
	/* every copy of one moment: the sandbox held while they are made */
	if (hold(b, e) < 0)
		return NULL;
	for (i = 0; i < count; i++) {
		fs[i] = new_clone_name();
		if (clone_to(box_fs(b), fs[i], e) < 0)
			break;
	}
	release(b);
	if (i < count)
		goto out;
	snap_crash_point("fork-cloned");
	for (i = 0; i < count; i++) {
		struct box_spec s;
		box_spec_from_json(box_spec_json(b), &s);
		s.fs_from = fs[i];
		struct moat_err me = {0};
		made[i] = box_create(&s, &me);
		if (!made[i]) {
			if (me.errnum == EAGAIN)
				cerr(e, 429, "limit_reached", "fork %d of %d: %s", i + 1, count, me.msg);
			else
				cerr(e, 500, "internal", "fork %d of %d: %s", i + 1, count, me.msg);
			goto out;
		}
	}
	json_t *a = json_array();
	for (i = 0; i < count; i++)
		json_array_append_new(a, box_json(made[i]));
	out = json_pack("{s:o,s:s,s:s}", "sandboxes", a, "parent", box_id(b), "processes",
			"not copied");
out:
	for (i = 0; i < count; i++) {
		if (!out && made[i])
			box_delete(made[i]);
		snap_drop_fs(fs[i]); /* moved in already, or not needed */
		free(fs[i]);
	}
	return out;
}

int snap_for_create(const char *image, char **fs, json_t **spec, struct core_err *e)
{
	bool explicit = !strncmp(image, "snapshot:", 9);
	const char *ref = explicit ? image + 9 : image;
	struct snap_row r = {0};
	int f = row_find(ref, &r);
	if (f < 0) {
		cerr(e, 500, "internal", "snapshots: %s", sqlite3_errmsg(store_db()));
		return -1;
	}
	if (f == 0) {
		if (!explicit)
			return 0;
		cerr(e, 404, "not_found", "no snapshot %.64s", ref);
		return -1;
	}
	json_t *sp = json_loads(r.spec, 0, NULL);
	_cleanup_free_ char *src = snap_fs(&r);
	char *dst = new_clone_name();
	int rc = -1;
	if (!sp)
		cerr(e, 500, "internal", "snapshot %s: its record is unreadable", r.id);
	else if (ids_fit(sp, NULL, e) && clone_to(src, dst, e) == 0)
		rc = 1;
	row_free(&r);
	if (rc < 0) {
		json_decref(sp);
		free(dst);
		return -1;
	}
	*fs = dst;
	*spec = sp;
	return 1;
}

/* ---- for export and import ------------------------------------------------ */

int snap_info(const char *ref, struct snap_info *out, struct core_err *e)
{
	struct snap_row r = {0};
	if (!find(ref, &r, e))
		return -1;
	memcpy(out->id, r.id, sizeof out->id);
	out->name = r.name;
	out->image = r.image;
	out->spec = r.spec;
	free(r.sandbox);
	return 0;
}

void snap_info_free(struct snap_info *i)
{
	free(i->name);
	free(i->image);
	free(i->spec);
	*i = (struct snap_info){0};
}

void snap_new_id(char out[32])
{
	random_id(out, 16, "s");
}

json_t *snap_adopt(const char *id, const char *name, const char *image, const json_t *spec,
		   const char *ws, struct core_err *e)
{
	struct snap_row r = {0};
	if (name && row_find(name, &r) != 0) {
		row_free(&r);
		cerr(e, 409, "already_exists", "a snapshot named %s exists", name);
		return NULL;
	}
	int64_t used = total_size();
	snprintf(r.id, sizeof r.id, "%s", id);
	char tmp[64], p[96], dst[64];
	snprintf(tmp, sizeof tmp, "%s/.tmp-%s", SNAPS, r.id);
	snprintf(dst, sizeof dst, "%s/%s", SNAPS, r.id);
	struct moat_err me = {0};
	/* the tree copy of a layer: btrfs can reflink it (the layer is no
	 * subvolume), else as the backend copies */
	enum moat_fsclone tb = backend == MOAT_FSCLONE_BTRFS ? MOAT_FSCLONE_REFLINK : backend;
	int rc = mkdir(tmp, 0700) < 0 ? moat_err_set(&me, MOAT_E_SYSTEM, errno, "%s", tmp) : 0;
	snprintf(p, sizeof p, "%s/fs", tmp);
	if (rc == 0)
		rc = moat_fsclone_mkdir(backend, AT_FDCWD, p, 0700, &me);
	snprintf(p, sizeof p, "%s/fs/workspace", tmp);
	if (rc == 0)
		rc = moat_fsclone_clone(tb, AT_FDCWD, ws, AT_FDCWD, p, false, NULL, &r.size, &me);
	static const char *const empty[] = {"upper", "work"};
	for (size_t i = 0; rc == 0 && i < 2; i++) {
		snprintf(p, sizeof p, "%s/fs/%s", tmp, empty[i]);
		if (mkdir(p, 0755) < 0)
			rc = moat_err_set(&me, MOAT_E_SYSTEM, errno, "%s", p);
	}
	snap_crash_point("import-copied");
	if (rc == 0 && store_max && (uint64_t)(used + r.size) > store_max) {
		moat_fsclone_remove(AT_FDCWD, tmp);
		cerr(e, 507, "insufficient_storage",
		     "the imported snapshot (%lld bytes) does not fit under --store-max %llu "
		     "(%lld used)",
		     (long long)r.size, (unsigned long long)store_max, (long long)used);
		return NULL;
	}
	if (rc == 0 && rename(tmp, dst) < 0)
		rc = moat_err_set(&me, MOAT_E_SYSTEM, errno, "%s", dst);
	if (rc < 0) {
		moat_fsclone_remove(AT_FDCWD, tmp);
		storage_err(e, me.errnum, "the imported snapshot", me.msg);
		return NULL;
	}
	if (r.size < 0)
		r.size = 0;
	r.name = name ? strdup(name) : NULL;
	r.sandbox = strdup("");
	r.image = strdup(image);
	r.spec = json_dumps(spec, JSON_COMPACT);
	return record(&r, name, dst, e);
}
