/* Unit tests for src/base: size/number parsing, lexical paths, error
 * objects and string vectors. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <moat/err.h>
#include <moat/strv.h>
#include "base/util.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define assert_has(hay, needle)                                                \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))
#define assert_hasnt(hay, needle)                                              \
	cr_assert(strstr((hay), (needle)) == NULL,                             \
		  "did not expect \"%s\" in \"%s\"", (needle), (hay))

static const uint64_t KiB = 1ULL << 10, MiB = 1ULL << 20, GiB = 1ULL << 30,
		      TiB = 1ULL << 40;

/* ---- moat_parse_size ---------------------------------------------------- */

static uint64_t size_ok(const char *s)
{
	struct moat_err e = {0};
	uint64_t v = 0xdeadbeef;
	int r = moat_parse_size(s, &v, &e);
	cr_assert_eq(r, 0, "moat_parse_size(\"%s\") failed: %s", s, e.msg);
	return v;
}

/* Returns the message; out must stay untouched on failure. */
static void size_bad(const char *s, struct moat_err *e)
{
	uint64_t v = 4242;
	memset(e, 0, sizeof *e);
	int r = moat_parse_size(s, &v, e);
	cr_assert_eq(r, -1, "moat_parse_size(\"%s\") should fail (got %llu)", s,
		     (unsigned long long)v);
	cr_assert_eq(v, 4242, "output written on failure for \"%s\"", s);
	cr_assert_eq(e->kind, MOAT_E_USAGE, "kind for \"%s\"", s);
	cr_assert_eq(e->errnum, 0);
	cr_assert_neq(e->msg[0], '\0');
}

Test(parse_size, binary_units)
{
	cr_assert_eq(size_ok("512M"), 512 * MiB);
	cr_assert_eq(size_ok("2G"), 2 * GiB);
	cr_assert_eq(size_ok("1k"), KiB);
	cr_assert_eq(size_ok("1K"), KiB);
	cr_assert_eq(size_ok("3T"), 3 * TiB);
	cr_assert_eq(size_ok("64m"), 64 * MiB);
}

Test(parse_size, plain_bytes_and_suffixes)
{
	cr_assert_eq(size_ok("1024"), 1024);
	cr_assert_eq(size_ok("1048576"), 1048576);
	cr_assert_eq(size_ok("7B"), 7);
	cr_assert_eq(size_ok("7b"), 7);
	cr_assert_eq(size_ok("1"), 1);
	cr_assert_eq(size_ok("10MiB"), 10 * MiB);
	cr_assert_eq(size_ok("10MB"), 10 * MiB);
	cr_assert_eq(size_ok("4Ki"), 4 * KiB);
	cr_assert_eq(size_ok("2GiB"), 2 * GiB);
}

Test(parse_size, fractions)
{
	cr_assert_eq(size_ok("1.5G"), GiB + GiB / 2);
	cr_assert_eq(size_ok("0.5K"), 512);
	cr_assert_eq(size_ok("0.25M"), MiB / 4);
}

Test(parse_size, large_but_fits)
{
	cr_assert_eq(size_ok("16383T"), 16383 * TiB);
	/* 2^63 is exactly representable as a double. */
	cr_assert_eq(size_ok("8388608T"), 1ULL << 63);
}

Test(parse_size, empty_and_null)
{
	struct moat_err e;
	size_bad("", &e);
	assert_has(e.msg, "empty size");
	uint64_t v = 1;
	cr_assert_eq(moat_parse_size(NULL, &v, &e), -1);
	cr_assert_eq(v, 1);
}

Test(parse_size, junk)
{
	static const char *const bad[] = {
		"abc", "-1", "12X", "M", "1 M", " 1M", "1M ", "1MM", "1BB",
		"1iB", "+1", "1.5.5G", "G1", "1KX", "1Kx", NULL,
	};
	for (size_t i = 0; bad[i]; i++) {
		struct moat_err e;
		size_bad(bad[i], &e);
		assert_has(e.msg, "invalid size");
		char quoted[64];
		snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
		assert_has(e.msg, quoted);
		assert_has(e.msg, "512M");
	}
}

