/* multipart/form-data bodies (RFC 7578), as E2B's SDKs upload files:
 * parts with a name, a filename (a full path, kept whole) and bytes. Pure;
 * fuzzed (tests/fuzz/fuzz_multipart.c). */
#ifndef MOAT_SERVE_MULTIPART_H
#define MOAT_SERVE_MULTIPART_H

#include <moat/err.h>

#include <stddef.h>

struct mp_part {
	char *name;      /* Content-Disposition name, or NULL */
	char *filename;  /* filename (quoted-string and %22/%0D/%0A decoded; an RFC
			  * 8187 filename*=UTF-8''... wins), or NULL */
	char *ctype;     /* Content-Type of the part, or NULL */
	const char *data; /* into the body given to mp_parse */
	size_t len;
};

struct mp_parts {
	struct mp_part *v;
	size_t n;
};

/* The boundary parameter of a Content-Type value (1..70 chars). */
int mp_boundary(const char *ctype, char *out, size_t cap, struct moat_err *e);
/* Split body into parts; at most max_parts. Errors name the part. A
 * part's header block is at most 16 KiB; a body of only the close
 * delimiter gives n = 0. */
int mp_parse(const char *body, size_t len, const char *boundary, size_t max_parts,
	     struct mp_parts *out, struct moat_err *e);
void mp_free(struct mp_parts *p);

#endif
