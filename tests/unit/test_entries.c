/* Unit tests for src/proto/entries.c: the entry stream between the daemon
 * and the agent. Malformed streams are built byte by byte and read from
 * exactly-sized heap copies, so a read past the end trips ASan. */
#include <criterion/criterion.h>

#include "proto/entries.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Record layout from entries.h: type, pad[3], mode, mtime, path_len, size. */
#define ENT_HDR 28

#define ent_assert_has(hay, needle)                                            \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

static void ent_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* A raw record, bypassing moat_entry_put's checks. */
static size_t ent_raw(unsigned char *out, unsigned char type, uint32_t mode,
		      int64_t mtime, const char *path, size_t plen,
		      const void *data, uint64_t size, size_t data_len)
{
	memset(out, 0, ENT_HDR);
	out[0] = type;
	ent_le(out + 4, mode, 4);
	ent_le(out + 8, (uint64_t)mtime, 8);
	ent_le(out + 16, plen, 4);
	ent_le(out + 20, size, 8);
	memcpy(out + ENT_HDR, path, plen);
	if (data_len)
		memcpy(out + ENT_HDR + plen, data, data_len);
	return ENT_HDR + plen + data_len;
}

/* Read a whole stream from an exact heap copy; returns the last result of
 * moat_entry_next and the number of records read. */
static int ent_read_all(const void *s, size_t len, size_t *count,
			struct moat_err *e)
{
	void *copy = malloc(len ? len : 1);
	cr_assert_not_null(copy);
	memcpy(copy, s, len);
	size_t off = 0;
	struct moat_entry en;
	int r;
	*count = 0;
	memset(e, 0, sizeof *e);
	while ((r = moat_entry_next(copy, len, &off, &en, e)) == 1)
		(*count)++;
	free(copy);
	return r;
}

/* One raw record must be refused with a message containing `needle`. */
static void ent_bad_raw(const unsigned char *rec, size_t len, const char *needle)
{
	struct moat_err e;
	size_t n;
	int r = ent_read_all(rec, len, &n, &e);
	cr_assert_eq(r, -1, "accepted a bad record (expected \"%s\")", needle);
	cr_assert_eq(n, 0);
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	cr_assert_eq(e.errnum, EINVAL);
	ent_assert_has(e.msg, needle);
}

static struct moat_entry ent_mk(char type, uint32_t mode, const char *path,
				const char *data)
{
	return (struct moat_entry){
		.type = type,
		.mode = mode,
		.mtime = 1700000000,
		.path = path,
		.path_len = strlen(path),
		.data = data,
		.size = data ? strlen(data) : 0,
	};
}

Test(entries, round_trip)
{
	struct moat_buf b = {0};
	struct moat_err e = {0};
	struct moat_entry in[] = {
		ent_mk('d', 0755, "src", NULL),
		ent_mk('f', 0644, "src/main.c", "int main(void) { return 0; }\n"),
		ent_mk('f', 0600, "empty", NULL),
		ent_mk('l', 0777, "src/link", "main.c"),
		ent_mk('f', 01777, "a/b/c/deep", "x"),
	};
	in[2].mtime = -5; /* before the epoch */
	for (size_t i = 0; i < sizeof in / sizeof *in; i++)
		cr_assert_eq(moat_entry_put(&b, &in[i], &e), 0, "%s", e.msg);

	size_t off = 0;
	struct moat_entry out;
	for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
		cr_assert_eq(moat_entry_next(b.p, b.len, &off, &out, &e), 1,
			     "%s", e.msg);
		cr_assert_eq(out.type, in[i].type);
		cr_assert_eq(out.mode, in[i].mode);
		cr_assert_eq(out.mtime, in[i].mtime);
		cr_assert_eq(out.path_len, in[i].path_len);
		cr_assert_eq(memcmp(out.path, in[i].path, out.path_len), 0);
		cr_assert_eq(out.size, in[i].size);
		if (out.size)
			cr_assert_eq(memcmp(out.data, in[i].data, out.size), 0);
	}
	cr_assert_eq(moat_entry_next(b.p, b.len, &off, &out, &e), 0);
	cr_assert_eq(off, b.len);
	moat_buf_free(&b);
}