Test(parse_size, zero_is_an_error)
{
	static const char *const zero[] = {"0", "0M", "0.0G", "0B", "0.5", NULL};
	for (size_t i = 0; zero[i]; i++) {
		struct moat_err e;
		size_bad(zero[i], &e);
		assert_has(e.msg, "at least 1 byte");
		assert_has(e.msg, zero[i]);
	}
}

Test(parse_size, out_of_range)
{
	struct moat_err e;
	size_bad("1e400", &e);
	assert_has(e.msg, "1e400");

	size_bad("16777216T", &e); /* 2^64 */
	assert_has(e.msg, "too large");
	assert_has(e.msg, "'16777216T'");

	size_bad("18446744073709551616", &e);
	assert_has(e.msg, "too large");

	size_bad("99999999999999999999999G", &e);
	assert_has(e.msg, "too large");
}

/* Regression (was a bug): moat_parse_size() uses strtod(), which also accepts hexadecimal
 * floats: "0x10" is 16 bytes and "0x1B" is 27 bytes (B taken as a hex digit,
 * not the byte suffix). Sizes are documented as decimal. */
Test(parse_size, rejects_hex)
{
	struct moat_err e;
	size_bad("0x10", &e);
	size_bad("0x1B", &e);
	size_bad("0x1p4", &e);
}

/* ---- moat_parse_scaled ---------------------------------------------------- */

Test(parse_scaled, cpus)
{
	struct moat_err e = {0};
	uint64_t v = 0;
	cr_assert_eq(moat_parse_scaled("1.5", 1000, 4096000, &v, &e), 0, "%s", e.msg);
	cr_assert_eq(v, 1500);
	cr_assert_eq(moat_parse_scaled("2", 1000, 4096000, &v, &e), 0);
	cr_assert_eq(v, 2000);
	cr_assert_eq(moat_parse_scaled(".5", 1000, 4096000, &v, &e), 0);
	cr_assert_eq(v, 500);
	cr_assert_eq(moat_parse_scaled("0.001", 1000, 4096000, &v, &e), 0);
	cr_assert_eq(v, 1);
	cr_assert_eq(moat_parse_scaled("4096", 1000, 4096000, &v, &e), 0);
	cr_assert_eq(v, 4096000);
	/* rounding, not truncation */
	cr_assert_eq(moat_parse_scaled("0.0019", 1000, 4096000, &v, &e), 0);
	cr_assert_eq(v, 2);
	cr_assert_eq(moat_parse_scaled("2.5", 1, 100, &v, &e), 0);
	cr_assert_eq(v, 3);
}

Test(parse_scaled, zero_and_tiny)
{
	struct moat_err e = {0};
	uint64_t v = 77;
	cr_assert_eq(moat_parse_scaled("0", 1000, 4096000, &v, &e), -1);
	assert_has(e.msg, "'0'");
	assert_has(e.msg, "greater than 0");
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	cr_assert_eq(moat_parse_scaled("0.0004", 1000, 4096000, &v, &e), -1);
	assert_has(e.msg, "greater than 0");
	cr_assert_eq(v, 77);
}

Test(parse_scaled, junk)
{
	static const char *const bad[] = {"-1", "abc", "", "1.5x", "1,5", " 1",
					  "1 ", "+1", "1e400", "inf", "nan", NULL};
	for (size_t i = 0; bad[i]; i++) {
		struct moat_err e = {0};
		uint64_t v = 77;
		cr_assert_eq(moat_parse_scaled(bad[i], 1000, 4096000, &v, &e), -1,
			     "\"%s\" accepted as %llu", bad[i], (unsigned long long)v);
		cr_assert_eq(v, 77);
		assert_has(e.msg, "invalid number");
		char quoted[64];
		snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
		assert_has(e.msg, quoted);
	}
}

