/* Shared helpers: see util.h. */
#define _GNU_SOURCE
#include "util.h"
#include "cleanup.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *xrealloc(void *p, size_t n)
{
	void *r = realloc(p, n);
	if (!r) {
		fputs("moat: out of memory\n", stderr);
		abort();
	}
	return r;
}

void moat_strv_take(struct moat_strv *sv, char *s)
{
	sv->v = xrealloc(sv->v, (sv->n + 2) * sizeof *sv->v);
	sv->v[sv->n++] = s;
	sv->v[sv->n] = NULL;
}

void moat_strv_add(struct moat_strv *sv, const char *s)
{
	char *d = strdup(s);
	if (!d) {
		fputs("moat: out of memory\n", stderr);
		abort();
	}
	moat_strv_take(sv, d);
}

bool moat_strv_contains(const struct moat_strv *sv, const char *s)
{
	for (size_t i = 0; i < sv->n; i++)
		if (strcmp(sv->v[i], s) == 0)
			return true;
	return false;
}

void moat_strv_free(struct moat_strv *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
	sv->v = NULL;
	sv->n = 0;
}

const char *moat_show(char *out, const char *p, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = len < MOAT_SHOWN ? len : MOAT_SHOWN, o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		} else {
			out[o++] = (char)c;
		}
	}
	if (n < len) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
	return out;
}

char *moat_strdupf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		fputs("moat: out of memory\n", stderr);
		abort();
	}
	return s;
}

/* The number part (up to the first letter) is digits with at most one '.'. */
static bool decimal_prefix_ok(const char *s)
{
	int dots = 0;
	for (; *s && !isalpha((unsigned char)*s); s++) {
		if (*s == '.')
			dots++;
		else if (!isdigit((unsigned char)*s))
			return false;
	}
	if (*s == 'x' || *s == 'X' || *s == 'e' || *s == 'E')
		return false;
	return dots <= 1;
}

int moat_parse_size(const char *s, uint64_t *out, struct moat_err *e)
{
	if (!s || !*s)
		return moat_err_set(e, MOAT_E_USAGE, 0, "empty size");
	char *end = NULL;
	errno = 0;
	/* strtod also takes hex, inf and exponents: allow digits and one '.' */
	if (!isdigit((unsigned char)s[0]) || !decimal_prefix_ok(s))
		goto bad;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v))
		goto bad;
	uint64_t mul = 1;
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K':
		mul = 1ULL << 10;
		end++;
		break;
	case 'M':
		mul = 1ULL << 20;
		end++;
		break;
	case 'G':
		mul = 1ULL << 30;
		end++;
		break;
	case 'T':
		mul = 1ULL << 40;
		end++;
		break;
	case 'B':
		break;
	default:
		goto bad;
	}
	if (*end == 'i' && mul > 1)
		end++;
	if (toupper((unsigned char)*end) == 'B')
		end++;
	if (*end)
		goto bad;
	double bytes = v * (double)mul;
	if (bytes < 1)
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "size '%s' must be at least 1 byte", s);
	if (bytes >= 18446744073709551615.0)
		return moat_err_set(e, MOAT_E_USAGE, 0, "size '%s' is too large", s);
	*out = (uint64_t)bytes;
	return 0;
bad:
	return moat_err_set(e, MOAT_E_USAGE, 0,
			    "invalid size '%s' (expected e.g. 512M, 2G, 1048576)", s);
}

int moat_parse_scaled(const char *s, uint64_t scale, uint64_t max,
		      uint64_t *out, struct moat_err *e)
{
	char *end = NULL;
	if (!s)
		return moat_err_set(e, MOAT_E_USAGE, 0, "missing number");
	if ((!isdigit((unsigned char)s[0]) && s[0] != '.') || !decimal_prefix_ok(s))
		goto bad;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		goto bad;
	double scaled = v * (double)scale;
	if (scaled < 1)
		return moat_err_set(e, MOAT_E_USAGE, 0, "'%s' must be greater than 0", s);
	if (scaled > (double)max)
		return moat_err_set(e, MOAT_E_USAGE, 0, "'%s' is too large", s);
	*out = moat_round_u64(scaled);
	return 0;
bad:
	return moat_err_set(e, MOAT_E_USAGE, 0, "invalid number '%s'", s);
}

int moat_parse_uint(const char *s, uint64_t max, uint64_t *out,
		    struct moat_err *e)
{
	if (!s || !isdigit((unsigned char)s[0]))
		return moat_err_set(e, MOAT_E_USAGE, 0, "invalid number '%s'", s ? s : "");
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return moat_err_set(e, MOAT_E_USAGE, 0, "invalid number '%s'", s);
	if (v == 0)
		return moat_err_set(e, MOAT_E_USAGE, 0, "'%s' must be greater than 0", s);
	if (v > max)
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "'%s' is too large (max %llu)", s,
				    (unsigned long long)max);
	*out = v;
	return 0;
}

void moat_path_normalize(char *p)
{
	if (!*p)
		return; /* nothing to normalise (and no room for "/") */
	/* Rebuild component by component; ".." never climbs above "/". */
	size_t len = strlen(p);
	char *out = p; /* write cursor; input is read ahead of it */
	size_t o = 0;
	size_t i = 0;
	while (i < len) {
		while (i < len && p[i] == '/')
			i++;
		size_t start = i;
		while (i < len && p[i] != '/')
			i++;
		size_t clen = i - start;
		if (clen == 0 || (clen == 1 && p[start] == '.'))
			continue;
		if (clen == 2 && p[start] == '.' && p[start + 1] == '.') {
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--; /* drop the slash */
			continue;
		}
		out[o++] = '/';
		memmove(out + o, p + start, clen);
		o += clen;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
}

char *moat_path_absolute(const char *p, const char *base, const char *home,
			 struct moat_err *e)
{
	char *r;
	if (!p || !*p) {
		moat_err_set(e, MOAT_E_USAGE, 0, "empty path");
		return NULL;
	}
	if (p[0] == '~' && (p[1] == '\0' || p[1] == '/')) {
		if (!home || home[0] != '/') {
			moat_err_set(e, MOAT_E_USAGE, 0,
				     "cannot expand '%s': HOME is not an absolute path", p);
			return NULL;
		}
		r = moat_strdupf("%s/%s", home, p + 1);
	} else if (p[0] == '/') {
		r = moat_strdupf("%s", p);
	} else {
		if (!base || base[0] != '/') {
			moat_err_set(e, MOAT_E_USAGE, 0,
				     "relative path '%s' without a base directory", p);
			return NULL;
		}
		r = moat_strdupf("%s/%s", base, p);
	}
	moat_path_normalize(r);
	return r;
}

bool moat_path_within(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	if (n == 1 && dir[0] == '/')
		return path[0] == '/';
	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int moat_write_file(const char *path, const char *s, struct moat_err *e)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", path);
	size_t len = strlen(s);
	ssize_t w = write(fd, s, len);
	if (w < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "write %s", path);
	if ((size_t)w != len)
		return moat_err_set(e, MOAT_E_SYSTEM, EIO, "short write to %s", path);
	return 0;
}

int moat_read_file(const char *path, char *buf, size_t cap, struct moat_err *e)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", path);
	size_t off = 0;
	while (off + 1 < cap) {
		ssize_t r = read(fd, buf + off, cap - 1 - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "read %s", path);
		if (r == 0)
			break;
		off += (size_t)r;
	}
	buf[off] = '\0';
	return 0;
}

int moat_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
