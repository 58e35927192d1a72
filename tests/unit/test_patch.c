/* Unit tests for src/patch: parsing the Codex / Agents SDK apply_patch
 * format, locating hunks (context headers, end-of-file anchors, whitespace
 * and Unicode fuzz) and computing updated contents. */
#include <criterion/criterion.h>

#include <moat/err.h>
#include "patch/patch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define assert_has(hay, needle)                                                \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

/* ---- helpers -------------------------------------------------------------- */

static struct moat_patch parse_ok(const char *text)
{
	struct moat_patch p = {NULL, 0};
	struct moat_err e = {0};
	int r = moat_patch_parse(text, strlen(text), &p, &e);
	cr_assert_eq(r, 0, "parse failed: %s\n--- patch:\n%s", e.msg, text);
	cr_assert_gt(p.n, 0);
	return p;
}

/* Parse must fail with a usage error; the message is returned in *e. */
static void parse_bad(const char *text, struct moat_err *e)
{
	struct moat_patch p = {(struct moat_patch_file *)1, 99};
	memset(e, 0, sizeof *e);
	int r = moat_patch_parse(text, strlen(text), &p, e);
	cr_assert_eq(r, -1, "parse should fail:\n%s", text);
	cr_assert_eq(e->kind, MOAT_E_USAGE);
	cr_assert_null(p.files, "out must be emptied on failure");
	cr_assert_eq(p.n, 0);
	cr_assert_neq(e->msg[0], '\0');
}

/* Apply the patch's only (update) section to old; returns malloc'd text. */
static char *apply_ok(const char *patch, const char *old)
{
	struct moat_patch p = parse_ok(patch);
	struct moat_err e = {0};
	cr_assert_eq(p.n, 1);
	cr_assert_eq(p.files[0].kind, MOAT_PATCH_UPDATE);
	char *out = NULL;
	size_t len = 0;
	int r = moat_patch_apply(&p.files[0], old, strlen(old), &out, &len, &e);
	cr_assert_eq(r, 0, "apply failed: %s", e.msg);
	cr_assert_not_null(out);
	cr_assert_eq(strlen(out), len, "out_len must match the NUL");
	moat_patch_free(&p);
	return out;
}

static void expect_apply(const char *patch, const char *old, const char *want)
{
	char *got = apply_ok(patch, old);
	cr_assert_str_eq(got, want, "\n--- got:\n%s--- want:\n%s", got, want);
	free(got);
}

/* Apply must fail and leave *out alone; the message is returned in *e. */
static void apply_bad(const char *patch, const char *old, struct moat_err *e)
{
	struct moat_patch p = parse_ok(patch);
	char *out = (char *)"untouched";
	size_t len = 77;
	memset(e, 0, sizeof *e);
	int r = moat_patch_apply(&p.files[0], old, strlen(old), &out, &len, e);
	cr_assert_eq(r, -1, "apply should fail");
	cr_assert_str_eq(out, "untouched");
	cr_assert_eq(len, 77);
	cr_assert_eq(e->kind, MOAT_E_USAGE);
	moat_patch_free(&p);
}

/* ---- parsing -------------------------------------------------------------- */

Test(patch_parse, add_file)
{
	struct moat_patch p = parse_ok("*** Begin Patch\n"
				       "*** Add File:   docs/hello.txt  \n"
				       "+Hello\n"
				       "+\n"
				       "+  world\n"
				       "*** End Patch\n");
	cr_assert_eq(p.n, 1);
	cr_assert_eq(p.files[0].kind, MOAT_PATCH_ADD);
	cr_assert_str_eq(p.files[0].path, "docs/hello.txt");
	cr_assert_null(p.files[0].move_to);
	cr_assert_str_eq(p.files[0].content, "Hello\n\n  world\n");
	cr_assert_eq(p.files[0].content_len, strlen("Hello\n\n  world\n"));
	cr_assert_eq(p.files[0].nhunks, 0);
	cr_assert_eq(p.files[0].line, 2);
	moat_patch_free(&p);
	cr_assert_null(p.files);
	cr_assert_eq(p.n, 0);
}

