/* Tar <-> entry stream conversion: see archive.h. Uploaded archives are
 * untrusted: every name and link target is checked here, before anything
 * reaches a sandbox, and the result is appended only when the whole archive
 * passed. */
#include "serve/archive.h"

#include "base/util.h"

#include <archive.h>
#include <archive_entry.h>

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_TOTAL (1ULL << 30)
#define DEFAULT_MAX_ENTRIES 100000ULL
#define READ_CHUNK 65536   /* room made for each archive_read_data() */

/* errnum tells the caller which answer to give (400/413/500); it is set
 * after formatting so the message carries no strerror text. */
__attribute__((format(printf, 5, 6))) static int
arc_fail(struct moat_err *e, int errnum, const char *name, size_t nlen,
	 const char *fmt, ...)
{
	char why[512], shown[MOAT_SHOWN_CAP];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (n < 0)
		why[0] = '\0';
	if (name)
		moat_err_set(e, errnum == ENOMEM ? MOAT_E_SYSTEM : MOAT_E_USAGE,
			     0, "archive entry \"%s\": %s",
			     moat_show(shown, name, nlen), why);
	else
		moat_err_set(e, errnum == ENOMEM ? MOAT_E_SYSTEM : MOAT_E_USAGE,
			     0, "archive: %s", why);
	if (e)
		e->errnum = errnum;
	return -1;
}

static const char *arc_errstr(struct archive *a)
{
	const char *s = archive_error_string(a);
	return s ? s : "unknown error";
}

/* Room for `more` bytes past b->len (moat_buf has no reserve of its own). */
static int buf_reserve(struct moat_buf *b, size_t more)
{
	if (b->cap - b->len >= more)
		return 0;
	if (more > SIZE_MAX / 2 - b->len)
		return -1;
	size_t cap = b->cap ? b->cap : READ_CHUNK;
	while (cap - b->len < more)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* ---- tar -> entries ----------------------------------------------------- */

/* One accepted entry, for the duplicate and parent checks at the end. The
 * path lives in *out, which may move while it grows: keep the offset. */
struct seen {
	size_t off, len;
	const char *p;
	char type;
};

struct reader {
	struct archive *a;
	struct moat_buf *out;
	struct moat_buf data;   /* content of the current file */
	struct seen *seen;
	size_t nseen, cap_seen;
	uint64_t total, max_total, max_entries;
};

static bool has_dotdot(const char *p, size_t n)
{
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && p[i] != '/')
			continue;
		if (i - start == 2 && p[start] == '.' && p[start + 1] == '.')
			return true;
		start = i + 1;
	}
	return false;
}

/* Does `target`, taken relative to the directory of the link at `path`,
 * climb above the archive root? Lexical: "." and empty components stay,
 * ".." goes up. */
static bool link_escapes(const char *path, size_t n, const char *target)
{
	size_t depth = 0;
	for (size_t i = 0; i < n; i++)
		depth += path[i] == '/';
	for (const char *t = target; *t;) {
		size_t c = strcspn(t, "/");
		if (c == 2 && t[0] == '.' && t[1] == '.') {
			if (depth == 0)
				return true;
			depth--;
		} else if (c > 1 || (c == 1 && t[0] != '.')) {
			depth++;
		}
		t += c;
		if (*t == '/')
			t++;
	}
	return false;
}

/* Read the current file's content into rd->data, counting it against the
 * total limit as it comes (sparse files expand here). */
static int read_content(struct reader *rd, const char *p, size_t n,
			struct moat_err *e)
{
	rd->data.len = 0;
	for (;;) {
		if (buf_reserve(&rd->data, READ_CHUNK) < 0)
			return arc_fail(e, ENOMEM, p, n, "out of memory");
		la_ssize_t r = archive_read_data(rd->a, rd->data.p + rd->data.len,
						 rd->data.cap - rd->data.len);
		if (r == 0)
			return 0;
		if (r < 0)
			return arc_fail(e, EINVAL, p, n, "malformed archive: %s",
					arc_errstr(rd->a));
		if ((uint64_t)r > rd->max_total - rd->total)
			return arc_fail(e, EFBIG, p, n,
					"files total more than %llu bytes",
					(unsigned long long)rd->max_total);
		rd->total += (uint64_t)r;
		rd->data.len += (size_t)r;
	}
}

static int remember(struct reader *rd, size_t off, size_t len, char type,
		    struct moat_err *e)
{
	if (rd->nseen == rd->cap_seen) {
		size_t cap = rd->cap_seen ? rd->cap_seen * 2 : 64;
		struct seen *v = reallocarray(rd->seen, cap, sizeof *v);
		if (!v)
			return arc_fail(e, ENOMEM, NULL, 0, "out of memory");
		rd->seen = v;
		rd->cap_seen = cap;
	}
	rd->seen[rd->nseen++] = (struct seen){.off = off, .len = len, .type = type};
	return 0;
}

