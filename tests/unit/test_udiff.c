/* Unit tests for src/patch/udiff.c: unified diffs (git diff, diff -u)
 * parsed into apply_patch's sections and applied exactly: line numbers as
 * the starting point, context compared byte for byte, line ends kept. */
#include <criterion/criterion.h>

#include <moat/err.h>
#include "patch/patch.h"

#include <stdlib.h>
#include <string.h>

#define assert_has(hay, needle)                                                \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

static struct moat_patch parse_ok(const char *text)
{
	struct moat_patch p = {NULL, 0};
	struct moat_err e = {0};
	cr_assert_eq(moat_patch_parse(text, strlen(text), &p, &e), 0, "parse: %s\n%s", e.msg, text);
	for (size_t i = 0; i < p.n; i++)
		cr_assert(p.files[i].exact);
	return p;
}

static void parse_bad(const char *text, const char *needle)
{
	struct moat_patch p = {NULL, 0};
	struct moat_err e = {0};
	cr_assert_eq(moat_patch_parse(text, strlen(text), &p, &e), -1, "should fail:\n%s", text);
	cr_assert_null(p.files);
	assert_has(e.msg, needle);
}

/* Apply section i to old; NULL and *err on failure. */
static char *apply(const struct moat_patch *p, size_t i, const char *old, size_t *len,
		   struct moat_err *err)
{
	char *out = NULL;
	memset(err, 0, sizeof *err);
	if (moat_patch_apply(&p->files[i], old, strlen(old), &out, len, err) < 0)
		return NULL;
	return out;
}

static void expect(const char *diff, const char *old, const char *want)
{
	struct moat_patch p = parse_ok(diff);
	struct moat_err e;
	size_t len;
	cr_assert_eq(p.n, 1);
	char *out = apply(&p, 0, old, &len, &e);
	cr_assert_not_null(out, "apply: %s", e.msg);
	cr_assert_eq(len, strlen(want), "got \"%s\", want \"%s\"", out, want);
	cr_assert_str_eq(out, want);
	free(out);
	moat_patch_free(&p);
}

Test(udiff, git_diff_update)
{
	const char *d = "diff --git a/src/x.c b/src/x.c\n"
			"index 1111111..2222222 100644\n"
			"--- a/src/x.c\n"
			"+++ b/src/x.c\n"
			"@@ -1,3 +1,3 @@\n"
			" one\n"
			"-two\n"
			"+TWO\n"
			" three\n";
	struct moat_patch p = parse_ok(d);
	cr_assert_eq(p.n, 1);
	cr_assert_str_eq(p.files[0].path, "src/x.c");
	cr_assert_eq(p.files[0].kind, MOAT_PATCH_UPDATE);
	cr_assert_null(p.files[0].move_to);
	moat_patch_free(&p);
	expect(d, "one\ntwo\nthree\n", "one\nTWO\nthree\n");
}

Test(udiff, diff_u_without_prefixes_and_dates)
{
	expect("--- x.orig\t2026-01-01 00:00:00.000000000 +0000\n"
	       "+++ x\t2026-01-01 00:00:01.000000000 +0000\n"
	       "@@ -2 +2 @@\n"
	       "-b\n"
	       "+B\n",
	       "a\nb\nc\n", "a\nB\nc\n");
	struct moat_patch p = parse_ok("--- x.orig\t2026\n+++ x\t2026\n@@ -1 +1 @@\n-a\n+b\n");
	cr_assert_str_eq(p.files[0].path, "x");
	moat_patch_free(&p);
}

Test(udiff, line_numbers_are_the_starting_point)
{
	/* the same context twice: the hunk's line number picks the second */
	expect("--- a/f\n+++ b/f\n@@ -4,2 +4,2 @@\n x\n-y\n+Y\n", "x\ny\nz\nx\ny\n",
	       "x\ny\nz\nx\nY\n");
	/* moved by two lines since the diff: still found, nearest first */
	expect("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n", "p\nq\nx\ny\n", "p\nq\nx\nY\n");
}