Test(patch_parse, add_file_empty_and_blank_lines)
{
	/* No '+' line: an empty file. A blank line between '+' lines is an
	 * empty line; blank lines after the last one separate sections. */
	struct moat_patch p = parse_ok("*** Begin Patch\n"
				       "*** Add File: empty.py\n"
				       "*** Add File: b.txt\n"
				       "+one\n"
				       "\n"
				       "+three\n"
				       "\n"
				       "\n"
				       "*** End Patch");
	cr_assert_eq(p.n, 2);
	cr_assert_eq(p.files[0].kind, MOAT_PATCH_ADD);
	cr_assert_eq(p.files[0].content_len, 0);
	cr_assert_str_eq(p.files[0].content, "");
	cr_assert_str_eq(p.files[1].content, "one\n\nthree\n");
	moat_patch_free(&p);
}

Test(patch_parse, delete_and_sections_in_order)
{
	struct moat_patch p = parse_ok("*** Begin Patch\n"
				       "*** Add File: a\n"
				       "+x\n"
				       "*** Delete File: old/b.c\n"
				       "*** Update File: c\n"
				       "@@\n"
				       "-1\n"
				       "+2\n"
				       "*** Delete File: d\n"
				       "*** End Patch\n");
	cr_assert_eq(p.n, 4);
	cr_assert_eq(p.files[0].kind, MOAT_PATCH_ADD);
	cr_assert_eq(p.files[1].kind, MOAT_PATCH_DELETE);
	cr_assert_str_eq(p.files[1].path, "old/b.c");
	cr_assert_null(p.files[1].content);
	cr_assert_eq(p.files[1].nhunks, 0);
	cr_assert_eq(p.files[2].kind, MOAT_PATCH_UPDATE);
	cr_assert_eq(p.files[2].nhunks, 1);
	cr_assert_null(p.files[2].content);
	cr_assert_eq(p.files[3].kind, MOAT_PATCH_DELETE);
	cr_assert_str_eq(p.files[3].path, "d");
	cr_assert_eq(p.files[3].line, 9);
	moat_patch_free(&p);
}

Test(patch_parse, update_with_move_and_hunk_count)
{
	struct moat_patch p = parse_ok("*** Begin Patch\n"
				       "*** Update File: src/app.py\n"
				       "*** Move to: src/main.py\n"
				       "@@ def greet():\n"
				       "-print(\"Hi\")\n"
				       "+print(\"Hello, world!\")\n"
				       "@@ def bye():\n"
				       " x\n"
				       "*** End Patch\n");
	cr_assert_eq(p.n, 1);
	cr_assert_str_eq(p.files[0].path, "src/app.py");
	cr_assert_str_eq(p.files[0].move_to, "src/main.py");
	cr_assert_eq(p.files[0].nhunks, 2);
	moat_patch_free(&p);
}

Test(patch_parse, lenient_markers_crlf_and_surrounding_blank_lines)
{
	/* Indented markers, CRLF line endings, blank lines around: all fine,
	 * and hunk text carries no '\r'. */
	const char *patch = "\n  \r\n  *** Begin Patch  \r\n"
			    "*** Update File: f.txt\r\n"
			    "@@\r\n"
			    "-a\r\n"
			    "+b\r\n"
			    "  *** End Patch\r\n\r\n\n";
	expect_apply(patch, "a\n", "b\n");
	struct moat_patch p = parse_ok("*** Begin Patch\r\n*** Add File: x\r\n"
				       "+1\r\n*** End Patch\r\n");
	cr_assert_str_eq(p.files[0].content, "1\n");
	moat_patch_free(&p);
}

/* ---- malformed patches ---------------------------------------------------- */

Test(patch_errors, missing_begin)
{
	struct moat_err e;
	parse_bad("*** Update File: a\n@@\n-x\n+y\n*** End Patch\n", &e);
	assert_has(e.msg, "line 1:");
	assert_has(e.msg, "expected '*** Begin Patch'");
	assert_has(e.msg, "'*** Update File: a'");
}

