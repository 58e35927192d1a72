/* The content-addressed blob store: <root>/blobs/sha256/<hex>, written
 * once. A blob is written to <root>/tmp/<random> while its digest is
 * computed, checked against the expected digest and size, and renamed in
 * only then: a failed or killed write leaves no blob (tmp/ is emptied by
 * oci_blobs_open). */
#ifndef MOAT_OCI_BLOBS_H
#define MOAT_OCI_BLOBS_H

#include "digest.h"

#include <moat/err.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Create <root>/{blobs/sha256,tmp} when missing and empty tmp/. */
int oci_blobs_open(const char *root, struct moat_err *e);
/* The same directories, tmp/ left as it is: for a store in use (an import
 * whose archive, or a concurrent pull's blob, is in tmp/). */
int oci_blobs_ensure(const char *root, struct moat_err *e);
/* <root>/blobs/sha256/<hex> for a valid digest; -1 otherwise. */
int oci_blob_path(const char *root, const char *digest, char *out, size_t cap);
bool oci_blob_has(const char *root, const char *digest);
/* Remove one blob (garbage collection); ENOENT is not an error. */
int oci_blob_remove(const char *root, const char *digest);

struct oci_blob_writer;
/* expect: the digest it must have (NULL: any, computed; for an import of
 * an unnamed archive); size: its exact size (-1: unknown); max: refuse
 * beyond this many bytes (the store's room). */
struct oci_blob_writer *oci_blob_begin(const char *root, const char *expect, int64_t size,
				       int64_t max, struct moat_err *e);
/* ENOSPC: e->errnum ENOSPC (the API's 507); over size or max: EFBIG. */
int oci_blob_write(struct oci_blob_writer *w, const void *p, size_t n, struct moat_err *e);
/* Check digest and size, fsync, rename into place (an existing blob of the
 * same digest is kept). digest_out may be NULL. Frees w in every case. */
int oci_blob_commit(struct oci_blob_writer *w, char digest_out[OCI_DIGEST_LEN + 1],
		    struct moat_err *e);
void oci_blob_abort(struct oci_blob_writer *w); /* removes the temp file; NULL ok */
/* Extension: check digest and size now, after the last write, without
 * renaming (a pull checks each blob as it ends, commits them all at the end,
 * so a failed pull adds nothing). EBADMSG on a mismatch; the writer stays
 * to be committed or aborted. Bytes written so far: oci_blob_written. */
int oci_blob_check(struct oci_blob_writer *w, struct moat_err *e);
int64_t oci_blob_written(const struct oci_blob_writer *w);

/* Read a whole (small) blob: manifests and configs, at most max bytes.
 * The bytes are re-hashed: a blob changed on disk is an error. */
int oci_blob_read(const char *root, const char *digest, size_t max, char **data, size_t *len,
		  struct moat_err *e);

#endif
