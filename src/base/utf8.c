/* UTF-8 helpers: see utf8.h. */
#include "base/utf8.h"

#include <string.h>

size_t moat_utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len = c < 0x80 ? 1 : c >= 0xc2 && c < 0xe0 ? 2 : (c >> 4) == 14 ? 3
		   : c >= 0xf0 && c < 0xf5 ? 4 : 0;
	if (!len || len > n)
		return 0;
	unsigned cp = len == 1 ? c : c & (0x7fu >> len);
	for (size_t k = 1; k < len; k++) {
		if ((s[k] >> 6) != 2)
			return 0;
		cp = cp << 6 | (s[k] & 63u);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

char *moat_utf8_clean(char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		size_t l = moat_utf8_seq((const unsigned char *)s + i, n - i);
		if (!l) {
			s[i] = '?';
			l = 1;
		}
		i += l;
	}
	return s;
}