Test(patch_errors, missing_end)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n*** Add File: a\n+x\n+y\n", &e);
	assert_has(e.msg, "line 4:");
	assert_has(e.msg, "missing '*** End Patch'");
	parse_bad("*** Begin Patch\n*** Update File: a\n@@\n-x\n+y", &e);
	assert_has(e.msg, "line 5:");
	assert_has(e.msg, "missing '*** End Patch'");
}

Test(patch_errors, empty_patch)
{
	struct moat_err e;
	parse_bad("", &e);
	assert_has(e.msg, "line 1:");
	assert_has(e.msg, "empty patch");
	parse_bad("  \n\n\t\n", &e);
	assert_has(e.msg, "empty patch");
	/* Begin and End but nothing in between. */
	parse_bad("*** Begin Patch\n\n*** End Patch\n", &e);
	assert_has(e.msg, "line 3:");
	assert_has(e.msg, "no '*** Add File:'");
}

Test(patch_errors, unknown_directive)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n"
		  "*** Add File: a\n"
		  "+x\n"
		  "*** Rename File: a\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 4:");
	assert_has(e.msg, "unknown directive '*** Rename File: a'");
	/* Inside an update section too. */
	parse_bad("*** Begin Patch\n"
		  "*** Update File: a\n"
		  "@@\n"
		  "-x\n"
		  "*** Frobnicate\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 5:");
	assert_has(e.msg, "'*** Frobnicate'");
}

Test(patch_errors, add_line_without_plus)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n"
		  "*** Add File: notes.md\n"
		  "+first\n"
		  "second\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 4:");
	assert_has(e.msg, "notes.md");
	assert_has(e.msg, "must start with '+'");
	assert_has(e.msg, "'second'");
}

Test(patch_errors, update_without_hunks)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n"
		  "*** Update File: a.c\n"
		  "*** Delete File: b.c\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 2:");
	assert_has(e.msg, "'a.c' has no hunks");
	/* A "@@" with no lines under it. */
	parse_bad("*** Begin Patch\n"
		  "*** Update File: a.c\n"
		  "@@ int main(void)\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 3:");
	assert_has(e.msg, "hunk has no lines");
}

Test(patch_errors, bad_hunk_lines)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n"
		  "*** Update File: a.c\n"
		  "@@\n"
		  " ok\n"
		  "oops no prefix\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 5:");
	assert_has(e.msg, "'a.c'");
	assert_has(e.msg, "'oops no prefix'");
	/* After "*** End of File" a new hunk needs its "@@". */
	parse_bad("*** Begin Patch\n"
		  "*** Update File: a.c\n"
		  "-x\n"
		  "*** End of File\n"
		  "-y\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 5:");
	assert_has(e.msg, "expected '@@'");
}

Test(patch_errors, misplaced_markers)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n"
		  "*** Delete File: a\n"
		  "*** Move to: b\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 3:");
	assert_has(e.msg, "must directly follow");
	parse_bad("*** Begin Patch\n"
		  "*** Update File: a\n"
		  "*** End of File\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 3:");
	assert_has(e.msg, "must follow a hunk's lines");
	parse_bad("*** Begin Patch\n"
		  "*** Delete File: a\n"
		  "-stray\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 3:");
	assert_has(e.msg, "'-stray'");
	parse_bad("*** Begin Patch\n"
		  "*** Delete File: a\n"
		  "*** End Patch\n"
		  "trailing junk\n",
		  &e);
	assert_has(e.msg, "line 4:");
	assert_has(e.msg, "after '*** End Patch'");
	parse_bad("*** Begin Patch\n*** Delete File:   \n*** End Patch\n", &e);
	assert_has(e.msg, "line 2:");
	assert_has(e.msg, "missing path");
}

