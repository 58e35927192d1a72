/* Unit tests for src/serve/archive.c: untrusted tar -> entry stream and
 * back. Test archives are written here with libarchive's own writer, so the
 * hostile cases are exactly what a client could upload. */
#include <criterion/criterion.h>

#include "proto/entries.h"
#include "serve/archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define arc_assert_has(hay, needle)                                            \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

/* One member of a test archive. kind: 'f' file (data = content), 'd' dir,
 * 'l' symlink (data = target), 'h' hard link (data = target), 'c'/'b'
 * device, 'p' FIFO. mode 0 means a sensible default. */
struct arc_member {
	char kind;
	const char *path;
	const char *data;
	unsigned mode;
};

static la_ssize_t arc_write_cb(struct archive *a, void *client, const void *buf,
			       size_t n)
{
	(void)a;
	return moat_buf_add(client, buf, n) == 0 ? (la_ssize_t)n : -1;
}

static void arc_build_fmt(struct moat_buf *out, const struct arc_member *m,
			  size_t n, int format, int filter)
{
	struct archive *a = archive_write_new();
	cr_assert_not_null(a);
	cr_assert_eq(archive_write_set_format(a, format), ARCHIVE_OK, "%s",
		     archive_error_string(a));
	if (filter)
		cr_assert_eq(archive_write_add_filter(a, filter), ARCHIVE_OK,
			     "%s", archive_error_string(a));
	/* No zero padding after a compressed stream: zstd readers choke. */
	cr_assert_eq(archive_write_set_bytes_in_last_block(a, 1), ARCHIVE_OK);
	cr_assert_eq(archive_write_open2(a, out, NULL, arc_write_cb, NULL, NULL),
		     ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		cr_assert_not_null(ae);
		archive_entry_set_pathname(ae, m[i].path);
		archive_entry_set_mtime(ae, 1600000000 + (time_t)i, 0);
		archive_entry_set_uid(ae, 1000);
		archive_entry_set_gid(ae, 1000);
		unsigned mode = m[i].mode;
		switch (m[i].kind) {
		case 'f':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_size(ae, (la_int64_t)strlen(m[i].data));
			mode = mode ? mode : 0644;
			break;
		case 'd':
			archive_entry_set_filetype(ae, AE_IFDIR);
			mode = mode ? mode : 0755;
			break;
		case 'l':
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, m[i].data);
			mode = mode ? mode : 0777;
			break;
		case 'h':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, m[i].data);
			mode = mode ? mode : 0644;
			break;
		case 'c':
		case 'b':
			archive_entry_set_filetype(ae, m[i].kind == 'c' ? AE_IFCHR
									: AE_IFBLK);
			archive_entry_set_rdev(ae, 0x0103);
			mode = mode ? mode : 0666;
			break;
		case 'p':
			archive_entry_set_filetype(ae, AE_IFIFO);
			mode = mode ? mode : 0644;
			break;
		default:
			cr_assert_fail("bad test member kind %c", m[i].kind);
		}
		archive_entry_set_perm(ae, mode);
		int r = archive_write_header(a, ae);
		cr_assert(r == ARCHIVE_OK || r == ARCHIVE_WARN, "%s: %s",
			  m[i].path, archive_error_string(a));
		if (m[i].kind == 'f' && *m[i].data)
			cr_assert_eq(archive_write_data(a, m[i].data,
							strlen(m[i].data)),
				     (la_ssize_t)strlen(m[i].data));
		archive_entry_free(ae);
	}
	cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
	cr_assert_eq(archive_write_free(a), ARCHIVE_OK);
}

static void arc_build(struct moat_buf *out, const struct arc_member *m,
		      size_t n)
{
	arc_build_fmt(out, m, n, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, 0);
}

#define ARC_N(a) (sizeof(a) / sizeof *(a))

/* The archive must be refused with errnum and a message containing
 * needle; a buffer holding "PRE" keeps exactly that. */
