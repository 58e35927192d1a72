/* libFuzzer target: OCI / Docker image documents (src/oci/manifest.c) as a
 * registry or an archive sends them: the input goes through oci_doc_kind,
 * oci_index_pick, oci_manifest_parse and oci_config_parse. Checks: every
 * digest accepted is valid, sizes are >= 0, counts within bounds, config
 * vectors NULL-terminated; nothing leaks (ASan). */
#include "oci/image.h"
#include "oci/manifest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_desc(const struct oci_desc *d)
{
	if (!oci_digest_valid(d->digest) || d->size < 0 || !d->media_type[0])
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *j = (const char *)data;
	struct moat_err e;
	enum oci_doc k;
	(void)oci_doc_kind(j, size, size & 1 ? OCI_MT_INDEX : NULL, &k, &e);
	struct oci_desc d;
	if (oci_index_pick(j, size, "linux", "amd64", size & 2 ? "v8" : NULL, &d, &e) == 0)
		check_desc(&d);
	struct oci_manifest m;
	if (oci_manifest_parse(j, size, &m, &e) == 0) {
		check_desc(&m.config);
		if (m.nlayers > OCI_MAX_LAYERS)
			abort();
		for (size_t i = 0; i < m.nlayers; i++)
			check_desc(&m.layers[i]);
	}
	struct oci_config c;
	if (oci_config_parse(j, size, &c, &e) == 0) {
		if (c.ndiff > OCI_MAX_LAYERS)
			abort();
		for (size_t i = 0; i < c.ndiff; i++)
			if (!oci_digest_valid(c.diff_ids[i]))
				abort();
		for (size_t i = 0; c.env && c.env[i]; i++)
			(void)strlen(c.env[i]);
		for (size_t i = 0; c.cmd && c.cmd[i]; i++)
			(void)strlen(c.cmd[i]);
		oci_config_free(&c);
	}
	return 0;
}
