/* Image helpers for GET /v1/sandboxes/{id}/image: recognise the format
 * from the bytes (never from the name) and encode for JSON. */
#ifndef MOAT_SERVE_IMAGE_H
#define MOAT_SERVE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* Recognise PNG, JPEG (any SOFn frame: baseline, progressive, ...), GIF
 * (87a/89a) and WebP (VP8, VP8L, VP8X) and read the pixel size. Returns 0
 * with *mime ("image/png", "image/jpeg", "image/gif", "image/webp"), *w and
 * *h set (both nonzero), or -1 when the data is none of those, truncated
 * or corrupt. Never reads past len. */
int moat_image_sniff(const void *data, size_t len, const char **mime,
		     uint32_t *w, uint32_t *h);

/* Standard base64 (RFC 4648, with padding) of data: malloc'd and
 * NUL-terminated; NULL on OOM. */
char *moat_base64(const void *data, size_t len);

#endif