Test(parse_scaled, too_large)
{
	struct moat_err e = {0};
	uint64_t v = 77;
	cr_assert_eq(moat_parse_scaled("4096.001", 1000, 4096000, &v, &e), -1);
	assert_has(e.msg, "too large");
	assert_has(e.msg, "'4096.001'");
	cr_assert_eq(moat_parse_scaled("99999999999999999999", 1000, 4096000, &v, &e), -1);
	assert_has(e.msg, "too large");
	/* exponents are not decimals */
	cr_assert_eq(moat_parse_scaled("1e300", 1000, 4096000, &v, &e), -1);
	assert_has(e.msg, "invalid number");
	cr_assert_eq(v, 77);
}

Test(parse_scaled, null_does_not_crash)
{
	struct moat_err e = {0};
	uint64_t v = 77;
	cr_assert_eq(moat_parse_scaled(NULL, 1000, 10, &v, &e), -1);
	cr_assert_eq(v, 77);
}

/* Regression (was a bug): moat_parse_scaled() is documented to take "a positive decimal" but
 * strtod() also accepts hexadecimal floats: "0x10" cpus -> 16000. */
Test(parse_scaled, rejects_hex)
{
	struct moat_err e = {0};
	uint64_t v = 77;
	cr_assert_eq(moat_parse_scaled("0x10", 1000, 4096000, &v, &e), -1);
	cr_assert_eq(v, 77);
}

/* ---- moat_parse_uint -------------------------------------------------------- */

Test(parse_uint, valid)
{
	struct moat_err e = {0};
	uint64_t v = 0;
	cr_assert_eq(moat_parse_uint("1", 10, &v, &e), 0);
	cr_assert_eq(v, 1);
	cr_assert_eq(moat_parse_uint("10", 10, &v, &e), 0);
	cr_assert_eq(v, 10);
	cr_assert_eq(moat_parse_uint("4194304", 4194304, &v, &e), 0);
	cr_assert_eq(v, 4194304);
	cr_assert_eq(moat_parse_uint("007", 10, &v, &e), 0);
	cr_assert_eq(v, 7);
	cr_assert_eq(moat_parse_uint("18446744073709551615", UINT64_MAX, &v, &e), 0);
	cr_assert_eq(v, UINT64_MAX);
}

Test(parse_uint, errors)
{
	struct moat_err e = {0};
	uint64_t v = 77;
	cr_assert_eq(moat_parse_uint("0", 10, &v, &e), -1);
	assert_has(e.msg, "greater than 0");
	cr_assert_eq(moat_parse_uint("11", 10, &v, &e), -1);
	assert_has(e.msg, "'11' is too large (max 10)");
	static const char *const bad[] = {"", "-1", "+1", "abc", "1.5", "12abc",
					  " 1", "1 ", "0x10",
					  "18446744073709551616", NULL};
	for (size_t i = 0; bad[i]; i++) {
		cr_assert_eq(moat_parse_uint(bad[i], UINT64_MAX, &v, &e), -1,
			     "\"%s\" accepted", bad[i]);
		assert_has(e.msg, "invalid number");
		cr_assert_eq(e.kind, MOAT_E_USAGE);
	}
	cr_assert_eq(moat_parse_uint(NULL, 10, &v, &e), -1);
	assert_has(e.msg, "invalid number ''");
	cr_assert_eq(v, 77);
}

/* ---- paths -------------------------------------------------------------- */

static void norm_is(const char *in, const char *want)
{
	char *s = strdup(in);
	moat_path_normalize(s);
	cr_assert_str_eq(s, want, "normalize(\"%s\")", in);
	free(s);
}