/* Check one header and append its record to rd->out. */
static int take_entry(struct reader *rd, struct archive_entry *ae,
		      struct moat_err *e)
{
	const char *name = archive_entry_pathname(ae);
	if (!name || !*name)
		return arc_fail(e, EINVAL, NULL, 0, "entry without a name");
	size_t n = strlen(name);
	if (name[0] == '/')
		return arc_fail(e, EINVAL, name, n, "absolute path");
	const char *p = name;
	while (n > 1 && p[n - 1] == '/')
		n--;
	while (n >= 2 && p[0] == '.' && p[1] == '/') {
		p += 2;
		n -= 2;
	}
	mode_t ft = archive_entry_filetype(ae);
	if (n == 1 && p[0] == '.' && ft == AE_IFDIR)
		return 0; /* the archive root itself */
	if (has_dotdot(p, n))
		return arc_fail(e, EINVAL, name, strlen(name),
				"path has a \"..\" component");
	if (!moat_entry_path_ok(p, n))
		return arc_fail(e, EINVAL, name, strlen(name), "invalid path");
	if (rd->nseen >= rd->max_entries)
		return arc_fail(e, EFBIG, p, n, "more than %llu entries",
				(unsigned long long)rd->max_entries);

	const char *hard = archive_entry_hardlink(ae);
	if (hard)
		return arc_fail(e, EINVAL, p, n, "hard link refused");

	struct moat_entry en = {
		.mode = (uint32_t)(archive_entry_perm(ae) & 07777 & ~06000),
		.mtime = (int64_t)archive_entry_mtime(ae),
		.path = p,
		.path_len = n,
	};
	switch (ft) {
	case AE_IFREG:
		en.type = 'f';
		if (archive_entry_size_is_set(ae) && archive_entry_size(ae) > 0 &&
		    (uint64_t)archive_entry_size(ae) > rd->max_total - rd->total)
			return arc_fail(e, EFBIG, p, n,
					"files total more than %llu bytes",
					(unsigned long long)rd->max_total);
		if (read_content(rd, p, n, e) < 0)
			return -1;
		en.data = rd->data.p;
		en.size = rd->data.len;
		break;
	case AE_IFDIR:
		en.type = 'd';
		break;
	case AE_IFLNK: {
		const char *t = archive_entry_symlink(ae);
		if (!t || !*t)
			return arc_fail(e, EINVAL, p, n, "symlink without target");
		size_t tl = strlen(t);
		if (tl > MOAT_ENTRY_PATH_MAX)
			return arc_fail(e, EINVAL, p, n, "symlink target too long");
		if (t[0] == '/')
			return arc_fail(e, EINVAL, p, n,
					"symlink to absolute path refused");
		if (link_escapes(p, n, t))
			return arc_fail(e, EINVAL, p, n,
					"symlink leaves the archive");
		en.type = 'l';
		en.data = t;
		en.size = tl;
		break;
	}
	case AE_IFCHR:
	case AE_IFBLK:
		return arc_fail(e, EINVAL, p, n, "device node refused");
	case AE_IFIFO:
		return arc_fail(e, EINVAL, p, n, "FIFO refused");
	case AE_IFSOCK:
		return arc_fail(e, EINVAL, p, n, "socket refused");
	default:
		return arc_fail(e, EINVAL, p, n, "unknown file type %#o",
				(unsigned)ft);
	}

	if (moat_entry_put(rd->out, &en, e) < 0)
		return -1;
	return remember(rd, rd->out->len - (size_t)en.size - n, n, en.type, e);
}

static int cmp_seen(const void *x, const void *y)
{
	const struct seen *a = x, *b = y;
	int c = memcmp(a->p, b->p, a->len < b->len ? a->len : b->len);
	if (c)
		return c;
	return (a->len > b->len) - (a->len < b->len);
}

