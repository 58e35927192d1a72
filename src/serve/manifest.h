/* Manifests (the Agents SDK's environment contract): what a sandbox starts
 * with. Validated and turned into one entry stream (src/proto/entries.h)
 * that the agent unpacks into the workspace. Host sources (local_file,
 * local_dir, a git_repo on a host path) must lie under an operator-listed
 * directory; they are copied, never mounted. */
#ifndef MOAT_SERVE_MANIFEST_H
#define MOAT_SERVE_MANIFEST_H

#include "../proto/entries.h"

#include <jansson.h>
#include <stdbool.h>
#include <moat/err.h>

/* m: the manifest object. Appends entries to *out and the manifest's
 * "environment" to env. Errors name the entry ("manifest.entries.a.children.b:
 * ..."); e->errnum is EACCES for a host path that is not allowed (403),
 * EFBIG over the size limit (413), else EINVAL. */
int manifest_build(json_t *m, char *const *host_paths, struct moat_buf *out, json_t *env,
		   struct moat_err *e);

/* Where git clones go (default /tmp): a forked job's own directory, which
 * the daemon removes whatever becomes of the job. */
void manifest_set_tmpdir(const char *dir);

/* true when building m may take long (a git_repo entry: a clone): the
 * daemon then builds it in a forked job, off its event loop. */
bool manifest_is_slow(json_t *m);

#endif