Test(path, normalize)
{
	norm_is("//a/./b/../c", "/a/c");
	norm_is("/..", "/");
	norm_is("/../..", "/");
	norm_is("/", "/");
	norm_is("///", "/");
	norm_is("/a/b/", "/a/b");
	norm_is("/a/b///", "/a/b");
	norm_is("/a/..", "/");
	norm_is("/a/b/../../..", "/");
	norm_is("/a/../../b", "/b");
	norm_is("/./a/./", "/a");
	norm_is("/a/...", "/a/...");
	norm_is("/a/..b/.c", "/a/..b/.c");
	norm_is("/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu");
	norm_is("/aa/bb/../cc/./dd//ee/..", "/aa/cc/dd");
}

static void abs_is(const char *p, const char *base, const char *home,
		   const char *want)
{
	struct moat_err e = {0};
	char *r = moat_path_absolute(p, base, home, &e);
	cr_assert_not_null(r, "absolute(\"%s\") failed: %s", p, e.msg);
	cr_assert_str_eq(r, want, "absolute(\"%s\", \"%s\", \"%s\")", p,
			 base ? base : "(null)", home ? home : "(null)");
	free(r);
}

Test(path, absolute)
{
	abs_is("~", "/cwd", "/home/u", "/home/u");
	abs_is("~/", "/cwd", "/home/u", "/home/u");
	abs_is("~/x", "/cwd", "/home/u", "/home/u/x");
	abs_is("~/x/../y", "/cwd", "/home/u/", "/home/u/y");
	abs_is("rel", "/cwd", "/home/u", "/cwd/rel");
	abs_is("./a/../b", "/cwd/sub", "/home/u", "/cwd/sub/b");
	abs_is("..", "/cwd/sub", NULL, "/cwd");
	abs_is(".", "/cwd", NULL, "/cwd");
	abs_is("/abs//p/", "/cwd", "/home/u", "/abs/p");
	abs_is("/abs", NULL, NULL, "/abs");
	/* "~user" is not expanded: it is a relative name. */
	abs_is("~user", "/cwd", "/home/u", "/cwd/~user");
	abs_is("a~", "/cwd", "/home/u", "/cwd/a~");
}

Test(path, absolute_errors)
{
	struct moat_err e = {0};
	cr_assert_null(moat_path_absolute("", "/cwd", "/home/u", &e));
	assert_has(e.msg, "empty path");
	cr_assert_eq(e.kind, MOAT_E_USAGE);

	memset(&e, 0, sizeof e);
	cr_assert_null(moat_path_absolute(NULL, "/cwd", "/home/u", &e));
	assert_has(e.msg, "empty path");

	memset(&e, 0, sizeof e);
	cr_assert_null(moat_path_absolute("~", "/cwd", NULL, &e));
	assert_has(e.msg, "'~'");
	assert_has(e.msg, "HOME");

	memset(&e, 0, sizeof e);
	cr_assert_null(moat_path_absolute("~/x", "/cwd", "relative/home", &e));
	assert_has(e.msg, "'~/x'");

	memset(&e, 0, sizeof e);
	cr_assert_null(moat_path_absolute("~/x", "/cwd", "", &e));
	assert_has(e.msg, "HOME");

	memset(&e, 0, sizeof e);
	cr_assert_null(moat_path_absolute("rel", NULL, "/home/u", &e));
	assert_has(e.msg, "'rel'");
	assert_has(e.msg, "base directory");

	memset(&e, 0, sizeof e);
	cr_assert_null(moat_path_absolute("rel", "not/abs", "/home/u", &e));
	assert_has(e.msg, "'rel'");

	/* a NULL error object is allowed */
	cr_assert_null(moat_path_absolute("", "/cwd", "/home/u", NULL));
}

Test(path, within)
{
	cr_assert(moat_path_within("/a/b", "/a"));
	cr_assert(moat_path_within("/a", "/a"));
	cr_assert(moat_path_within("/a/b/c/d", "/a/b"));
	cr_assert_not(moat_path_within("/ab", "/a"));
	cr_assert_not(moat_path_within("/a", "/a/b"));
	cr_assert_not(moat_path_within("/b/a", "/a"));
	cr_assert_not(moat_path_within("/home/user2", "/home/user"));
	cr_assert(moat_path_within("/", "/"));
	cr_assert(moat_path_within("/anything/at/all", "/"));
	cr_assert(moat_path_within("/etc", "/"));
	cr_assert_not(moat_path_within("relative", "/"));
	cr_assert_not(moat_path_within("", "/"));
}