static void arc_refused(const struct moat_buf *tar,
			const struct moat_archive_limits *lim, int errnum,
			const char *needle)
{
	struct moat_buf out = {0};
	struct moat_err e = {0};
	cr_assert_eq(moat_buf_add(&out, "PRE", 3), 0);
	cr_assert_eq(moat_archive_to_entries(tar->p, tar->len, lim, &out, &e),
		     -1, "accepted (expected \"%s\")", needle);
	cr_assert_eq(e.errnum, errnum, "errnum %d for: %s", e.errnum, e.msg);
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	arc_assert_has(e.msg, needle);
	cr_assert_eq(out.len, 3, "appended on failure: %s", e.msg);
	cr_assert_eq(memcmp(out.p, "PRE", 3), 0);
	moat_buf_free(&out);
}

static void arc_refused_members(const struct arc_member *m, size_t n,
				const char *needle)
{
	struct moat_buf tar = {0};
	arc_build(&tar, m, n);
	arc_refused(&tar, NULL, EINVAL, needle);
	moat_buf_free(&tar);
}

/* Entries of a stream, in order, for assertions. */
struct arc_list {
	struct moat_entry v[64];
	size_t n;
};

static void arc_list(const struct moat_buf *s, struct arc_list *l)
{
	struct moat_err e = {0};
	size_t off = 0;
	int r;
	l->n = 0;
	while ((r = moat_entry_next(s->p, s->len, &off, &l->v[l->n], &e)) == 1)
		cr_assert_lt(++l->n, ARC_N(l->v));
	cr_assert_eq(r, 0, "%s", e.msg);
}

static const struct moat_entry *arc_get(const struct arc_list *l,
					const char *path)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].path_len == strlen(path) &&
		    !memcmp(l->v[i].path, path, l->v[i].path_len))
			return &l->v[i];
	cr_assert_fail("no entry \"%s\"", path);
	return NULL;
}

static void arc_check(const struct arc_list *l, const char *path, char type,
		      uint32_t mode, const char *data)
{
	const struct moat_entry *en = arc_get(l, path);
	cr_assert_eq(en->type, type, "%s type %c", path, en->type);
	cr_assert_eq(en->mode, mode, "%s mode %o", path, en->mode);
	size_t dl = data ? strlen(data) : 0;
	cr_assert_eq(en->size, dl, "%s size", path);
	if (dl)
		cr_assert_eq(memcmp(en->data, data, dl), 0, "%s data", path);
}

static const struct arc_member arc_good[] = {
	{'d', "./", NULL, 0755},
	{'d', "./src/", NULL, 0750},
	{'f', "./src/main.c", "int main(void) { return 0; }\n", 0644},
	{'f', "./src/run.sh", "#!/bin/sh\n", 04755}, /* set-uid dropped */
	{'d', "./tmp", NULL, 01777},                  /* sticky kept */
	{'f', "empty", "", 0600},
	{'l', "src/cur", "main.c", 0},
	{'l', "src/up", "../empty", 0},
	{'l', "top", "src/./../src/main.c", 0},
	{'l', "here", ".", 0},
	{'f', "a/b/c/deep.txt", "deep", 0},           /* parents implied */
};

Test(archive, good_tree)
{
	struct moat_buf tar = {0}, out = {0};
	struct moat_err e = {0};
	arc_build(&tar, arc_good, ARC_N(arc_good));
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, NULL, &out, &e), 0,
		     "%s", e.msg);
	struct arc_list l;
	arc_list(&out, &l);
	cr_assert_eq(l.n, ARC_N(arc_good) - 1); /* "./" skipped */
	arc_check(&l, "src", 'd', 0750, NULL);
	arc_check(&l, "src/main.c", 'f', 0644, "int main(void) { return 0; }\n");
	arc_check(&l, "src/run.sh", 'f', 0755, "#!/bin/sh\n");
	arc_check(&l, "tmp", 'd', 01777, NULL);
	arc_check(&l, "empty", 'f', 0600, NULL);
	arc_check(&l, "src/cur", 'l', 0777, "main.c");
	arc_check(&l, "src/up", 'l', 0777, "../empty");
	arc_check(&l, "top", 'l', 0777, "src/./../src/main.c");
	arc_check(&l, "here", 'l', 0777, ".");
	arc_check(&l, "a/b/c/deep.txt", 'f', 0644, "deep");
	cr_assert_eq(arc_get(&l, "src/main.c")->mtime, 1600000002);
	/* Archive order is kept. */
	cr_assert_eq(l.v[0].path_len, 3);
	cr_assert_eq(memcmp(l.v[0].path, "src", 3), 0);
	moat_buf_free(&tar);
	moat_buf_free(&out);
}