Test(udiff, context_is_exact)
{
	struct moat_patch p = parse_ok("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n");
	struct moat_err e;
	size_t len;
	/* trailing whitespace would match apply_patch's loose levels, not here */
	cr_assert_null(apply(&p, 0, "x \ny\n", &len, &e));
	assert_has(e.msg, "f: hunk 1 (@@ -1,2 +1,2 @@ at patch line 3) does not match");
	assert_has(e.msg, "'x'");
	moat_patch_free(&p);
}

Test(udiff, hunk_line_counts)
{
	parse_bad("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n x\n-y\n+Y\n", "ends early");
	parse_bad("--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n-y\n+Y\n+Z\n", "'+Z' follows a hunk");
	parse_bad("--- a/f\n+++ b/f\n@@ -1,2 +1,1 @@\n x\n y\n", "more new lines");
	parse_bad("--- a/f\n+++ b/f\n@@ -x +1 @@\n-y\n+Y\n", "a bad hunk header");
}

Test(udiff, no_newline_at_end)
{
	/* old ends without a newline, new with one */
	expect("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
	       "a\nb", "a\nb\n");
	/* and the reverse */
	expect("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n",
	       "a\nb\n", "a\nb");
	/* an unchanged last line without one stays without */
	expect("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n",
	       "a\nb", "A\nb");
	/* a file that has a newline does not match a context without one */
	struct moat_patch p =
		parse_ok("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n");
	struct moat_err e;
	size_t len;
	cr_assert_null(apply(&p, 0, "a\nb\n", &len, &e));
	moat_patch_free(&p);
}

Test(udiff, crlf_file_keeps_its_ends)
{
	expect("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+B\r\n", "a\r\nb\r\n", "a\r\nB\r\n");
	/* a context line without its CR does not match a CRLF line */
	struct moat_patch p = parse_ok("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n");
	struct moat_err e;
	size_t len;
	cr_assert_null(apply(&p, 0, "a\r\nb\r\n", &len, &e));
	moat_patch_free(&p);
}

Test(udiff, new_and_deleted_files)
{
	struct moat_patch p = parse_ok("diff --git a/n.sh b/n.sh\n"
				       "new file mode 100755\n"
				       "index 0000000..1111111\n"
				       "--- /dev/null\n"
				       "+++ b/n.sh\n"
				       "@@ -0,0 +1,2 @@\n"
				       "+#!/bin/sh\n"
				       "+echo hi\n"
				       "\\ No newline at end of file\n"
				       "diff --git a/old.txt b/old.txt\n"
				       "deleted file mode 100644\n"
				       "index 1111111..0000000\n"
				       "--- a/old.txt\n"
				       "+++ /dev/null\n"
				       "@@ -1 +0,0 @@\n"
				       "-bye\n"
				       "diff --git a/empty b/empty\n"
				       "new file mode 100644\n"
				       "index 0000000..e69de29\n");
	cr_assert_eq(p.n, 3);
	cr_assert_eq(p.files[0].kind, MOAT_PATCH_ADD);
	cr_assert_str_eq(p.files[0].path, "n.sh");
	cr_assert_str_eq(p.files[0].content, "#!/bin/sh\necho hi");
	cr_assert_eq(p.files[0].mode, 0755);
	cr_assert_eq(p.files[1].kind, MOAT_PATCH_DELETE);
	cr_assert_str_eq(p.files[1].path, "old.txt");
	struct moat_err e;
	size_t len;
	char *out = apply(&p, 1, "bye\n", &len, &e);
	cr_assert_not_null(out, "%s", e.msg);
	cr_assert_eq(len, 0);
	free(out);
	out = apply(&p, 1, "bye\nmore\n", &len, &e); /* more than the diff deletes */
	cr_assert(out && len > 0);
	free(out);
	cr_assert_eq(p.files[2].kind, MOAT_PATCH_ADD);
	cr_assert_str_eq(p.files[2].path, "empty");
	cr_assert_eq(p.files[2].content_len, 0);
	moat_patch_free(&p);
}

