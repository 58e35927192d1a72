/* The daemon's image service: a content-addressed store under
 * <data>/images (blobs of src/oci/blobs.h; layers unpacked once in
 * layers/<diffid hex>/, shared by every sandbox), names -> manifest
 * digests and image rows in moat.db (tables images, image_names,
 * image_layers), pull and import on worker threads (the event loop never
 * blocks; progress and the end come back through an eventfd), garbage
 * collection, the store's size limit (--store-max).
 *
 * A row is written only once every blob and every layer of the image is
 * in place: a failed or killed pull leaves nothing the next start does not
 * sweep (tmp/, layers/.tmp-*, blobs and layers no row names). */
#ifndef MOAT_SERVE_IMAGES_H
#define MOAT_SERVE_IMAGES_H

#include "core.h"
#include "../oci/image.h"

#include <moat/err.h>
#include <moat/strv.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct evbuffer;

struct images_config {
	struct event_base *base;
	const char *data_dir;      /* absolute; the store is <data_dir>/images */
	int64_t store_max;         /* --store-max: blobs + unpacked layers, bytes (0: none) */
	int64_t layer_max;         /* --layer-max: one layer's unpacked bytes at most */
	const char *auth_file;     /* --registry-auth (docker config.json), or NULL */
	char *const *registries;   /* --registry patterns a pull may contact (NULL: defaults) */
	char *const *insecure;     /* --insecure-registry HOST[:PORT]: plain http allowed */
};
/* Tables, store directories, the sweep of what a killed daemon left
 * (tmp/, layers/.tmp-*, layers/.gc-*). */
int images_init(const struct images_config *c, struct moat_err *e);
/* After box_restore: collect images no name, sandbox or snapshot uses, and
 * blobs / layers no image row names. */
void images_gc(void);
/* A sandbox that used an image is gone: collect what it kept (an image
 * whose last name a later pull took; blobs and layers no row names). */
void images_collect(void);
/* Cancel the workers (their jobs fail with ECANCELED) and join them. */
void images_shutdown(void);

/* Who waits for a pull or an import (a door's request). progress may be
 * NULL; done runs exactly once from the loop (unless cancelled): image is
 * the inspect object (borrowed) or NULL with e. */
struct images_cbs {
	void (*progress)(void *arg, const struct oci_progress *p);
	void (*done)(void *arg, json_t *image, const struct core_err *e);
};
struct images_wait;
/* Pull ref (a reference; it becomes a name of the image). A pull of a
 * reference already being pulled joins that job. insecure: plain http,
 * for loopback registries or --insecure-registry ones only. Refused at
 * once: NULL with e (400 bad reference, 403 registry not allowed). */
struct images_wait *images_pull(const char *ref, bool insecure, const struct images_cbs *cbs,
				void *arg, struct core_err *e);
/* Import an archive (OCI layout tar, OCI archive, docker save tar); body's
 * bytes are moved out of it. name: the name to give it (may be NULL: the
 * archive's own ref.name / RepoTags, else only its digest). */
struct images_wait *images_import(struct evbuffer *body, const char *name,
				  const struct images_cbs *cbs, void *arg, struct core_err *e);
/* The waiter leaves (its client went away); the job goes on. */
void images_wait_cancel(struct images_wait *w);

/* {"images":[{"names":[...],"id","size","created","layers"}]} (new ref) */
json_t *images_list(void);
/* The inspect object of an image by name or digest (new ref), or NULL
 * with e (404). */
json_t *images_inspect(const char *name, struct core_err *e);
/* Remove a name (a digest: every name of the image), then collect the
 * image when nothing uses it. 404 unknown; 409 conflict when it is the
 * image's last name and a sandbox or snapshot uses the image (nothing is
 * changed then). */
int images_remove(const char *name, struct core_err *e);

/* What a create needs from an image. */
struct images_resolved {
	char id[OCI_DIGEST_LEN + 1]; /* the manifest digest */
	char name[512];              /* the name asked for (or the digest) */
	struct moat_strv layers;     /* absolute layer directories, top first */
	json_t *config;              /* {"env":[...],"workdir","user","entrypoint","cmd"} */
};
/* 1: name (a name or a manifest digest, "sha256:..." or its hex) is an
 * image of the store; 0: it is not (no error); -1: the store failed
 * (e). */
int images_resolve(const char *name, struct images_resolved *out, struct core_err *e);
void images_resolved_free(struct images_resolved *r);

#endif