Test(archive, appends_to_existing_buffer)
{
	struct moat_buf tar = {0}, out = {0};
	struct moat_err e = {0};
	static const struct arc_member m[] = {{'f', "x", "1", 0}};
	arc_build(&tar, m, 1);
	cr_assert_eq(moat_buf_add(&out, "PRE", 3), 0);
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, NULL, &out, &e), 0,
		     "%s", e.msg);
	cr_assert_eq(memcmp(out.p, "PRE", 3), 0);
	size_t off = 3;
	struct moat_entry en;
	cr_assert_eq(moat_entry_next(out.p, out.len, &off, &en, &e), 1);
	cr_assert_eq(en.size, 1);
	cr_assert_eq(moat_entry_next(out.p, out.len, &off, &en, &e), 0);
	moat_buf_free(&tar);
	moat_buf_free(&out);
}

Test(archive, refuses_absolute_path)
{
	static const struct arc_member m[] = {{'f', "ok", "x", 0},
					      {'f', "/etc/cron.d/x", "x", 0}};
	arc_refused_members(m, ARC_N(m), "\"/etc/cron.d/x\": absolute path");
}

Test(archive, refuses_dotdot)
{
	static const struct arc_member m1[] = {{'f', "../x", "x", 0}};
	arc_refused_members(m1, 1, "\"../x\": path has a \"..\"");
	static const struct arc_member m2[] = {{'d', "a", NULL, 0},
					       {'f', "a/../../x", "x", 0}};
	arc_refused_members(m2, 2, "\"a/../../x\": path has a \"..\"");
	/* Even one that stays inside: ".." has no business in a name. */
	static const struct arc_member m3[] = {{'f', "./a/../b", "x", 0}};
	arc_refused_members(m3, 1, "\"./a/../b\"");
	static const struct arc_member m4[] = {{'d', "a/..", NULL, 0}};
	arc_refused_members(m4, 1, "path has a \"..\"");
}

Test(archive, refuses_hard_link)
{
	static const struct arc_member m[] = {{'f', "target", "data", 0},
					      {'h', "alias", "target", 0}};
	arc_refused_members(m, ARC_N(m), "\"alias\": hard link");
	static const struct arc_member out[] = {{'h', "pw", "/etc/passwd", 0}};
	arc_refused_members(out, 1, "\"pw\": hard link");
}

Test(archive, refuses_absolute_symlink)
{
	static const struct arc_member m[] = {{'l', "pw", "/etc/passwd", 0}};
	arc_refused_members(m, 1, "\"pw\": symlink to absolute path");
}

Test(archive, refuses_escaping_symlinks)
{
	static const struct arc_member m1[] = {{'l', "l", "a/../../x", 0}};
	arc_refused_members(m1, 1, "\"l\": symlink leaves the archive");
	static const struct arc_member m2[] = {{'l', "l", "..", 0}};
	arc_refused_members(m2, 1, "symlink leaves the archive");
	/* Relative to the link's own directory: one level is fine, two are
	 * not. */
	static const struct arc_member m3[] = {{'l', "d/e/l", "../../../etc", 0}};
	arc_refused_members(m3, 1, "\"d/e/l\": symlink leaves the archive");
	static const struct arc_member m4[] = {{'l', "d/l", "./.././../x", 0}};
	arc_refused_members(m4, 1, "symlink leaves the archive");

	struct moat_buf tar = {0}, out = {0};
	struct moat_err e = {0};
	static const struct arc_member ok[] = {{'l', "d/e/l", "../../x", 0},
					       {'l', "d/m", "x/../../y", 0}};
	arc_build(&tar, ok, ARC_N(ok));
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, NULL, &out, &e), 0,
		     "%s", e.msg);
	moat_buf_free(&tar);
	moat_buf_free(&out);
}

