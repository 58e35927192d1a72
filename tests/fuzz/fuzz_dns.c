/* libFuzzer target: the answer of a sandbox's resolver (src/base/dns.c)
 * to bytes that come from the sandbox. Checks: a reply only to a query
 * with an id; the id echoed; the reply within bounds and a prefix of the
 * query after the header; the name printable, bounded, and only with an
 * answer of MOAT_DNS_RCODE; the shortened form within its cap. */
#include "base/dns.h"
#include "base/dnsd.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *q = malloc(size ? size : 1); /* exact size: ASan sees overreads */
	memcpy(q, data, size);
	uint8_t out[MOAT_DNS_ANSWER_MAX];
	char name[MOAT_DNS_NAME_CAP];
	size_t n = moat_dns_answer(q, size, out, name);
	size_t nl = strnlen(name, sizeof name);
	if (nl >= sizeof name)
		abort();
	for (size_t i = 0; i < nl; i++)
		if (name[i] < 0x21 || name[i] > 0x7e)
			abort();
	if (n) {
		if (size < 12 || (q[2] & 0x80) || n < 12 || n > MOAT_DNS_ANSWER_MAX)
			abort();
		if (out[0] != q[0] || out[1] != q[1] || !(out[2] & 0x80))
			abort();
		unsigned rc = out[3] & 0xf;
		if ((rc == MOAT_DNS_RCODE) != (nl > 0))
			abort();
		if (rc == MOAT_DNS_RCODE && (n > size || memcmp(out + 12, q + 12, n - 12) != 0 ||
					     out[5] != 1 || out[7] || out[9] || out[11]))
			abort();
		if (rc != MOAT_DNS_RCODE && n != 12)
			abort();
	} else if (nl) {
		abort();
	}
	char s[81];
	moat_dnsd_short(name, s, sizeof s);
	if (strlen(s) >= sizeof s)
		abort();
	free(q);
	return 0;
}
