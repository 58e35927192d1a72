/* libFuzzer target: the documents that pick an image in an archive
 * (src/oci/layout_json.c): index.json, manifest.json and oci-layout. The
 * first byte picks the parser and whether a name is asked for. A pick
 * gives a valid digest and bounded names, or an error that says why. */
#include "oci/layout_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *json = (const char *)data + 1;
	size_t len = size - 1;
	const char *which = (data[0] & 4) ? "latest" : (data[0] & 8) ? "busybox" : NULL;
	struct moat_err e = {0};
	switch (data[0] & 3) {
	case 0: {
		struct oci_desc d;
		char name[512];
		if (oci_layout_pick(json, len, which, &d, name, sizeof name, &e) == 0) {
			if (!oci_digest_valid(d.digest) || d.size < 0 || strlen(name) >= sizeof name)
				abort();
		} else if (!e.msg[0])
			abort();
		break;
	}
	case 1: {
		struct oci_docker_pick *p = malloc(sizeof *p);
		if (!p)
			abort();
		if (oci_docker_pick(json, len, which, p, &e) == 0) {
			if (!p->config[0] || p->nlayers > OCI_MAX_LAYERS)
				abort();
			for (size_t i = 0; i < p->nlayers; i++)
				if (!p->layers[i][0])
					abort();
		} else if (!e.msg[0])
			abort();
		free(p);
		break;
	}
	default:
		if (oci_layout_version_check(json, len, &e) < 0 && !e.msg[0])
			abort();
	}
	return 0;
}