Test(udiff, rename_and_mode)
{
	struct moat_patch p = parse_ok("diff --git a/a.txt b/b.txt\n"
				       "similarity index 100%\n"
				       "rename from a.txt\n"
				       "rename to b.txt\n"
				       "diff --git a/run b/run\n"
				       "old mode 100644\n"
				       "new mode 100755\n"
				       "diff --git a/c d.txt b/e.txt\n"
				       "similarity index 80%\n"
				       "rename from c d.txt\n"
				       "rename to e.txt\n"
				       "index 1..2 100644\n"
				       "--- a/c d.txt\n"
				       "+++ b/e.txt\n"
				       "@@ -1 +1 @@\n"
				       "-x\n"
				       "+y\n");
	cr_assert_eq(p.n, 3);
	cr_assert_str_eq(p.files[0].path, "a.txt");
	cr_assert_str_eq(p.files[0].move_to, "b.txt");
	cr_assert_eq(p.files[0].nhunks, 0);
	cr_assert_str_eq(p.files[1].path, "run");
	cr_assert_null(p.files[1].move_to);
	cr_assert_eq(p.files[1].mode, 0755);
	cr_assert_str_eq(p.files[2].path, "c d.txt");
	cr_assert_str_eq(p.files[2].move_to, "e.txt");
	struct moat_err e;
	size_t len;
	char *out = apply(&p, 2, "x\n", &len, &e);
	cr_assert_str_eq(out, "y\n");
	free(out);
	moat_patch_free(&p);
}

Test(udiff, quoted_names)
{
	struct moat_patch p = parse_ok("diff --git \"a/t\\303\\251\\tx\" \"b/t\\303\\251\\tx\"\n"
				       "--- \"a/t\\303\\251\\tx\"\n"
				       "+++ \"b/t\\303\\251\\tx\"\n"
				       "@@ -1 +1 @@\n-a\n+b\n");
	cr_assert_str_eq(p.files[0].path, "t\xc3\xa9\tx");
	moat_patch_free(&p);
}

Test(udiff, several_files_and_surrounding_text)
{
	struct moat_patch p = parse_ok("From 123 Mon Sep 17 00:00:00 2001\n"
				       "Subject: [PATCH] two files\n"
				       "\n"
				       "---\n"
				       " a | 2 +-\n"
				       "\n"
				       "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-1\n+2\n"
				       "diff --git a/b b/b\n--- a/b\n+++ b/b\n@@ -1 +1 @@\n-3\n+4\n"
				       "-- \n2.39.5\n");
	cr_assert_eq(p.n, 2);
	cr_assert_str_eq(p.files[1].path, "b");
	moat_patch_free(&p);
	/* diff -ruN's own lines between files are skipped */
	p = parse_ok("diff -ruN a/x b/x\n--- a/x\t1\n+++ b/x\t2\n@@ -1 +1 @@\n-1\n+2\n"
		     "Only in b: y\n"
		     "diff -ruN a/z b/z\n--- a/z\t1\n+++ b/z\t2\n@@ -1 +1 @@\n-1\n+2\n");
	cr_assert_eq(p.n, 2);
	moat_patch_free(&p);
}

Test(udiff, refused_clearly)
{
	parse_bad("diff --git a/i.png b/i.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\n",
		  "'i.png': binary patches are not supported");
	parse_bad("diff --git a/i.png b/i.png\nindex 1..2 100644\nBinary files a/i.png and "
		  "b/i.png differ\n",
		  "binary");
	parse_bad("diff --git a/a b/c\nsimilarity index 100%\ncopy from a\ncopy to c\n",
		  "copies are not supported");
	parse_bad("diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n"
		  "+t\n\\ No newline at end of file\n",
		  "mode 120000 is not supported");
	parse_bad("--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", "without '..'");
	parse_bad("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "relative to the workspace");
	parse_bad("--- a/f\n+++ b/f\n", "has no hunks");
	parse_bad("hello\nworld\n", "neither apply_patch");
	parse_bad("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n--- a/f\n+++ b/f\n@@ -3 +3 @@\n-a\n+b\n",
		  "appears twice");
	parse_bad("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+c\n+d\n",
		  "a line after");
}

Test(udiff, no_newline_hunk_must_end_the_file)
{
	struct moat_patch p =
		parse_ok("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n");
	struct moat_err e;
	size_t len;
	cr_assert_null(apply(&p, 0, "a\nmore\n", &len, &e));
	assert_has(e.msg, "not at its end");
	moat_patch_free(&p);
}