Test(patch_errors, duplicate_paths)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n"
		  "*** Add File: a.txt\n"
		  "+1\n"
		  "*** Delete File: b\n"
		  "*** Delete File: a.txt\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 5:");
	assert_has(e.msg, "'a.txt' appears twice");
	assert_has(e.msg, "line 2");
	/* A move destination counts too. */
	parse_bad("*** Begin Patch\n"
		  "*** Add File: new.txt\n"
		  "+1\n"
		  "*** Update File: old.txt\n"
		  "*** Move to: new.txt\n"
		  "@@\n"
		  " x\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 5:");
	assert_has(e.msg, "'new.txt' appears twice");
	parse_bad("*** Begin Patch\n"
		  "*** Update File: same\n"
		  "*** Move to: same\n"
		  "@@\n"
		  " x\n"
		  "*** End Patch\n",
		  &e);
	assert_has(e.msg, "line 3:");
	assert_has(e.msg, "names the file being updated");
}

Test(patch_errors, limits)
{
	struct moat_err e;
	/* A 1 MiB + 1 line. */
	size_t n = (1u << 20) + 1;
	const char *head = "*** Begin Patch\n*** Add File: big\n+";
	const char *tail = "\n*** End Patch\n";
	char *t = malloc(strlen(head) + n + strlen(tail) + 1);
	cr_assert_not_null(t);
	strcpy(t, head);
	memset(t + strlen(head), 'x', n - 1);
	strcpy(t + strlen(head) + n - 1, tail);
	parse_bad(t, &e);
	assert_has(e.msg, "line 3:");
	assert_has(e.msg, "1 MiB");
	free(t);

	/* A patch over 16 MiB is refused before anything else. */
	n = (16u << 20) + 1;
	t = malloc(n);
	cr_assert_not_null(t);
	memset(t, '\n', n);
	struct moat_patch p = {NULL, 0};
	cr_assert_eq(moat_patch_parse(t, n, &p, &e), -1);
	assert_has(e.msg, "16 MiB");
	cr_assert_null(p.files);
	free(t);
}

Test(patch_errors, messages_escape_control_bytes_and_cut_long_lines)
{
	struct moat_err e;
	parse_bad("*** Begin Patch\n*** Bogus\x01\xff\n*** End Patch\n", &e);
	assert_has(e.msg, "line 2:");
	assert_has(e.msg, "'*** Bogus\\x01\\xff'");

	char line[4000];
	memset(line, 'y', sizeof line - 1);
	line[sizeof line - 1] = '\0';
	char t[4100];
	snprintf(t, sizeof t, "*** Begin Patch\n%s\n*** End Patch\n", line);
	parse_bad(t, &e);
	assert_has(e.msg, "line 2:");
	assert_has(e.msg, "yyy...'");
	cr_assert_lt(strlen(e.msg), 400);
}

/* ---- applying: basics ----------------------------------------------------- */

Test(patch_apply, simple_replace_keeps_rest)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a.py\n"
		     "@@\n"
		     " def f():\n"
		     "-    return 1\n"
		     "+    return 2\n"
		     "*** End Patch\n",
		     "import os\n\ndef f():\n    return 1\n\nprint(f())\n",
		     "import os\n\ndef f():\n    return 2\n\nprint(f())\n");
}

Test(patch_apply, first_hunk_without_header)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     " one\n"
		     "-two\n"
		     "+TWO\n"
		     "+2b\n"
		     " three\n"
		     "*** End Patch\n",
		     "one\ntwo\nthree\n", "one\nTWO\n2b\nthree\n");
}

Test(patch_apply, multiple_hunks_in_order)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "@@\n"
		     " 1\n"
		     "-2\n"
		     "+two\n"
		     " 3\n"
		     "@@\n"
		     " 7\n"
		     "-8\n"
		     "+eight\n"
		     "@@\n"
		     "-10\n"
		     "*** End Patch\n",
		     "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n",
		     "1\ntwo\n3\n4\n5\n6\n7\neight\n9\n");
}

Test(patch_apply, hunks_are_sought_after_the_previous_one)
{
	/* The second hunk's context comes before the first one's: with
	 * in-order search it cannot be found. */
	struct moat_err e;
	apply_bad("*** Begin Patch\n"
		  "*** Update File: a\n"
		  "@@\n"
		  "-d\n"
		  "+D\n"
		  "@@\n"
		  "-b\n"
		  "+B\n"
		  "*** End Patch\n",
		  "a\nb\nc\nd\n", &e);
	assert_has(e.msg, "a: could not find context");
	assert_has(e.msg, "hunk 2");
	assert_has(e.msg, "'b'");
}