/* "link/x" would be written through the link, wherever it points. */
Test(archive, refuses_entries_below_symlink_or_file)
{
	static const struct arc_member m1[] = {{'d', "d", NULL, 0},
					       {'l', "l", "d", 0},
					       {'f', "l/x", "x", 0}};
	arc_refused_members(m1, ARC_N(m1), "\"l/x\": lies below symlink \"l\"");
	/* The same, in the other order. */
	static const struct arc_member m2[] = {{'f', "l/x", "x", 0},
					       {'l', "l", "d", 0}};
	arc_refused_members(m2, ARC_N(m2), "lies below symlink \"l\"");
	static const struct arc_member m3[] = {{'f', "f", "x", 0},
					       {'d', "f/g/h", NULL, 0}};
	arc_refused_members(m3, ARC_N(m3), "\"f/g/h\": lies below file \"f\"");
}

Test(archive, refuses_devices_and_fifos)
{
	static const struct arc_member c[] = {{'c', "dev/mem", NULL, 0}};
	arc_refused_members(c, 1, "\"dev/mem\": device node");
	static const struct arc_member b[] = {{'b', "sda", NULL, 0}};
	arc_refused_members(b, 1, "\"sda\": device node");
	static const struct arc_member p[] = {{'p', "fifo", NULL, 0}};
	arc_refused_members(p, 1, "\"fifo\": FIFO");
}

Test(archive, refuses_duplicates)
{
	static const struct arc_member m[] = {{'f', "a", "1", 0},
					      {'f', "b", "2", 0},
					      {'f', "./a", "3", 0}};
	arc_refused_members(m, ARC_N(m), "\"a\": duplicate path");
	static const struct arc_member d[] = {{'d', "x/", NULL, 0},
					      {'d', "x", NULL, 0}};
	arc_refused_members(d, ARC_N(d), "\"x\": duplicate path");
}

Test(archive, total_size_limit)
{
	static const struct arc_member m[] = {{'f', "a", "12345", 0},
					      {'f', "b", "67890", 0}};
	struct moat_buf tar = {0}, out = {0};
	struct moat_err e = {0};
	arc_build(&tar, m, ARC_N(m));
	struct moat_archive_limits lim = {.max_total = 10};
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, &lim, &out, &e), 0,
		     "exactly at the limit: %s", e.msg);
	lim.max_total = 9;
	arc_refused(&tar, &lim, EFBIG, "\"b\": files total more than 9 bytes");
	moat_buf_free(&tar);
	moat_buf_free(&out);
}

Test(archive, entry_count_limit)
{
	static const struct arc_member m[] = {{'d', "./", NULL, 0},
					      {'d', "d", NULL, 0},
					      {'f', "d/a", "1", 0},
					      {'l', "d/b", "a", 0}};
	struct moat_buf tar = {0}, out = {0};
	struct moat_err e = {0};
	arc_build(&tar, m, ARC_N(m));
	struct moat_archive_limits lim = {.max_entries = 3}; /* "./" is free */
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, &lim, &out, &e), 0,
		     "%s", e.msg);
	lim.max_entries = 2;
	arc_refused(&tar, &lim, EFBIG, "\"d/b\": more than 2 entries");
	moat_buf_free(&tar);
	moat_buf_free(&out);
}

