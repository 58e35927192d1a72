/* The artifact store behind artifacts.c: one small ops table, chosen once
 * at artifacts_init (STYLE 13). The directory backend (artifacts_dir.c)
 * is the only one today; artifacts.c's top comment says how an
 * S3-compatible one fits. Every call is synchronous and fills a
 * struct core_err (status, API code, a message naming the culprit).
 *
 * A session id and an artifact name reach a backend already checked
 * (artifacts_sid_ok, artifacts_name_check): a backend never sees '/',
 * "..", NUL or a control character in either. */
#ifndef MOAT_SERVE_ARTIFACTS_STORE_H
#define MOAT_SERVE_ARTIFACTS_STORE_H

#include "core.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define ARTIFACTS_SHA256_HEX 64

/* What the store says of one stored artifact. */
struct artifacts_info {
	uint64_t size;
	int64_t created_at;                     /* unix seconds (when stored) */
	char sha256[ARTIFACTS_SHA256_HEX + 1];  /* lowercase hex */
};

struct artifacts_put; /* an upload in progress (the backend's) */

struct artifacts_backend {
	const char *name;
	/* Open the store under data_dir; sweep what a killed daemon left (an
	 * upload's temp files). 0 or -1. */
	int (*init)(const char *data_dir, struct core_err *e);
	void (*shutdown)(void);
	/* Start an upload of at most size_max bytes. NULL on error. */
	struct artifacts_put *(*put_begin)(const char *sid, const char *name, uint64_t size_max,
					  struct core_err *e);
	/* More bytes; more than size_max in all: 413 too_large (then abort). */
	int (*put_write)(struct artifacts_put *p, const void *buf, size_t n, struct core_err *e);
	/* Make it visible under its name (replacing one of that name), all or
	 * nothing; frees p whatever the outcome (nothing kept on error). */
	int (*put_commit)(struct artifacts_put *p, struct artifacts_info *out, struct core_err *e);
	/* Drop it: nothing of it stays. Frees p. */
	void (*put_abort)(struct artifacts_put *p);
	/* A readable fd of the artifact (the caller owns it; *fd may be NULL
	 * to stat only) and its info; 404 not_found naming it when missing. */
	int (*get)(const char *sid, const char *name, int *fd, struct artifacts_info *out,
		   struct core_err *e);
	/* {"name","size","created_at" (ISO 8601 UTC),"sha256"} of each, by name. */
	json_t *(*list)(const char *sid, struct core_err *e);
	/* 404 not_found naming it when missing. */
	int (*del)(const char *sid, const char *name, struct core_err *e);
	/* Everything of the session goes (none is fine). */
	int (*purge)(const char *sid, struct core_err *e);
};

extern const struct artifacts_backend artifacts_dir_backend;

/* A session id that can name a directory: 1..64 of [A-Za-z0-9_-]. */
bool artifacts_sid_ok(const char *sid);
/* core_err helper shared by the backends: cerr (jfield.h), then -1. */
int artifacts_fail(struct core_err *e, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