Test(entries, record_layout_is_little_endian)
{
	struct moat_buf b = {0};
	struct moat_err e = {0};
	struct moat_entry en = ent_mk('f', 0644, "ab", "xyz");
	en.mtime = 0x0102030405060708LL;
	cr_assert_eq(moat_entry_put(&b, &en, &e), 0, "%s", e.msg);
	static const unsigned char want[] = {
		'f', 0, 0, 0,                   /* type, pad */
		0xa4, 0x01, 0, 0,               /* mode 0644 */
		8, 7, 6, 5, 4, 3, 2, 1,         /* mtime */
		2, 0, 0, 0,                     /* path_len */
		3, 0, 0, 0, 0, 0, 0, 0,         /* size */
		'a', 'b', 'x', 'y', 'z',
	};
	cr_assert_eq(b.len, sizeof want);
	cr_assert_eq(memcmp(b.p, want, sizeof want), 0);
	moat_buf_free(&b);
}

Test(entries, empty_stream_is_clean_end)
{
	struct moat_err e;
	size_t n = 99;
	cr_assert_eq(ent_read_all("", 0, &n, &e), 0);
	cr_assert_eq(n, 0);
}

Test(entries, buf_grows_and_frees)
{
	struct moat_buf b = {0};
	char chunk[1000];
	for (int i = 0; i < 1000; i++) {
		memset(chunk, 'a' + i % 26, sizeof chunk);
		cr_assert_eq(moat_buf_add(&b, chunk, sizeof chunk), 0);
	}
	cr_assert_eq(b.len, 1000 * sizeof chunk);
	cr_assert_geq(b.cap, b.len);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(b.p[i * 1000 + 999], 'a' + i % 26);
	cr_assert_eq(moat_buf_add(&b, NULL, 0), 0);
	cr_assert_eq(b.len, 1000 * sizeof chunk);
	moat_buf_free(&b);
	cr_assert_null(b.p);
	cr_assert_eq(b.len, 0);
	cr_assert_eq(b.cap, 0);
}

Test(entries, path_rules)
{
	static const char *good[] = {"a", "a/b", "a.b/c..d/.e/..f", "...", "x y"};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++)
		cr_assert(moat_entry_path_ok(good[i], strlen(good[i])), "%s",
			  good[i]);
	static const char *bad[] = {"", "/a", "a/", "a//b", ".", "..", "./a",
				    "a/.", "a/./b", "../a", "a/..", "a/../b", "/"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		cr_assert_not(moat_entry_path_ok(bad[i], strlen(bad[i])), "%s",
			      bad[i]);
	cr_assert_not(moat_entry_path_ok("a\0b", 3));
	cr_assert_not(moat_entry_path_ok(NULL, 0));

	char *big = malloc(MOAT_ENTRY_PATH_MAX + 1);
	cr_assert_not_null(big);
	memset(big, 'x', MOAT_ENTRY_PATH_MAX + 1);
	cr_assert(moat_entry_path_ok(big, MOAT_ENTRY_PATH_MAX));
	cr_assert_not(moat_entry_path_ok(big, MOAT_ENTRY_PATH_MAX + 1));
	free(big);
}

/* moat_entry_put refuses what moat_entry_next would refuse, and appends
 * nothing when it does. */
Test(entries, put_rejects)
{
	char target[MOAT_ENTRY_PATH_MAX + 2];
	memset(target, 't', sizeof target - 1);
	target[sizeof target - 1] = '\0';
	struct {
		struct moat_entry en;
		const char *needle;
	} cases[] = {
		{ent_mk('x', 0644, "f", "x"), "unknown type"},
		{ent_mk('f', 04755, "suid", "x"), "set-id"},
		{ent_mk('f', 02755, "sgid", "x"), "set-id"},
		{ent_mk('f', 010644, "high", "x"), "outside 07777"},
		{ent_mk('f', 0644, "/abs", "x"), "invalid path"},
		{ent_mk('f', 0644, "a/../b", "x"), "invalid path"},
		{ent_mk('f', 0644, "a/", "x"), "invalid path"},
		{ent_mk('d', 0755, "dir", "x"), "directory with size"},
		{ent_mk('l', 0777, "l", NULL), "target length"},
		{ent_mk('l', 0777, "l", target), "target length"},
	};
	struct moat_buf b = {0};
	cr_assert_eq(moat_buf_add(&b, "PRE", 3), 0);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct moat_err e = {0};
		cr_assert_eq(moat_entry_put(&b, &cases[i].en, &e), -1,
			     "case %zu accepted", i);
		ent_assert_has(e.msg, cases[i].needle);
		char quoted[64];
		snprintf(quoted, sizeof quoted, "\"%.*s\"",
			 (int)cases[i].en.path_len, cases[i].en.path);
		ent_assert_has(e.msg, quoted);
		cr_assert_eq(e.errnum, EINVAL);
		cr_assert_eq(b.len, 3);
	}
	struct moat_err e = {0};
	struct moat_entry nul = ent_mk('l', 0777, "l", NULL);
	nul.data = "a\0b";
	nul.size = 3;
	cr_assert_eq(moat_entry_put(&b, &nul, &e), -1);
	ent_assert_has(e.msg, "NUL");
	struct moat_entry nulpath = ent_mk('f', 0644, "a", NULL);
	nulpath.path = "a\0b";
	nulpath.path_len = 3;
	cr_assert_eq(moat_entry_put(&b, &nulpath, &e), -1);
	ent_assert_has(e.msg, "a\\x00b");
	cr_assert_eq(b.len, 3);
	moat_buf_free(&b);
}

