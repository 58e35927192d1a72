/* The git clones of a manifest's git_repo entries, done on the sandbox's
 * behalf but never with the daemon's identity: each runs in a throwaway
 * sandbox (`moat run`, the binary next to moat-serve) whose workspace is
 * the new sandbox's workspace-to-be, with the create's own network policy
 * under the operator's --net-allow, no user or system git config, no
 * credential helper, no ssh, no hooks, filters or submodules, and a
 * protocol allowlist (https and http through the sandbox's gateway; file://
 * only for a host path under --allow-host-path, shown read-only). The
 * clones land in the workspace before the sandbox starts, so that the
 * engine protects their .git like any nested repository. */
#ifndef MOAT_SERVE_CLONE_H
#define MOAT_SERVE_CLONE_H

#include <moat/err.h>
#include <moat/policy.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct gate_policy;

/* In the daemon, before anything starts: may every git_repo entry of
 * manifest m be fetched for a create with this network (the validated
 * create's "network", or NULL) under the operator's ceiling (NULL: no
 * network for sandboxes)? disk: the create asked for limits.disk. Errors
 * name the entry (e->errnum EINVAL: a 400). */
int clone_check(json_t *m, const json_t *network, const struct gate_policy *ceiling, bool disk,
		struct moat_err *e);

/* Where the clones of one create go: a fresh directory under the data
 * directory (the daemon's current directory), renamed into the sandbox as
 * its workspace. out gets its relative path. */
int clone_seed_dir(char *out, size_t cap, struct moat_err *e);

/* At daemon start: seed directories of a daemon that died mid-create. */
void clone_sweep(void);

/* A clone's bounds when neither the create nor the operator sets one. */
#define CLONE_MEMORY (1ULL << 30)
#define CLONE_PIDS 256

struct clone_ctx {
	const json_t *network;   /* the create's, or NULL */
	char *const *ceiling;    /* the operator's --net-allow patterns, or NULL */
	uint64_t memory, pids, cpu_milli; /* the effective limits (0: none) */
	int64_t quotas[MOAT_QUOTAS];      /* the sandbox's ceilings, each passed */
};

/* In the job's child: clone repo (a URL, or src: the resolved host path of
 * a host repository) into seed/rel and check out ref (or NULL). where
 * names the entry in errors. */
int clone_run(const struct clone_ctx *c, const char *seed, const char *where, const char *rel,
	      const char *repo, const char *src, const char *ref, struct moat_err *e);

#endif