Test(archive, refuses_garbage_and_truncation)
{
	struct moat_buf junk = {0};
	static const char text[] = "this is not a tar archive, just some words "
				   "that go on for a while\n";
	for (int i = 0; i < 40; i++)
		cr_assert_eq(moat_buf_add(&junk, text, sizeof text - 1), 0);
	arc_refused(&junk, NULL, EINVAL, "archive:");
	moat_buf_free(&junk);

	/* Cut in the middle of a file's content. */
	char big[3000];
	memset(big, 'q', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	struct arc_member m[] = {{'f', "a", "x", 0}, {'f', "big", big, 0}};
	struct moat_buf tar = {0};
	arc_build(&tar, m, ARC_N(m));
	tar.len = 512 * 4 + 700;
	arc_refused(&tar, NULL, EINVAL, "malformed archive");
	moat_buf_free(&tar);
}

Test(archive, refuses_other_formats)
{
	static const struct arc_member m[] = {{'f', "a", "1", 0}};
	struct moat_buf zip = {0};
	arc_build_fmt(&zip, m, 1, ARCHIVE_FORMAT_ZIP, 0);
	arc_refused(&zip, NULL, EINVAL, "archive:");
	moat_buf_free(&zip);
}

static void arc_compressed_ok(int filter)
{
	struct moat_buf tar = {0}, out = {0};
	struct moat_err e = {0};
	arc_build_fmt(&tar, arc_good, ARC_N(arc_good),
		      ARCHIVE_FORMAT_TAR_GNUTAR, filter);
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, NULL, &out, &e), 0,
		     "%s", e.msg);
	struct arc_list l;
	arc_list(&out, &l);
	cr_assert_eq(l.n, ARC_N(arc_good) - 1);
	arc_check(&l, "src/main.c", 'f', 0644, "int main(void) { return 0; }\n");
	arc_check(&l, "src/up", 'l', 0777, "../empty");
	moat_buf_free(&tar);
	moat_buf_free(&out);
}

Test(archive, gzip_gnutar_accepted)
{
	arc_compressed_ok(ARCHIVE_FILTER_GZIP);
}

Test(archive, zstd_xz_bzip2_accepted)
{
	arc_compressed_ok(ARCHIVE_FILTER_ZSTD);
	arc_compressed_ok(ARCHIVE_FILTER_XZ);
	arc_compressed_ok(ARCHIVE_FILTER_BZIP2);
}

Test(archive, ustar_accepted)
{
	struct moat_buf tar = {0}, out = {0};
	struct moat_err e = {0};
	arc_build_fmt(&tar, arc_good, ARC_N(arc_good), ARCHIVE_FORMAT_TAR_USTAR,
		      0);
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, NULL, &out, &e), 0,
		     "%s", e.msg);
	moat_buf_free(&tar);
	moat_buf_free(&out);
}

/* A compressed archive whose content would blow the limit is cut off
 * while decompressing, not after. */
Test(archive, compressed_bomb_hits_limit)
{
	size_t n = 4u << 20;
	char *zeros = malloc(n + 1);
	cr_assert_not_null(zeros);
	memset(zeros, 'z', n);
	zeros[n] = '\0';
	struct arc_member m[] = {{'f', "bomb", zeros, 0}};
	struct moat_buf tar = {0};
	arc_build_fmt(&tar, m, 1, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED,
		      ARCHIVE_FILTER_GZIP);
	cr_assert_lt(tar.len, 64 * 1024);
	struct moat_archive_limits lim = {.max_total = 1u << 20};
	arc_refused(&tar, &lim, EFBIG, "\"bomb\"");
	free(zeros);
	moat_buf_free(&tar);
}

static void arc_put(struct moat_buf *s, char type, uint32_t mode,
		    int64_t mtime, const char *path, const void *data,
		    size_t size)
{
	struct moat_err e = {0};
	struct moat_entry en = {.type = type,
				.mode = mode,
				.mtime = mtime,
				.path = path,
				.path_len = strlen(path),
				.data = data,
				.size = size};
	cr_assert_eq(moat_entry_put(s, &en, &e), 0, "%s", e.msg);
}

Test(archive, entries_tar_entries_round_trip)
{
	struct moat_buf s = {0}, tar = {0}, back = {0};
	struct moat_err e = {0};
	char longname[300];
	memset(longname, 'n', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	memcpy(longname, "deep/", 5);
	static const unsigned char bin[] = {0, 1, 2, 0xff, 0xfe, 0, 'x'};
	arc_put(&s, 'd', 0700, 1, "deep", NULL, 0);
	arc_put(&s, 'f', 0640, 1700000000, "deep/file.txt", "hello\n", 6);
	arc_put(&s, 'f', 0755, 5, "bin", bin, sizeof bin);
	arc_put(&s, 'f', 0600, 0, "empty", NULL, 0);
	arc_put(&s, 'l', 0777, 7, "deep/link", "../bin", 6);
	arc_put(&s, 'd', 01777, 8, "sticky", NULL, 0);
	arc_put(&s, 'f', 0644, 9, longname, "L", 1);
	arc_put(&s, 'f', 0644, 10, "caf\xc3\xa9 \xff", "u", 1);

	cr_assert_eq(moat_entries_to_archive(s.p, s.len, &tar, &e), 0, "%s",
		     e.msg);
	cr_assert_eq(tar.len % 512, 0);
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, NULL, &back, &e), 0,
		     "%s", e.msg);
	cr_assert_eq(back.len, s.len);
	cr_assert_eq(memcmp(back.p, s.p, s.len), 0,
		     "stream changed in the round trip");
	moat_buf_free(&s);
	moat_buf_free(&tar);
	moat_buf_free(&back);
}