Test(patch_apply, context_header_seeks_forward)
{
	/* Same body twice; "@@ def b():" selects the second. */
	const char *old = "def a():\n    x = 1\n    return x\n"
			  "def b():\n    x = 1\n    return x\n";
	expect_apply("*** Begin Patch\n"
		     "*** Update File: m.py\n"
		     "@@ def b():\n"
		     "-    x = 1\n"
		     "+    x = 2\n"
		     "*** End Patch\n",
		     old,
		     "def a():\n    x = 1\n    return x\n"
		     "def b():\n    x = 2\n    return x\n");
	/* Without the header the first one changes. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: m.py\n"
		     "@@\n"
		     "-    x = 1\n"
		     "+    x = 2\n"
		     "*** End Patch\n",
		     old,
		     "def a():\n    x = 2\n    return x\n"
		     "def b():\n    x = 1\n    return x\n");
}

Test(patch_apply, stacked_and_unified_headers)
{
	const char *old = "class A:\n  def f(self):\n    pass\n"
			  "class B:\n  def f(self):\n    pass\n";
	const char *want = "class A:\n  def f(self):\n    pass\n"
			   "class B:\n  def f(self):\n    return 1\n";
	expect_apply("*** Begin Patch\n"
		     "*** Update File: c.py\n"
		     "@@ class B:\n"
		     "@@   def f(self):\n"
		     "-    pass\n"
		     "+    return 1\n"
		     "*** End Patch\n",
		     old, want);
	/* A unified-diff range is ignored; git's function context after it
	 * is used as the header. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: c.py\n"
		     "@@ -4,3 +4,3 @@ class B:\n"
		     "   def f(self):\n"
		     "-    pass\n"
		     "+    return 1\n"
		     "*** End Patch\n",
		     old, want);
}

Test(patch_apply, missing_context_header_is_quoted)
{
	struct moat_err e;
	apply_bad("*** Begin Patch\n"
		  "*** Update File: src/m.py\n"
		  "@@ def nowhere():\n"
		  "-x\n"
		  "*** End Patch\n",
		  "x\n", &e);
	assert_has(e.msg, "src/m.py: could not find context '@@ def nowhere():'");
	assert_has(e.msg, "patch line 3");
}

Test(patch_apply, unmatched_hunk_names_file_and_quotes_lines)
{
	struct moat_err e;
	apply_bad("*** Begin Patch\n"
		  "*** Update File: lib/util.c\n"
		  "@@\n"
		  " int add(int a, int b)\n"
		  "-{ return a - b; }\n"
		  "+{ return a + b; }\n"
		  "*** End Patch\n",
		  "int add(int a, int b)\n{ return a * b; }\n", &e);
	assert_has(e.msg, "lib/util.c: could not find context");
	assert_has(e.msg, "patch line 3");
	assert_has(e.msg, "'int add(int a, int b)', '{ return a - b; }'");
	/* The added line is not part of what was sought. */
	cr_assert_null(strstr(e.msg, "a + b"));
}

/* ---- applying: end of file ------------------------------------------------ */

Test(patch_apply, end_of_file_anchors_at_the_end)
{
	/* "}" occurs twice; the anchored hunk takes the last one. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a.c\n"
		     "@@\n"
		     "-}\n"
		     "+}\n"
		     "+/* end */\n"
		     "*** End of File\n"
		     "*** End Patch\n",
		     "int f() {\n}\nint g() {\n}\n",
		     "int f() {\n}\nint g() {\n}\n/* end */\n");
	/* The same hunk without the anchor changes the first one. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a.c\n"
		     "@@\n"
		     "-}\n"
		     "+}\n"
		     "+/* end */\n"
		     "*** End Patch\n",
		     "int f() {\n}\nint g() {\n}\n",
		     "int f() {\n}\n/* end */\nint g() {\n}\n");
}

