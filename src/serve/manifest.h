/* Manifests (the Agents SDK's environment contract): what a sandbox starts
 * with. Validated and turned into one entry stream (src/proto/entries.h)
 * that the agent unpacks into the workspace. Host sources (local_file,
 * local_dir, a git_repo on a host path) must lie under an operator-listed
 * directory; they are copied, never mounted. */
#ifndef MOAT_SERVE_MANIFEST_H
#define MOAT_SERVE_MANIFEST_H

#include "../proto/entries.h"

#include <jansson.h>
#include <moat/err.h>

/* m: the manifest object. Appends entries to *out and the manifest's
 * "environment" to env. Errors name the entry ("manifest.entries.a.children.b:
 * ..."); e->errnum is EACCES for a host path that is not allowed (403),
 * EFBIG over the size limit (413), else EINVAL. */
int manifest_build(json_t *m, char *const *host_paths, struct moat_buf *out, json_t *env,
		   struct moat_err *e);

#endif
