/* Snapshots of a sandbox's filesystem state (its fs/: the workspace and,
 * for an image sandbox, the image root's changes), restore, fork and
 * creates from a snapshot. The copies are made by src/base/fsclone.h's
 * backend, probed on the data directory at start (btrfs: O(1); reflink:
 * O(files); copy: O(bytes)). Processes are never copied (this backend
 * has no memory checkpoint): a restore restarts the sandbox's processes,
 * a fork's sandboxes start with none.
 *
 * Table `snapshots` (moat.db): id, name (unique), sandbox, image (the base
 * image's manifest digest, "host" or a template path), spec (the sandbox's
 * stored spec JSON), created_at, size, state ("ready"). On disk:
 * <data>/snapshots/<sid>/fs, made as snapshots/.tmp-<sid> and renamed in
 * when complete; a start removes .tmp-* and any directory without a row,
 * and any row without a directory. */
#ifndef MOAT_SERVE_SNAP_H
#define MOAT_SERVE_SNAP_H

#include "../base/fsclone.h"

#include <moat/err.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct box;
struct core_err;

/* After store_open, in the data directory (the daemon's cwd): probe the
 * backend, make the table, sweep what a killed daemon left, measure the
 * sizes it left unmeasured (snap_size.h; base: the loop that records
 * them). store_max: bytes snapshots may take in all (0: no limit). */
struct event_base;
int snap_init(struct event_base *base, uint64_t store_max, struct moat_err *e);
enum moat_fsclone snap_backend(void);

/* Capture b's fs/ into a new snapshot (the sandbox keeps running).
 * name: optional (unique; 409 when taken). The API's snapshot object
 * {id,name,sandbox_id,created_at,size,backend,image} (new ref; size null
 * while a btrfs snapshot is being measured, snap_size.h), or NULL
 * and e: 404/409/507 insufficient_storage (ENOSPC or --store-max)/500.
 * A failure leaves no snapshot and the sandbox as it was. */
json_t *snap_create(struct box *b, const char *name, struct core_err *e);
json_t *snap_list(void);
/* ref: a snapshot id or name */
json_t *snap_get(const char *ref, struct core_err *e);
int snap_delete(const char *ref, struct core_err *e);
/* b's fs/ replaced by a writable clone of the snapshot and its processes
 * restarted (box_respawn): {"sandbox":{...},"processes":"restarted"}. */
json_t *snap_restore(struct box *b, const char *ref, struct core_err *e);
/* count (1..32) new sandboxes whose fs/ are clones of b's now, all or
 * none: {"sandboxes":[...],"processes":"not copied"}. */
json_t *snap_fork(struct box *b, int count, struct core_err *e);

/* A create's "image": "snapshot:<sid>" or a snapshot's name. 1: it names
 * one, *fs is a writable clone of it (a directory relative to the data
 * dir, to be moved in as the new sandbox's fs/; the caller removes it if
 * it is still there after the create) and *spec the snapshot's stored
 * spec (new ref); 0: not a snapshot (nothing set); -1: e (404 for an
 * unknown "snapshot:<sid>", 507, 500). */
int snap_for_create(const char *image, char **fs, json_t **spec, struct core_err *e);
/* Remove such a clone (or anything made under the data dir by fsclone). */
void snap_drop_fs(const char *fs);

/* For export and import (snap_io.c). A snapshot's record by id or name:
 * 0, or -1 and e (404, 500). */
struct snap_info {
	char id[32];
	char *name, *image, *spec; /* name may be NULL; image "host", a digest or a path */
};
int snap_info(const char *ref, struct snap_info *out, struct core_err *e);
void snap_info_free(struct snap_info *i);
/* A new snapshot id ("s" + 15 of [a-z0-9]); a name's rule (400 otherwise). */
void snap_new_id(char out[32]);
/* MOAT_TEST_CRASH_AT=<step> (read by snap_init): SIGKILL of the daemon at
 * that step, for the tests of what a restart finds. */
void snap_crash_point(const char *step);
bool snap_name_ok(const char *name);
/* A snapshot id of a new snapshot made from a workspace tree ws (a
 * directory under the data dir, copied): fs/ with workspace/, empty
 * upper/ and work/; its row says image and spec (borrowed). All or
 * nothing (made as .tmp-<id>); --store-max and ENOSPC: 507. The API's
 * snapshot object (new ref) or NULL and e. */
json_t *snap_adopt(const char *id, const char *name, const char *image, const json_t *spec,
		   const char *ws, struct core_err *e);

#endif