Test(entries, next_rejects_type_pad_mode)
{
	unsigned char r[64];
	size_t n = ent_raw(r, 'q', 0644, 0, "f", 1, "x", 1, 1);
	ent_bad_raw(r, n, "unknown type");
	n = ent_raw(r, 0, 0644, 0, "f", 1, "x", 1, 1);
	ent_bad_raw(r, n, "unknown type");
	for (int i = 1; i <= 3; i++) {
		n = ent_raw(r, 'f', 0644, 0, "f", 1, "x", 1, 1);
		r[i] = 1;
		ent_bad_raw(r, n, "padding");
	}
	n = ent_raw(r, 'f', 0100644, 0, "f", 1, "x", 1, 1);
	ent_bad_raw(r, n, "outside 07777");
	n = ent_raw(r, 'f', 0xffffffffu, 0, "f", 1, "x", 1, 1);
	ent_bad_raw(r, n, "outside 07777");
	n = ent_raw(r, 'f', 04644, 0, "f", 1, "x", 1, 1);
	ent_bad_raw(r, n, "set-id");
	n = ent_raw(r, 'd', 02755, 0, "d", 1, NULL, 0, 0);
	ent_bad_raw(r, n, "set-id");
}

Test(entries, next_rejects_path_length)
{
	unsigned char r[64];
	size_t n = ent_raw(r, 'f', 0644, 0, "", 0, "x", 1, 1);
	ent_bad_raw(r, n, "path length 0");

	/* 4096 bytes of a perfectly good name are still too long. */
	size_t big = ENT_HDR + MOAT_ENTRY_PATH_MAX + 1;
	unsigned char *rb = malloc(big);
	char *name = malloc(MOAT_ENTRY_PATH_MAX + 1);
	cr_assert(rb && name);
	memset(name, 'n', MOAT_ENTRY_PATH_MAX + 1);
	n = ent_raw(rb, 'd', 0755, 0, name, MOAT_ENTRY_PATH_MAX + 1, NULL, 0, 0);
	ent_bad_raw(rb, n, "path length 4096");
	n = ent_raw(rb, 'd', 0755, 0, name, MOAT_ENTRY_PATH_MAX, NULL, 0, 0);
	struct moat_err e;
	size_t cnt;
	cr_assert_eq(ent_read_all(rb, n, &cnt, &e), 0, "%s", e.msg);
	cr_assert_eq(cnt, 1);
	free(rb);
	free(name);

	/* A path_len that runs past the stream. */
	n = ent_raw(r, 'd', 0755, 0, "abc", 3, NULL, 0, 0);
	ent_le(r + 16, 10, 4);
	ent_bad_raw(r, n, "past the stream");
}

Test(entries, next_rejects_bad_paths)
{
	static const struct {
		const char *p;
		size_t len;
	} bad[] = {
		{"/etc", 4}, {"a\0b", 3}, {"a//b", 4}, {".", 1},  {"..", 2},
		{"a/./b", 5}, {"../x", 4}, {"a/..", 4}, {"a/", 2}, {"/", 1},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		unsigned char r[64];
		size_t n = ent_raw(r, 'd', 0755, 0, bad[i].p, bad[i].len, NULL,
				   0, 0);
		ent_bad_raw(r, n, "invalid path");
	}
}