/* ---- moat_strdupf / files ------------------------------------------------- */

Test(util, strdupf)
{
	char *s = moat_strdupf("%s-%d-%.2s", "ab", 42, "xyz");
	cr_assert_str_eq(s, "ab-42-xy");
	free(s);
	s = moat_strdupf("%s", "");
	cr_assert_str_eq(s, "");
	free(s);
}

Test(util, read_write_file)
{
	char dir[] = "/tmp/moat-ut-XXXXXX";
	cr_assert_not_null(mkdtemp(dir));
	char *f = moat_strdupf("%s/f", dir);
	struct moat_err e = {0};

	/* O_WRONLY without O_CREAT: a missing file is an error naming it */
	cr_assert_eq(moat_write_file(f, "x", &e), -1);
	assert_has(e.msg, f);
	cr_assert_eq(e.errnum, ENOENT);
	cr_assert_eq(e.kind, MOAT_E_SYSTEM);

	FILE *fp = fopen(f, "w");
	cr_assert_not_null(fp);
	fclose(fp);
	cr_assert_eq(moat_write_file(f, "hello world", &e), 0, "%s", e.msg);

	char buf[64];
	cr_assert_eq(moat_read_file(f, buf, sizeof buf, &e), 0, "%s", e.msg);
	cr_assert_str_eq(buf, "hello world");

	char small[6];
	cr_assert_eq(moat_read_file(f, small, sizeof small, &e), 0);
	cr_assert_str_eq(small, "hello");

	unlink(f);
	cr_assert_eq(moat_read_file(f, buf, sizeof buf, &e), -1);
	cr_assert_eq(e.errnum, ENOENT);
	assert_has(e.msg, "No such file");
	free(f);
	rmdir(dir);
}

/* ---- errors --------------------------------------------------------------- */

Test(err, set_plain)
{
	struct moat_err e = {0};
	cr_assert_eq(moat_err_set(&e, MOAT_E_USAGE, 0, "bad %s %d", "thing", 7), -1);
	cr_assert_str_eq(e.msg, "bad thing 7");
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	cr_assert_eq(e.errnum, 0);
}

Test(err, set_with_errno)
{
	struct moat_err e = {0};
	cr_assert_eq(moat_err_set(&e, MOAT_E_SYSTEM, ENOENT, "open %s", "/x"), -1);
	char want[256];
	snprintf(want, sizeof want, "open /x: %s", strerror(ENOENT));
	cr_assert_str_eq(e.msg, want);
	cr_assert_eq(e.errnum, ENOENT);
	cr_assert_eq(e.kind, MOAT_E_SYSTEM);

	moat_err_set(&e, MOAT_E_SYSTEM, EACCES, "mkdir");
	snprintf(want, sizeof want, "mkdir: %s", strerror(EACCES));
	cr_assert_str_eq(e.msg, want);
}

Test(err, set_overwrites_previous)
{
	struct moat_err e = {0};
	moat_err_set(&e, MOAT_E_SYSTEM, EPERM, "first");
	moat_err_set(&e, MOAT_E_USAGE, 0, "second");
	cr_assert_str_eq(e.msg, "second");
	cr_assert_eq(e.errnum, 0);
	cr_assert_eq(e.kind, MOAT_E_USAGE);
}

Test(err, null_err_object)
{
	cr_assert_eq(moat_err_set(NULL, MOAT_E_USAGE, EINVAL, "x %d", 1), -1);
	cr_assert_eq(moat_err_prefix(NULL, "ctx"), -1);
}

