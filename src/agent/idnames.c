/* passwd/group lines to (id, name). See idnames.h. */
#include "idnames.h"

#include "../base/utf8.h"

#include <limits.h>
#include <string.h>

/* The decimal at s (n bytes), up to UINT_MAX; -1 if it is not one. */
static long long number(const char *s, size_t n)
{
	if (!n || n > 10)
		return -1;
	long long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v <= UINT_MAX ? v : -1;
}

size_t idnames_parse(const char *buf, size_t len, struct idname *v, size_t cap)
{
	size_t n = 0;
	const char *end = buf + len;
	for (const char *line = buf; line < end && n < cap;) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));
		const char *le = nl ? nl : end;
		const char *c1 = memchr(line, ':', (size_t)(le - line));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
		const char *c3 = c2 ? memchr(c2 + 1, ':', (size_t)(le - c2 - 1)) : NULL;
		const char *idend = c3 ? c3 : le;
		size_t nl_len = c1 ? (size_t)(c1 - line) : 0;
		long long id = c2 ? number(c2 + 1, (size_t)(idend - c2 - 1)) : -1;
		if (c1 && nl_len >= 1 && nl_len <= IDNAME_MAX && !memchr(line, '\0', nl_len) &&
		    id >= 0) {
			v[n].id = (unsigned)id;
			memcpy(v[n].name, line, nl_len);
			v[n].name[nl_len] = '\0';
			moat_utf8_clean(v[n].name);
			n++;
		}
		line = nl ? nl + 1 : end;
	}
	return n;
}