Test(entries, next_rejects_symlink_targets)
{
	unsigned char r[64];
	size_t n = ent_raw(r, 'l', 0777, 0, "l", 1, NULL, 0, 0);
	ent_bad_raw(r, n, "target length 0");
	n = ent_raw(r, 'l', 0777, 0, "l", 1, "a\0b", 3, 3);
	ent_bad_raw(r, n, "NUL");

	size_t big = ENT_HDR + 1 + MOAT_ENTRY_PATH_MAX + 1;
	unsigned char *rb = malloc(big);
	char *t = malloc(MOAT_ENTRY_PATH_MAX + 1);
	cr_assert(rb && t);
	memset(t, 't', MOAT_ENTRY_PATH_MAX + 1);
	n = ent_raw(rb, 'l', 0777, 0, "l", 1, t, MOAT_ENTRY_PATH_MAX + 1,
		    MOAT_ENTRY_PATH_MAX + 1);
	ent_bad_raw(rb, n, "target length 4096");
	free(rb);
	free(t);
}

Test(entries, next_rejects_dir_size_and_overlong_size)
{
	unsigned char r[64];
	size_t n = ent_raw(r, 'd', 0755, 0, "d", 1, "x", 1, 1);
	ent_bad_raw(r, n, "directory with size 1");
	n = ent_raw(r, 'f', 0644, 0, "f", 1, "xyz", 4, 3);
	ent_bad_raw(r, n, "past the stream");
	n = ent_raw(r, 'f', 0644, 0, "f", 1, "xyz", UINT64_MAX, 3);
	ent_bad_raw(r, n, "past the stream");
	n = ent_raw(r, 'l', 0777, 0, "l", 1, "xyz", 1ULL << 40, 3);
	ent_bad_raw(r, n, "past the stream");
}

Test(entries, next_rejects_truncated_header)
{
	unsigned char r[64];
	size_t n = ent_raw(r, 'f', 0644, 0, "f", 1, "x", 1, 1);
	for (size_t cut = 1; cut < ENT_HDR; cut++) {
		struct moat_err e;
		size_t cnt;
		cr_assert_eq(ent_read_all(r, cut, &cnt, &e), -1, "cut %zu", cut);
		ent_assert_has(e.msg, "truncated header at offset 0");
	}
	(void)n;
}

/* Every proper prefix of a valid stream ends cleanly only on a record
 * boundary; anything else is an error (and never an overread). */
Test(entries, every_truncation_is_caught)
{
	struct moat_buf b = {0};
	struct moat_err e = {0};
	struct moat_entry in[] = {
		ent_mk('d', 0755, "d", NULL),
		ent_mk('f', 0644, "d/file", "hello world"),
		ent_mk('l', 0777, "d/ln", "file"),
	};
	size_t bounds[4] = {0};
	for (size_t i = 0; i < 3; i++) {
		cr_assert_eq(moat_entry_put(&b, &in[i], &e), 0);
		bounds[i + 1] = b.len;
	}
	for (size_t cut = 0; cut <= b.len; cut++) {
		size_t cnt;
		int r = ent_read_all(b.p, cut, &cnt, &e);
		size_t whole = 0;
		bool boundary = false;
		for (size_t i = 0; i < 4; i++) {
			if (bounds[i] <= cut)
				whole = i;
			boundary |= bounds[i] == cut;
		}
		cr_assert_eq(r, boundary ? 0 : -1, "cut %zu", cut);
		cr_assert_eq(cnt, whole, "cut %zu", cut);
	}
	moat_buf_free(&b);
}

Test(entries, offset_past_end)
{
	struct moat_entry en;
	struct moat_err e = {0};
	size_t off = 5;
	cr_assert_eq(moat_entry_next("abc", 3, &off, &en, &e), -1);
	cr_assert_eq(e.errnum, EINVAL);
}

/* Messages quote at most 200 bytes of a hostile name, escaped. */
Test(entries, message_sanitises_path)
{
	char name[600];
	memset(name, 'z', sizeof name);
	name[0] = '\x1b';
	name[1] = '"';
	name[2] = '\n';
	size_t len = ENT_HDR + sizeof name;
	unsigned char *r = malloc(len);
	cr_assert_not_null(r);
	ent_raw(r, 'Z', 0644, 0, name, sizeof name, NULL, 0, 0);
	struct moat_err e;
	size_t cnt;
	cr_assert_eq(ent_read_all(r, len, &cnt, &e), -1);
	ent_assert_has(e.msg, "\\x1b\\x22\\x0azzz");
	ent_assert_has(e.msg, "zzz...\"");
	cr_assert_null(strchr(e.msg, '\n'));
	cr_assert_null(strchr(e.msg, '\x1b'));
	cr_assert_lt(strlen(e.msg), 300);
	free(r);
}
