/* libFuzzer target: image references (src/oci/ref.c), as a user or an API
 * body gives them. Checks: a parsed reference has a non-empty registry and
 * repo, a tag or digest, only allowed characters (the repo becomes a URL
 * path), and formatting then parsing again gives the same reference. */
#include "oci/digest.h"
#include "oci/ref.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char s[1200];
	if (size >= sizeof s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	struct oci_ref r, r2;
	struct moat_err e;
	if (oci_ref_parse(s, &r, &e) < 0)
		return 0;
	if (!r.registry[0] || !r.repo[0] || (!r.tag[0] && !r.digest[0]))
		abort();
	if (r.digest[0] && !oci_digest_valid(r.digest))
		abort();
	for (const char *p = r.repo; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("._-/", *p)))
			abort();
	char out[1200];
	if (oci_ref_format(&r, out, sizeof out) < 0)
		abort();
	if (oci_ref_parse(out, &r2, &e) < 0 || memcmp(&r, &r2, sizeof r) != 0)
		abort();
	if (!oci_ref_endpoint(&r)[0])
		abort();
	return 0;
}
