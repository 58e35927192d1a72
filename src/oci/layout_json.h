/* The documents of an image archive that pick the image: an OCI layout's
 * index.json and a `docker save` manifest.json. Pure (bytes in, choice
 * out), every field checked; fuzzed (fuzz_layout). */
#ifndef MOAT_OCI_LAYOUT_JSON_H
#define MOAT_OCI_LAYOUT_JSON_H

#include "manifest.h"

#include <moat/err.h>

#include <stddef.h>

#define OCI_REF_NAME "org.opencontainers.image.ref.name"

/* From index.json: the entry whose ref.name annotation (or containerd's
 * io.containerd.image.name) is which; which NULL: the only entry. None
 * or several: an error listing the names there are. name gets the
 * entry's name ("" when it has none). */
int oci_layout_pick(const char *json, size_t len, const char *which, struct oci_desc *out,
		    char *name, size_t name_cap, struct moat_err *e);

/* From manifest.json: the entry with which among its RepoTags (which
 * without a tag also matches which:latest); which NULL: the only entry.
 * Config and layer member names are copied out (at most OCI_MAX_LAYERS). */
struct oci_docker_pick {
	char config[512];
	char layers[OCI_MAX_LAYERS][512];
	size_t nlayers;
	char name[512]; /* the tag matched, or the first RepoTag, or "" */
};
int oci_docker_pick(const char *json, size_t len, const char *which, struct oci_docker_pick *out,
		    struct moat_err *e);

/* oci-layout: {"imageLayoutVersion": "1.x"}. */
int oci_layout_version_check(const char *json, size_t len, struct moat_err *e);

#endif