/* The type of the archive's entry at exactly path, or 0. */
static char seen_type(const struct reader *rd, const char *path, size_t len)
{
	struct seen k = {.p = path, .len = len};
	size_t lo = 0, hi = rd->nseen;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = cmp_seen(&rd->seen[mid], &k);
		if (c == 0)
			return rd->seen[mid].type;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

/* A link's ".." applied to another link of the archive climbs from where
 * that link points, not from where it lies ("d/u -> .." plus
 * "t -> d/u/.." leaves the tree although each is fine alone): refuse a
 * ".." that would go up from a symlink. */
static int check_link_chains(const struct reader *rd, struct moat_err *e)
{
	char stack[MOAT_ENTRY_PATH_MAX + 2];
	for (size_t i = 0; i < rd->nseen; i++) {
		const struct seen *s = &rd->seen[i];
		if (s->type != 'l')
			continue;
		/* the record: 28-byte header (size at 20), path, target */
		const unsigned char *h = (const unsigned char *)rd->out->p + s->off - 28;
		uint64_t tl = 0;
		for (int b = 7; b >= 0; b--)
			tl = (tl << 8) | h[20 + b];
		const char *t = rd->out->p + s->off + s->len;
		size_t sl = s->len;
		while (sl && s->p[sl - 1] != '/')
			sl--;
		if (sl)
			sl--; /* the link's directory */
		memcpy(stack, s->p, sl);
		for (size_t pos = 0; pos < tl;) {
			size_t c = 0;
			while (pos + c < tl && t[pos + c] != '/')
				c++;
			if (c == 2 && t[pos] == '.' && t[pos + 1] == '.') {
				if (sl && seen_type(rd, stack, sl) == 'l')
					return arc_fail(e, EINVAL, s->p, s->len,
							"symlink climbs out of another symlink");
				while (sl && stack[sl - 1] != '/')
					sl--;
				if (sl)
					sl--;
			} else if (c && !(c == 1 && t[pos] == '.') && sl + c + 1 < sizeof stack) {
				if (sl)
					stack[sl++] = '/';
				memcpy(stack + sl, t + pos, c);
				sl += c;
			}
			pos += c + 1;
		}
	}
	return 0;
}

/* Whole-tree rules, order-independent: no path twice, nothing below a file
 * or a symlink (writing "link/x" would go through the link). */
static int check_tree(struct reader *rd, struct moat_err *e)
{
	for (size_t i = 0; i < rd->nseen; i++)
		rd->seen[i].p = rd->out->p + rd->seen[i].off;
	if (rd->nseen > 1)
		qsort(rd->seen, rd->nseen, sizeof *rd->seen, cmp_seen);
	for (size_t i = 1; i < rd->nseen; i++)
		if (cmp_seen(&rd->seen[i - 1], &rd->seen[i]) == 0)
			return arc_fail(e, EINVAL, rd->seen[i].p, rd->seen[i].len,
					"duplicate path");
	char key[MOAT_ENTRY_PATH_MAX + 2];
	for (size_t i = 0; i < rd->nseen; i++) {
		const struct seen *s = &rd->seen[i];
		if (s->type == 'd')
			continue;
		/* The first path >= "s/" is below s if any is. */
		memcpy(key, s->p, s->len);
		key[s->len] = '/';
		struct seen k = {.p = key, .len = s->len + 1};
		size_t lo = i + 1, hi = rd->nseen;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (cmp_seen(&rd->seen[mid], &k) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < rd->nseen && rd->seen[lo].len > k.len &&
		    !memcmp(rd->seen[lo].p, key, k.len))
			return arc_fail(e, EINVAL, rd->seen[lo].p, rd->seen[lo].len,
					"lies below %s \"%.*s\"",
					s->type == 'l' ? "symlink" : "file",
					(int)(s->len < MOAT_SHOWN ? s->len : MOAT_SHOWN),
					s->p);
	}
	return check_link_chains(rd, e);
}

/* Only tar formats, and only the decompressors built into libarchive: a
 * missing library would make it run an external program on the upload. */
static int open_reader(struct archive *a, const void *tar, size_t len,
		       struct moat_err *e)
{
	int r = archive_read_support_format_tar(a);
	if (r == ARCHIVE_OK && archive_zlib_version())
		r = archive_read_support_filter_gzip(a);
	if (r == ARCHIVE_OK && archive_bzlib_version())
		r = archive_read_support_filter_bzip2(a);
	if (r == ARCHIVE_OK && archive_liblzma_version())
		r = archive_read_support_filter_xz(a);
	if (r == ARCHIVE_OK && archive_libzstd_version())
		r = archive_read_support_filter_zstd(a);
	if (r != ARCHIVE_OK)
		return arc_fail(e, ENOMEM, NULL, 0, "cannot set up reader: %s",
				arc_errstr(a));
	if (archive_read_open_memory(a, tar, len) != ARCHIVE_OK)
		return arc_fail(e, EINVAL, NULL, 0, "not a tar archive: %s",
				arc_errstr(a));
	return 0;
}

int moat_archive_to_entries(const void *tar, size_t len,
			    const struct moat_archive_limits *lim,
			    struct moat_buf *out, struct moat_err *e)
{
	struct reader rd = {
		.out = out,
		.max_total = lim && lim->max_total ? lim->max_total
						   : DEFAULT_MAX_TOTAL,
		.max_entries = lim && lim->max_entries ? lim->max_entries
						       : DEFAULT_MAX_ENTRIES,
	};
	size_t start = out->len;
	int rc = -1;
	rd.a = archive_read_new();
	if (!rd.a)
		return arc_fail(e, ENOMEM, NULL, 0, "out of memory");
	if (open_reader(rd.a, tar ? tar : "", len, e) < 0)
		goto done;
	for (;;) {
		struct archive_entry *ae;
		int r = archive_read_next_header(rd.a, &ae);
		if (r == ARCHIVE_EOF)
			break;
		/* Warnings (an unconvertible name, an ignored pax keyword)
		 * leave a usable header, which is checked like any other. */
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			arc_fail(e, EINVAL, NULL, 0, "malformed archive: %s",
				 arc_errstr(rd.a));
			goto done;
		}
		if (take_entry(&rd, ae, e) < 0)
			goto done;
	}
	rc = check_tree(&rd, e);
done:
	if (rc < 0)
		out->len = start;
	/* Read side: freeing cannot lose data. */
	(void)archive_read_free(rd.a);
	free(rd.data.p);
	free(rd.seen);
	return rc;
}