Test(patch_apply, end_of_file_falls_back_to_search)
{
	/* Anchored lines that are not at the end are still found. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "-b\n"
		     "+B\n"
		     "*** End of File\n"
		     "*** End Patch\n",
		     "a\nb\nc\n", "a\nB\nc\n");
	struct moat_err e;
	apply_bad("*** Begin Patch\n"
		  "*** Update File: a\n"
		  "-zz\n"
		  "*** End of File\n"
		  "*** End Patch\n",
		  "a\nb\n", &e);
	assert_has(e.msg, "a: could not find context at the end of the file");
	assert_has(e.msg, "'zz'");
}

Test(patch_apply, remove_last_line)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "@@\n"
		     " one\n"
		     "-two\n"
		     "*** End of File\n"
		     "*** End Patch\n",
		     "one\ntwo\n", "one\n");
	/* Last line without a newline. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "-two\n"
		     "*** End Patch\n",
		     "one\ntwo", "one\n");
	/* Every line: the result is empty, not "\n". */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "-one\n"
		     "-two\n"
		     "*** End Patch\n",
		     "one\ntwo\n", "");
}

Test(patch_apply, pure_insertion_appends)
{
	const char *patch = "*** Begin Patch\n"
			    "*** Update File: a\n"
			    "@@\n"
			    "+x\n"
			    "+y\n"
			    "*** End Patch\n";
	expect_apply(patch, "a\nb\n", "a\nb\nx\ny\n");
	expect_apply(patch, "a\nb", "a\nb\nx\ny\n");
	expect_apply(patch, "", "x\ny\n");
}

Test(patch_apply, pure_insertion_after_context_header)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a.py\n"
		     "@@ def f():\n"
		     "+    print('in f')\n"
		     "*** End Patch\n",
		     "def f():\n    pass\ndef g():\n    pass\n",
		     "def f():\n    print('in f')\n    pass\ndef g():\n    pass\n");
}

/* ---- applying: fuzz ------------------------------------------------------- */

Test(patch_apply, trailing_whitespace_fuzz)
{
	/* The file has trailing blanks the patch lacks; the kept context
	 * line stays as the file had it. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "@@\n"
		     " keep\n"
		     "-old\n"
		     "+new\n"
		     "*** End Patch\n",
		     "keep   \nold\t\nz\n", "keep   \nnew\nz\n");
}

Test(patch_apply, leading_whitespace_fuzz)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a.py\n"
		     "@@\n"
		     " if x:\n"
		     "-  y()\n"
		     "+  z()\n"
		     "*** End Patch\n",
		     "\tif x:\n\t\ty()\n", "\tif x:\n  z()\n");
}

Test(patch_apply, exact_match_preferred_over_fuzzy)
{
	/* "  x" (fuzzy) comes first, "x" (exact) later: exact wins. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "-x\n"
		     "+X\n"
		     "*** End Patch\n",
		     "  x\nm\nx\n", "  x\nm\nX\n");
}

Test(patch_apply, unicode_punctuation_fuzz)
{
	/* The file has typographic quotes, an en dash and a no-break space;
	 * the patch writes ASCII. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: doc.md\n"
		     "@@\n"
		     " say \"hi\" - it's 'fine'\n"
		     "-old line\n"
		     "+new line\n"
		     "*** End Patch\n",
		     "say \u201chi\u201d \u2013 it\u2019s\u00a0\u2018fine\u2019\n"
		     "old line\n",
		     "say \u201chi\u201d \u2013 it\u2019s\u00a0\u2018fine\u2019\n"
		     "new line\n");
}

Test(patch_apply, trailing_blank_context_is_dropped_when_needed)
{
	/* The blank line separating hunks is parsed as an empty context line;
	 * there is no blank line after "b" in the file, so it is retried
	 * without it. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "@@\n"
		     "-b\n"
		     "+B\n"
		     "\n"
		     "@@\n"
		     "-d\n"
		     "+D\n"
		     "*** End Patch\n",
		     "a\nb\nc\nd\n", "a\nB\nc\nD\n");
	/* When the blank line is there it is matched and kept. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "-b\n"
		     "+B\n"
		     "\n"
		     "*** End Patch\n",
		     "b\nx\nb\n\ny\n", "b\nx\nB\n\ny\n");
}

/* ---- applying: newlines --------------------------------------------------- */

Test(patch_apply, result_ends_with_newline)
{
	/* A file without a final newline gets one even when the change is
	 * elsewhere; blank lines at the end are kept. */
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "-a\n"
		     "+A\n"
		     "*** End Patch\n",
		     "a\nb\nc", "A\nb\nc\n");
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "-a\n"
		     "+A\n"
		     "*** End Patch\n",
		     "a\nb\n\n", "A\nb\n\n");
}

