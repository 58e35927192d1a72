/* A tool's last stderr lines, quoted: see tooltail.h. */
#include "base/tooltail.h"

#include "base/utf8.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The escaped form of the character at s (n bytes left) into tmp; returns
 * its length and sets *w to the bytes consumed. */
static size_t esc(const unsigned char *s, size_t n, char tmp[8], size_t *w)
{
	size_t l = moat_utf8_seq(s, n);
	*w = l ? l : 1;
	if (l == 1 && s[0] >= 0x20 && s[0] != 0x7f && s[0] != '\\') {
		tmp[0] = (char)s[0];
		return 1;
	}
	if (l == 1 && (s[0] == '\\' || s[0] == '\t' || s[0] == '\r')) {
		tmp[0] = '\\';
		tmp[1] = s[0] == '\\' ? '\\' : s[0] == '\t' ? 't' : 'r';
		return 2;
	}
	if (l <= 1)
		return (size_t)snprintf(tmp, 8, "\\x%02x", s[0]);
	unsigned cp = 0;
	if (l == 2)
		cp = (s[0] & 0x1fu) << 6 | (s[1] & 0x3fu);
	else if (l == 3)
		cp = (s[0] & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu);
	/* C1 controls (0x9b is a CSI for some terminals); bidi embeddings,
	 * overrides and isolates (text shown in another order than it is) */
	if ((cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
	    (cp >= 0x2066 && cp <= 0x2069))
		return (size_t)snprintf(tmp, 8, "\\u%04x", cp);
	memcpy(tmp, s, l);
	return l;
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

void moat_tail_quote(const char *buf, size_t len, char *out, size_t cap)
{
	if (cap == 0)
		return;
	out[0] = '\0';
	if (cap > MOAT_TAIL_MAX + 1)
		cap = MOAT_TAIL_MAX + 1;
	/* the starts and ends of the last non-blank lines, last first */
	size_t st[MOAT_TAIL_LINES], en[MOAT_TAIL_LINES], nl = 0;
	bool more = false;
	size_t end = len;
	while (end > 0) {
		size_t s = end;
		while (s > 0 && buf[s - 1] != '\n')
			s--;
		size_t e = end;
		while (e > s && (buf[e - 1] == '\r')) /* a CRLF line's CR */
			e--;
		if (!blank(buf + s, e - s)) {
			if (nl == MOAT_TAIL_LINES) {
				more = true;
				break;
			}
			st[nl] = s;
			en[nl] = e;
			nl++;
		}
		end = s ? s - 1 : 0;
	}
	size_t o = 0;
	if (more && cap > 7) {
		memcpy(out, "... | ", 6);
		o = 6;
	}
	for (size_t k = nl; k-- > 0;) {
		if (k + 1 < nl) {
			if (o + 3 + 4 > cap - 1)
				break;
			memcpy(out + o, " | ", 3);
			o += 3;
		}
		const unsigned char *s = (const unsigned char *)buf + st[k];
		size_t n = en[k] - st[k];
		for (size_t i = 0; i < n;) {
			char tmp[8];
			size_t w, tn = esc(s + i, n - i, tmp, &w);
			if (o + tn + 3 > cap - 1) { /* room for "..." */
				memcpy(out + o, "...", 3);
				out[o + 3] = '\0';
				return;
			}
			memcpy(out + o, tmp, tn);
			o += tn;
			i += w;
		}
	}
	out[o] = '\0';
}

int moat_tail_read(int fd, char *out, size_t cap)
{
	char buf[MOAT_TAIL_KEEP];
	size_t len = 0;
	int rc = 0;
	for (;;) {
		if (len == sizeof buf) { /* keep the end */
			memmove(buf, buf + sizeof buf / 2, sizeof buf / 2);
			len = sizeof buf / 2;
		}
		ssize_t n = read(fd, buf + len, sizeof buf - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = -1;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	int err = errno;
	moat_tail_quote(buf, len, out, cap);
	errno = err;
	return rc;
}