Test(err, prefix_chaining)
{
	struct moat_err e = {0};
	moat_err_set(&e, MOAT_E_SYSTEM, ENOENT, "open %s", "/p");
	cr_assert_eq(moat_err_prefix(&e, "mount %s", "/ws"), -1);
	cr_assert_eq(moat_err_prefix(&e, "setup"), -1);
	char want[256];
	snprintf(want, sizeof want, "setup: mount /ws: open /p: %s", strerror(ENOENT));
	cr_assert_str_eq(e.msg, want);
	/* kind and errno survive the prefixing */
	cr_assert_eq(e.kind, MOAT_E_SYSTEM);
	cr_assert_eq(e.errnum, ENOENT);
}

Test(err, prefix_may_reference_own_message)
{
	struct moat_err e = {0};
	moat_err_set(&e, MOAT_E_USAGE, 0, "inner");
	char copy[MOAT_ERR_MSG];
	memcpy(copy, e.msg, sizeof copy);
	moat_err_prefix(&e, "[%s]", copy);
	cr_assert_str_eq(e.msg, "[inner]: inner");
}

Test(err, truncation_of_long_message)
{
	struct moat_err e;
	memset(&e, 'Z', sizeof e); /* poison: the result must still be terminated */
	char *big = malloc(5000);
	memset(big, 'a', 4999);
	big[4999] = '\0';
	moat_err_set(&e, MOAT_E_SYSTEM, ENOENT, "%s", big);
	size_t len = strnlen(e.msg, sizeof e.msg);
	cr_assert_lt(len, sizeof e.msg, "message not NUL-terminated");
	cr_assert_eq(len, MOAT_ERR_MSG - 1);
	cr_assert_eq(e.msg[0], 'a');
	cr_assert_eq(e.errnum, ENOENT);

	/* a long errno-free message followed by errno text near the limit */
	char mid[MOAT_ERR_MSG];
	memset(mid, 'b', MOAT_ERR_MSG - 5);
	mid[MOAT_ERR_MSG - 5] = '\0';
	moat_err_set(&e, MOAT_E_SYSTEM, ENOENT, "%s", mid);
	len = strnlen(e.msg, sizeof e.msg);
	cr_assert_eq(len, MOAT_ERR_MSG - 1);
	cr_assert_eq(strncmp(e.msg + MOAT_ERR_MSG - 5, ": ", 2), 0);

	/* prefix onto a full message keeps the prefix and terminates */
	moat_err_set(&e, MOAT_E_USAGE, 0, "%s", big);
	moat_err_prefix(&e, "ctx");
	len = strnlen(e.msg, sizeof e.msg);
	cr_assert_lt(len, sizeof e.msg);
	cr_assert_eq(strncmp(e.msg, "ctx: aaa", 8), 0, "%.20s", e.msg);

	/* a prefix longer than the buffer */
	moat_err_set(&e, MOAT_E_USAGE, 0, "tail");
	moat_err_prefix(&e, "%s", big);
	len = strnlen(e.msg, sizeof e.msg);
	cr_assert_lt(len, sizeof e.msg);
	cr_assert_eq(e.msg[0], 'a');
	free(big);
}

Test(err, exit_codes)
{
	struct moat_err e = {0};
	moat_err_set(&e, MOAT_E_USAGE, 0, "x");
	cr_assert_eq(moat_err_exit_code(&e), 125);
	moat_err_set(&e, MOAT_E_SYSTEM, EPERM, "x");
	cr_assert_eq(moat_err_exit_code(&e), 125);
	moat_err_set(&e, MOAT_E_NOEXEC, EACCES, "x");
	cr_assert_eq(moat_err_exit_code(&e), 126);
	moat_err_set(&e, MOAT_E_NOTFOUND, ENOENT, "x");
	cr_assert_eq(moat_err_exit_code(&e), 127);
	e.kind = MOAT_E_NONE;
	cr_assert_eq(moat_err_exit_code(&e), 125);
}

/* ---- strv ----------------------------------------------------------------- */

