/* libFuzzer target: the registry's WWW-Authenticate challenge
 * (oci_challenge_parse in src/oci/auth.c), a hostile server's header.
 * Checks: the scheme is Bearer or Basic, a Bearer has a realm, and no
 * parsed field holds a control character (they go into a URL and a
 * request). */
#include "oci/registry.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void clean(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char h[4096];
	if (size >= sizeof h)
		return 0;
	memcpy(h, data, size);
	h[size] = '\0';
	struct oci_challenge c;
	struct moat_err e;
	if (oci_challenge_parse(h, &c, &e) < 0)
		return 0;
	if (strcmp(c.scheme, "Bearer") != 0 && strcmp(c.scheme, "Basic") != 0)
		abort();
	if (strcmp(c.scheme, "Bearer") == 0 && !c.realm[0])
		abort();
	clean(c.realm);
	clean(c.service);
	clean(c.scope);
	return 0;
}
