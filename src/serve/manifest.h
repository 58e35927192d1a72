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

/* Who clones a git_repo entry (none: such entries are refused): called
 * with the entry's name for errors, its workspace path, the repo as given,
 * src (the resolved host path of a host repository, else NULL) and ref (or
 * NULL); puts no entries into the stream. Returns 0 or -1 with e set. */
typedef int (*manifest_git_fn)(void *arg, const char *where, const char *rel, const char *repo,
			       const char *src, const char *ref, struct moat_err *e);
void manifest_set_git(manifest_git_fn fn, void *arg);

/* true when building m may take long (a git_repo entry: a clone): the
 * daemon then builds it in a forked job, off its event loop. */
bool manifest_is_slow(json_t *m);

#endif