Test(archive, tar_output_is_deterministic)
{
	struct moat_buf s = {0}, t1 = {0}, t2 = {0};
	struct moat_err e = {0};
	arc_put(&s, 'd', 0755, 3, "d", NULL, 0);
	arc_put(&s, 'f', 0644, 4, "d/f", "data", 4);
	arc_put(&s, 'l', 0777, 5, "d/l", "f", 1);
	cr_assert_eq(moat_entries_to_archive(s.p, s.len, &t1, &e), 0, "%s", e.msg);
	cr_assert_eq(moat_entries_to_archive(s.p, s.len, &t2, &e), 0, "%s", e.msg);
	cr_assert_eq(t1.len, t2.len);
	cr_assert_eq(memcmp(t1.p, t2.p, t1.len), 0);

	/* Read it with libarchive: ustar, owned by 0:0, no names. */
	struct archive *a = archive_read_new();
	cr_assert_not_null(a);
	cr_assert_eq(archive_read_support_format_tar(a), ARCHIVE_OK);
	cr_assert_eq(archive_read_open_memory(a, t1.p, t1.len), ARCHIVE_OK);
	struct archive_entry *ae;
	static const char *names[] = {"d/", "d/f", "d/l"};
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(archive_read_next_header(a, &ae), ARCHIVE_OK);
		cr_assert_str_eq(archive_entry_pathname(ae), names[i]);
		cr_assert_eq(archive_entry_uid(ae), 0);
		cr_assert_eq(archive_entry_gid(ae), 0);
		cr_assert(archive_entry_uname(ae) == NULL ||
			  !*archive_entry_uname(ae));
		cr_assert_eq(archive_entry_mtime(ae), 3 + i);
	}
	cr_assert_str_eq(archive_entry_symlink(ae), "f");
	cr_assert_eq(archive_read_next_header(a, &ae), ARCHIVE_EOF);
	cr_assert_eq(archive_format(a), ARCHIVE_FORMAT_TAR_USTAR);
	cr_assert_eq(archive_read_free(a), ARCHIVE_OK);
	moat_buf_free(&s);
	moat_buf_free(&t1);
	moat_buf_free(&t2);
}

Test(archive, empty_stream_makes_empty_tar)
{
	struct moat_buf tar = {0}, back = {0};
	struct moat_err e = {0};
	cr_assert_eq(moat_entries_to_archive("", 0, &tar, &e), 0, "%s", e.msg);
	cr_assert_gt(tar.len, 0);
	cr_assert_eq(moat_archive_to_entries(tar.p, tar.len, NULL, &back, &e), 0,
		     "%s", e.msg);
	cr_assert_eq(back.len, 0);
	moat_buf_free(&tar);
	moat_buf_free(&back);
}

Test(archive, malformed_stream_not_written)
{
	struct moat_buf s = {0}, tar = {0};
	struct moat_err e = {0};
	arc_put(&s, 'f', 0644, 0, "ok", "x", 1);
	cr_assert_eq(moat_buf_add(&s, "garbage", 7), 0);
	cr_assert_eq(moat_buf_add(&tar, "PRE", 3), 0);
	cr_assert_eq(moat_entries_to_archive(s.p, s.len, &tar, &e), -1);
	cr_assert_eq(e.errnum, EINVAL);
	cr_assert_eq(tar.len, 3);
	moat_buf_free(&s);
	moat_buf_free(&tar);
}
