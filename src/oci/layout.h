/* Import from files: an OCI image layout directory (oci-layout,
 * index.json, blobs/), an OCI archive (the same as a tar: buildah's
 * oci-archive:, skopeo's), or a `docker save` tar (manifest.json,
 * <id>.json, layer tars, Docker's or OCI's). Every blob is copied into
 * the store through oci_blob_begin (digests checked; a docker save layer,
 * which has no digest of its own, is hashed as it is copied). Archives
 * are read with libarchive and refused when they hold links or names
 * outside their tree. */
#ifndef MOAT_OCI_LAYOUT_H
#define MOAT_OCI_LAYOUT_H

#include "image.h"

/* root: a store opened with oci_blobs_open (its tmp/ is not emptied
 * here: other writers may be at work in it). path: a directory or a tar
 * (any compression); which: the image in it to take, by its ref.name
 * annotation or RepoTags entry (NULL: the only one; several: an error
 * listing them). */
int oci_import(const char *root, const char *path, const char *which, int64_t max_bytes,
	       oci_progress_cb progress, void *arg, struct oci_image *out, struct moat_err *e);

/* Write an OCI image layout as a tar to fd: index.json naming
 * manifest (with ref.name annotation name, may be NULL), and every blob of
 * the image from the store (export of a snapshot). */
int oci_export(const char *root, const char *manifest, const char *name, int fd,
	       struct moat_err *e);

#endif