/* ---- entries -> tar ----------------------------------------------------- */

static la_ssize_t write_out(struct archive *a, void *client, const void *buf,
			    size_t n)
{
	if (moat_buf_add(client, buf, n) < 0) {
		archive_set_error(a, ENOMEM, "out of memory");
		return -1;
	}
	return (la_ssize_t)n;
}

static int write_fail(struct archive *a, struct moat_err *e, const char *what)
{
	int err = archive_errno(a);
	moat_err_set(e, MOAT_E_SYSTEM, 0, "tar writer: %s: %s", what,
		     arc_errstr(a));
	if (e)
		e->errnum = err > 0 ? err : EIO;
	return -1;
}

static int write_entry(struct archive *a, struct archive_entry *ae,
		       const struct moat_entry *en, struct moat_err *e)
{
	/* libarchive wants NUL-terminated names; the stream has none. */
	char path[MOAT_ENTRY_PATH_MAX + 1], target[MOAT_ENTRY_PATH_MAX + 1];
	memcpy(path, en->path, en->path_len);
	path[en->path_len] = '\0';

	archive_entry_clear(ae);
	archive_entry_copy_pathname(ae, path);
	archive_entry_set_perm(ae, (mode_t)en->mode);
	archive_entry_set_mtime(ae, (time_t)en->mtime, 0);
	archive_entry_set_uid(ae, 0);
	archive_entry_set_gid(ae, 0);
	archive_entry_set_size(ae, 0);
	switch (en->type) {
	case 'f':
		archive_entry_set_filetype(ae, AE_IFREG);
		archive_entry_set_size(ae, (la_int64_t)en->size);
		break;
	case 'd':
		archive_entry_set_filetype(ae, AE_IFDIR);
		break;
	default: /* 'l': moat_entry_next admits nothing else */
		memcpy(target, en->data, (size_t)en->size);
		target[en->size] = '\0';
		archive_entry_set_filetype(ae, AE_IFLNK);
		archive_entry_copy_symlink(ae, target);
		break;
	}
	/* WARN: a name that is not UTF-8 went out as hdrcharset=BINARY. */
	int r = archive_write_header(a, ae);
	if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
		return write_fail(a, e, path);
	if (en->type != 'f')
		return 0;
	const char *d = en->data;
	size_t left = (size_t)en->size;
	while (left) {
		la_ssize_t w = archive_write_data(a, d, left);
		if (w <= 0)
			return write_fail(a, e, path);
		d += w;
		left -= (size_t)w;
	}
	return 0;
}

int moat_entries_to_archive(const void *stream, size_t len,
			    struct moat_buf *out, struct moat_err *e)
{
	/* Validate everything before the writer produces a byte. */
	size_t off = 0;
	struct moat_entry en;
	int r;
	while ((r = moat_entry_next(stream, len, &off, &en, e)) == 1)
		;
	if (r < 0)
		return -1;

	size_t start = out->len;
	int rc = -1;
	struct archive_entry *ae = archive_entry_new();
	struct archive *a = archive_write_new();
	if (!a || !ae) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "tar writer");
		goto done;
	}
	/* pax headers only where ustar cannot say it; pad to 512-byte
	 * records, not to 10 KiB blocks. */
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open2(a, out, NULL, write_out, NULL, NULL) !=
		    ARCHIVE_OK) {
		write_fail(a, e, "setup");
		goto done;
	}
	off = 0;
	while ((r = moat_entry_next(stream, len, &off, &en, e)) == 1)
		if (write_entry(a, ae, &en, e) < 0)
			goto done;
	if (r < 0)
		goto done;
	if (archive_write_close(a) != ARCHIVE_OK) {
		write_fail(a, e, "close");
		goto done;
	}
	rc = 0;
done:
	if (a && archive_write_free(a) != ARCHIVE_OK && rc == 0) {
		rc = moat_err_set(e, MOAT_E_SYSTEM, EIO, "tar writer: free");
	}
	archive_entry_free(ae);
	if (rc < 0)
		out->len = start;
	return rc;
}
