/* Image references: "[REGISTRY/]REPO[:TAG][@sha256:HEX]", Docker's
 * defaults (docker.io, library/, latest). Pure, fuzzed (fuzz_ociref). */
#ifndef MOAT_OCI_REF_H
#define MOAT_OCI_REF_H

#include <moat/err.h>

#include <stddef.h>

struct oci_ref {
	char registry[256]; /* "docker.io" (pulled from registry-1.docker.io), "127.0.0.1:5000" */
	char repo[256];     /* "library/busybox", "moat/test" */
	char tag[129];      /* "latest" unless a digest alone was given ("" then) */
	char digest[72];    /* "sha256:<64 hex>" or "" */
};

/* Parse s. Errors name s and what is wrong (e->errnum EINVAL). */
int oci_ref_parse(const char *s, struct oci_ref *r, struct moat_err *e);
/* "registry/repo:tag", "registry/repo@digest" or both; returns the length,
 * or -1 when cap is too small. */
int oci_ref_format(const struct oci_ref *r, char *out, size_t cap);
/* The host[:port] to contact for r->registry ("registry-1.docker.io" for
 * docker.io). */
const char *oci_ref_endpoint(const struct oci_ref *r);

#endif
