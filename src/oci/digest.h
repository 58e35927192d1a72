/* Content digests: "sha256:<64 lowercase hex>" (OpenSSL's SHA-256). */
#ifndef MOAT_OCI_DIGEST_H
#define MOAT_OCI_DIGEST_H

#include <stdbool.h>
#include <stddef.h>

#define OCI_DIGEST_LEN 71 /* "sha256:" + 64, without the NUL */

/* The only algorithm accepted; anything else (sha512, upper case, short)
 * is refused by every caller, since a digest names a file of the store. */
bool oci_digest_valid(const char *d);

struct oci_sha256 { void *ctx; };
int oci_sha256_init(struct oci_sha256 *h);
int oci_sha256_update(struct oci_sha256 *h, const void *p, size_t n);
/* out gets "sha256:<hex>" (OCI_DIGEST_LEN + 1 bytes); frees the context. */
int oci_sha256_final(struct oci_sha256 *h, char out[OCI_DIGEST_LEN + 1]);
void oci_sha256_free(struct oci_sha256 *h); /* after an error; idempotent */
/* The digest of a buffer. */
int oci_sha256_buf(const void *p, size_t n, char out[OCI_DIGEST_LEN + 1]);

#endif
