/* OCI and Docker v2 image documents: indexes / manifest lists (one
 * platform picked), image manifests, image configs. Pure: bytes in,
 * structs out; every field checked (media types, digests, sizes >= 0,
 * bounded counts). Fuzzed (fuzz_ocimanifest). */
#ifndef MOAT_OCI_MANIFEST_H
#define MOAT_OCI_MANIFEST_H

#include "digest.h"

#include <moat/err.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OCI_MAX_LAYERS 128

/* media types */
#define OCI_MT_INDEX "application/vnd.oci.image.index.v1+json"
#define OCI_MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define OCI_MT_CONFIG "application/vnd.oci.image.config.v1+json"
#define DOCKER_MT_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define DOCKER_MT_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define DOCKER_MT_CONFIG "application/vnd.docker.container.image.v1+json"
/* what a registry is asked for (Accept) */
#define OCI_ACCEPT OCI_MT_INDEX ", " OCI_MT_MANIFEST ", " DOCKER_MT_LIST ", " DOCKER_MT_MANIFEST

struct oci_desc {
	char media_type[128];
	char digest[OCI_DIGEST_LEN + 1];
	int64_t size;
};

enum oci_doc { OCI_DOC_INDEX, OCI_DOC_MANIFEST };

/* Shared by every parser of OCI documents (layout_json.c too). A JSON
 * document without duplicate keys, or NULL with e (EBADMSG) naming what. */
json_t *oci_json_load(const char *json, size_t len, const char *what, struct moat_err *e);
/* e = "what: <message>", errnum EBADMSG; returns -1. */
int oci_json_bad(struct moat_err *e, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A descriptor {mediaType, digest, size}: digest sha256:<hex>, size an
 * integer >= 0; mediaType required when need_type (index.json of some
 * tools omits it: then ""). */
int oci_desc_parse(json_t *d, const char *what, bool need_type, struct oci_desc *out,
		   struct moat_err *e);

/* Which document this is: from its mediaType field, else from
 * content_type (the registry's Content-Type, may be NULL), else from its
 * shape (manifests / layers). */
int oci_doc_kind(const char *json, size_t len, const char *content_type, enum oci_doc *kind,
		 struct moat_err *e);

/* From an index: the manifest for os/arch (variant may be NULL: any).
 * None matching: an error listing the platforms there are. */
int oci_index_pick(const char *json, size_t len, const char *os, const char *arch,
		   const char *variant, struct oci_desc *out, struct moat_err *e);

struct oci_manifest {
	struct oci_desc config;
	struct oci_desc layers[OCI_MAX_LAYERS]; /* bottom first, as in the document */
	size_t nlayers;
};
/* Layer media types accepted: OCI tar, tar+gzip, tar+zstd, Docker's
 * rootfs.diff.tar.gzip; foreign/non-distributable layers refused. */
int oci_manifest_parse(const char *json, size_t len, struct oci_manifest *m, struct moat_err *e);

/* The parts of an image config that become a sandbox's defaults (all
 * malloc'd, NULL-terminated vectors; NULL when absent). */
struct oci_config {
	char **env;         /* "NAME=VALUE" */
	char *workdir;
	char *user;
	char **entrypoint;
	char **cmd;
	char diff_ids[OCI_MAX_LAYERS][OCI_DIGEST_LEN + 1]; /* rootfs.diff_ids, bottom first */
	size_t ndiff;
	char os[32], arch[32];
};
int oci_config_parse(const char *json, size_t len, struct oci_config *c, struct moat_err *e);
void oci_config_free(struct oci_config *c);

/* The host's platform in OCI's words ("linux", "amd64"/"arm64"/...). */
void oci_host_platform(const char **os, const char **arch, const char **variant);

#endif
