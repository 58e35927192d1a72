/* libFuzzer target: multipart/form-data (src/serve/multipart.c), the
 * bodies E2B's SDKs upload files in (POST /files). Input: the first line
 * is the Content-Type value, the rest the body (an exact heap copy, so
 * ASan sees a read past its end). When the Content-Type gives no boundary
 * the body is split with "X" anyway. Checks: the parts' data lie in the
 * body, in order and apart; refusals name a part; names, filenames and
 * content types are NUL-free strings. Seeds: tests/fuzz/corpus/
 * fuzz_multipart (undici's and httpx's bodies, escapes, a preamble). */
#include "serve/multipart.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t cl = nl ? (size_t)(nl - data) : size;
	char *ctype = malloc(cl + 1);
	memcpy(ctype, data, cl);
	ctype[cl] = '\0';
	size_t bl = nl ? size - cl - 1 : 0;
	char *body = malloc(bl ? bl : 1);
	if (bl)
		memcpy(body, nl + 1, bl);

	char boundary[71];
	struct moat_err e = {0};
	if (mp_boundary(ctype, boundary, sizeof boundary, &e) < 0) {
		if (!e.msg[0])
			abort();
		strcpy(boundary, "X");
	} else {
		size_t n = strlen(boundary);
		if (n < 1 || n > 70)
			abort();
	}
	struct mp_parts ps;
	e = (struct moat_err){0};
	if (mp_parse(body, bl, boundary, 8, &ps, &e) == 0) {
		if (ps.n > 8 || (ps.n && !ps.v))
			abort();
		const char *prev = body;
		for (size_t i = 0; i < ps.n; i++) {
			const struct mp_part *p = &ps.v[i];
			/* after the previous part, and before its own delimiter */
			if (p->data < prev || p->len > bl || p->data + p->len + 4 + strlen(boundary) >
								      body + bl)
				abort();
			prev = p->data + p->len;
			if ((p->name && strlen(p->name) > bl) || (p->filename && strlen(p->filename) > bl) ||
			    (p->ctype && strlen(p->ctype) > bl))
				abort();
		}
		mp_free(&ps);
	} else if (!strstr(e.msg, "multipart") || ps.n || ps.v) {
		abort();
	}
	free(body);
	free(ctype);
	return 0;
}
