/* One image as the store knows it once its blobs are in: what pull and
 * import produce, what the daemon records and unpacks. */
#ifndef MOAT_OCI_IMAGE_H
#define MOAT_OCI_IMAGE_H

#include "manifest.h"

struct oci_image {
	char manifest[OCI_DIGEST_LEN + 1]; /* the image manifest's digest (its id) */
	struct oci_manifest m;             /* config and layer blobs (compressed) */
	struct oci_config config;          /* parsed config, diff_ids included */
	int64_t size;                      /* bytes of every blob */
	char name[512];                    /* a reference it came with ("" if none) */
};
void oci_image_free(struct oci_image *im); /* frees config */

/* Progress of a pull or import (called often; cheap). */
struct oci_progress {
	size_t layers_done, layers_total;
	int64_t bytes_done, bytes_total; /* bytes_total: sum of descriptor sizes */
	const char *current;             /* digest being fetched, or NULL */
};
typedef void (*oci_progress_cb)(void *arg, const struct oci_progress *p);

#endif