Test(strv, add_contains_free)
{
	struct moat_strv sv = {0};
	cr_assert_not(moat_strv_contains(&sv, "a"));
	char buf[8] = "a";
	moat_strv_add(&sv, buf);
	buf[0] = 'X'; /* add copies */
	moat_strv_add(&sv, "b");
	moat_strv_add(&sv, "");
	cr_assert_eq(sv.n, 3);
	cr_assert_str_eq(sv.v[0], "a");
	cr_assert_str_eq(sv.v[1], "b");
	cr_assert_str_eq(sv.v[2], "");
	cr_assert_null(sv.v[3], "not NULL-terminated");
	cr_assert(moat_strv_contains(&sv, "a"));
	cr_assert(moat_strv_contains(&sv, "b"));
	cr_assert(moat_strv_contains(&sv, ""));
	cr_assert_not(moat_strv_contains(&sv, "X"));
	cr_assert_not(moat_strv_contains(&sv, "ab"));
	moat_strv_free(&sv);
	cr_assert_null(sv.v);
	cr_assert_eq(sv.n, 0);
	/* free is idempotent and the vector reusable */
	moat_strv_free(&sv);
	moat_strv_add(&sv, "again");
	cr_assert_eq(sv.n, 1);
	moat_strv_free(&sv);
}

Test(strv, take_owns)
{
	struct moat_strv sv = {0};
	moat_strv_take(&sv, strdup("x"));
	moat_strv_take(&sv, moat_strdupf("y%d", 1));
	cr_assert_eq(sv.n, 2);
	cr_assert_str_eq(sv.v[1], "y1");
	cr_assert_null(sv.v[2]);
	moat_strv_free(&sv); /* LeakSanitizer checks both were freed */
}

Test(strv, many)
{
	struct moat_strv sv = {0};
	for (int i = 0; i < 1000; i++) {
		char b[16];
		snprintf(b, sizeof b, "s%d", i);
		moat_strv_add(&sv, b);
	}
	cr_assert_eq(sv.n, 1000);
	cr_assert_str_eq(sv.v[999], "s999");
	cr_assert_null(sv.v[1000]);
	cr_assert(moat_strv_contains(&sv, "s500"));
	cr_assert_not(moat_strv_contains(&sv, "s1000"));
	moat_strv_free(&sv);
}

/* moat_rm_tree: a tree with an unreadable (mode-000) directory goes whole;
 * a symlink inside is removed, never followed. */
Test(util, rm_tree_removes_all_and_follows_no_link)
{
	char base[] = "/tmp/moat-unit-rm-XXXXXX";
	cr_assert_not_null(mkdtemp(base));
	char tree[256], outside[256], p[512];
	snprintf(tree, sizeof tree, "%s/tree", base);
	snprintf(outside, sizeof outside, "%s/outside", base);
	cr_assert_eq(mkdir(tree, 0755), 0);
	cr_assert_eq(mkdir(outside, 0755), 0);
	snprintf(p, sizeof p, "%s/keep.txt", outside);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	fputs("keep\n", f);
	fclose(f);
	snprintf(p, sizeof p, "%s/a", tree);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof p, "%s/a/b", tree);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof p, "%s/a/b/f", tree);
	f = fopen(p, "w");
	cr_assert_not_null(f);
	fclose(f);
	snprintf(p, sizeof p, "%s/a/link", tree);
	cr_assert_eq(symlink(outside, p), 0);
	snprintf(p, sizeof p, "%s/a/b", tree);
	cr_assert_eq(chmod(p, 0), 0);
	snprintf(p, sizeof p, "%s/a", tree);
	cr_assert_eq(chmod(p, 0500), 0);
	moat_rm_tree(tree);
	struct stat st;
	cr_assert(lstat(tree, &st) < 0 && errno == ENOENT, "the tree is still there");
	snprintf(p, sizeof p, "%s/keep.txt", outside);
	cr_assert_eq(lstat(p, &st), 0, "a file behind a symlink was removed");
	unlink(p);
	rmdir(outside);
	rmdir(base);
}
