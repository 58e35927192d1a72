/* libFuzzer target: manifests (src/serve/manifest.c), the "manifest" of a
 * POST /v1/sandboxes body, parsed as http_body_json parses a body. Built
 * with no --allow-host-path directory (every host source is refused) and
 * never runs git or writes to the host: clones would go to a directory
 * that does not exist (mkdtemp fails before any fork), and PATH names no
 * git in case one got that far. Checks that an error names its entry,
 * that the stream is valid, that the environment holds
 * strings only, and that manifest_is_slow() (which sends a build to a
 * forked job) is true exactly when the manifest holds a git_repo entry at
 * any depth: a clone must never run on the daemon's event loop. */
#include "serve/manifest.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	setenv("PATH", "/nonexistent/moat-fuzz", 1);
	return 0;
}

/* Written apart from manifest.c: any git_repo entry, at any depth. */
static bool has_git_ref(json_t *entries)
{
	const char *k;
	json_t *v;
	if (!json_is_object(entries))
		return false;
	json_object_foreach(entries, k, v)
	{
		const char *t = json_string_value(json_object_get(v, "type"));
		if ((t && !strcmp(t, "git_repo")) || has_git_ref(json_object_get(v, "children")))
			return true;
	}
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *m = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	if (!m)
		return 0;
	if (manifest_is_slow(m) != has_git_ref(json_object_get(m, "entries")))
		abort();
	struct moat_buf out = {0};
	struct moat_err e = {0};
	json_t *env = json_object();
	int rc = manifest_build(m, NULL, &out, env, &e);
	if (rc < 0) {
		if (!e.msg[0] || strncmp(e.msg, "manifest", 8) != 0)
			abort(); /* names the entry */
	} else {
		size_t off = 0;
		struct moat_entry en;
		struct moat_err e2 = {0};
		int r;
		while ((r = moat_entry_next(out.p, out.len, &off, &en, &e2)) == 1)
			;
		if (r < 0)
			abort();
	}
	const char *k;
	json_t *v;
	json_object_foreach(env, k, v) if (!json_is_string(v) || !*k || strchr(k, '=')) abort();
	json_decref(env);
	moat_buf_free(&out);
	json_decref(m);
	return 0;
}
