/* See dns.h. RFC 1035 section 4.1: a 12-byte header, then the question:
 * a name as length-prefixed labels (no compression pointer can occur in
 * a query's first name), a type and a class. */
#include "dns.h"

#include <stdio.h>
#include <string.h>

static size_t header_only(const uint8_t *q, uint8_t *out, unsigned rcode)
{
	memset(out, 0, 12);
	out[0] = q[0];
	out[1] = q[1];
	/* QR, the query's opcode and RD; AA, TC, RA clear */
	out[2] = (uint8_t)(0x80 | (q[2] & 0x79));
	out[3] = (uint8_t)rcode;
	return 12;
}

size_t moat_dns_answer(const uint8_t *q, size_t n, uint8_t out[MOAT_DNS_ANSWER_MAX],
		       char name[MOAT_DNS_NAME_CAP])
{
	name[0] = '\0';
	if (n < 12 || (q[2] & 0x80)) /* no id to echo, or an answer: never reply */
		return 0;
	if (((q[2] >> 3) & 0xf) != 0) /* not a standard query */
		return header_only(q, out, MOAT_DNS_NOTIMP);
	if (q[4] != 0 || q[5] != 1) /* exactly one question */
		return header_only(q, out, MOAT_DNS_FORMERR);
	size_t i = 12, o = 0;
	for (;;) {
		if (i >= n) {
			name[0] = '\0';
			return header_only(q, out, MOAT_DNS_FORMERR);
		}
		size_t len = q[i];
		if (len == 0)
			break;
		/* a pointer or a reserved label type; or a name over 255 bytes */
		if (len > 63 || i + 1 + len - 12 + 1 > 255 || i + 1 + len > n) {
			name[0] = '\0';
			return header_only(q, out, MOAT_DNS_FORMERR);
		}
		if (o)
			name[o++] = '.';
		for (size_t k = 0; k < len; k++) {
			uint8_t c = q[i + 1 + k];
			if (c >= 'A' && c <= 'Z')
				c = (uint8_t)(c - 'A' + 'a');
			if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
			    c == '_')
				name[o++] = (char)c;
			else
				o += (size_t)snprintf(name + o, 5, "\\%03u", c);
		}
		i += 1 + len;
	}
	if (i + 5 > n) { /* the terminating zero, type and class */
		name[0] = '\0';
		return header_only(q, out, MOAT_DNS_FORMERR);
	}
	if (o == 0)
		name[o++] = '.';
	name[o] = '\0';
	size_t qlen = i + 5 - 12;
	header_only(q, out, MOAT_DNS_RCODE);
	out[5] = 1; /* the question, echoed */
	memcpy(out + 12, q + 12, qlen);
	return 12 + qlen;
}
