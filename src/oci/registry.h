/* The OCI distribution API's pull side, with libcurl: GET manifest (an
 * index resolved for the host platform), config, layers into the blob
 * store, each checked by digest and by its descriptor's size (a registry
 * that sends more than it announced is cut off and refused). Bearer
 * tokens: the WWW-Authenticate challenge of a 401 (anonymous, or Basic
 * credentials from a docker config.json); redirects followed (blobs on a
 * CDN), with the Authorization header dropped on another host.
 * Blocking: the daemon calls it on a worker thread. */
#ifndef MOAT_OCI_REGISTRY_H
#define MOAT_OCI_REGISTRY_H

#include "image.h"
#include "ref.h"

#include <stdbool.h>

struct oci_pull_opts {
	bool insecure;          /* plain http (a loopback registry), no TLS checks */
	const char *auth_file;  /* docker config.json format, or NULL */
	int64_t max_bytes;      /* room left in the store (the sum of new blobs) */
	int64_t max_doc;        /* largest manifest/index/config (default 4 MiB) */
	volatile int *cancel;   /* nonzero: stop at the next chunk (ECANCELED) */
	oci_progress_cb progress;
	void *arg;
};

/* Pull r into the store at root. Errors name the reference and the step
 * ("manifest", "blob sha256:..."): e->errnum ENOENT for a 404, EACCES for
 * a refused token, EBADMSG for a digest or size mismatch, ENOSPC/EFBIG
 * for no room. Nothing partial stays in the store. */
int oci_pull(const char *root, const struct oci_ref *r, const struct oci_pull_opts *o,
	     struct oci_image *out, struct moat_err *e);

/* Parse a WWW-Authenticate header: Bearer realm="...",service="...",scope="..."
 * (quoted strings with escapes, any order, unknown params skipped). Pure,
 * fuzzed (fuzz_ociauth). */
struct oci_challenge {
	char scheme[16];   /* "Bearer" or "Basic" */
	char realm[1024];
	char service[256];
	char scope[512];
};
int oci_challenge_parse(const char *hdr, struct oci_challenge *c, struct moat_err *e);
/* The base64 "user:password" for host from a docker config.json
 * ("auths": {"host": {"auth": "..."}} or {"username","password"});
 * 0 with *out = NULL when none. */
int oci_auth_lookup(const char *file, const char *host, char **out, struct moat_err *e);

#endif