Test(patch_apply, crlf_file_stays_crlf)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: w.txt\n"
		     "@@\n"
		     " one\n"
		     "-two\n"
		     "+TWO\n"
		     "+2.5\n"
		     " three\n"
		     "*** End Patch\n",
		     "one\r\ntwo\r\nthree\r\nfour",
		     "one\r\nTWO\r\n2.5\r\nthree\r\nfour\r\n");
}

Test(patch_apply, move_to_applies_like_update)
{
	struct moat_patch p = parse_ok("*** Begin Patch\n"
				       "*** Update File: a.txt\n"
				       "*** Move to: dir/b.txt\n"
				       "@@\n"
				       "-x\n"
				       "+y\n"
				       "*** End Patch\n");
	struct moat_err e = {0};
	char *out = NULL;
	size_t len = 0;
	cr_assert_eq(moat_patch_apply(&p.files[0], "x\n", 2, &out, &len, &e),
		     0, "%s", e.msg);
	cr_assert_str_eq(p.files[0].move_to, "dir/b.txt");
	cr_assert_eq(len, 2);
	cr_assert_str_eq(out, "y\n");
	free(out);
	moat_patch_free(&p);
}

Test(patch_apply, pure_move_keeps_the_bytes)
{
	/* A Move to without hunks is a rename: the content is not touched,
	 * not even its missing final newline or its CRLFs. */
	struct moat_patch p = parse_ok("*** Begin Patch\n"
				       "*** Update File: a.txt\n"
				       "*** Move to: dir/b.txt\n"
				       "*** End Patch\n");
	cr_assert_eq(p.files[0].nhunks, 0);
	struct moat_err e = {0};
	char *out = NULL;
	size_t len = 0;
	const char old[] = "x\r\ny\0z";
	cr_assert_eq(moat_patch_apply(&p.files[0], old, sizeof old - 1, &out, &len, &e), 0,
		     "%s", e.msg);
	cr_assert_eq(len, sizeof old - 1);
	cr_assert(memcmp(out, old, len) == 0);
	free(out);
	moat_patch_free(&p);
}

Test(patch_apply, refuses_non_update_sections)
{
	struct moat_patch p = parse_ok("*** Begin Patch\n"
				       "*** Delete File: gone.txt\n"
				       "*** End Patch\n");
	struct moat_err e = {0};
	char *out = NULL;
	size_t len = 0;
	cr_assert_eq(moat_patch_apply(&p.files[0], "x\n", 2, &out, &len, &e),
		     -1);
	assert_has(e.msg, "gone.txt");
	assert_has(e.msg, "not an '*** Update File:'");
	cr_assert_null(out);
	moat_patch_free(&p);
}

Test(patch_apply, context_only_hunk_is_a_checked_no_op)
{
	expect_apply("*** Begin Patch\n"
		     "*** Update File: a\n"
		     "@@\n"
		     " b\n"
		     "*** End Patch\n",
		     "a\nb\n", "a\nb\n");
	struct moat_err e;
	apply_bad("*** Begin Patch\n"
		  "*** Update File: a\n"
		  "@@\n"
		  " q\n"
		  "*** End Patch\n",
		  "a\nb\n", &e);
	assert_has(e.msg, "a: could not find context");
}
