/* Unit tests for src/base/tooltail.c: a tool's last stderr lines, bounded
 * and escaped for an error message. */
#include <criterion/criterion.h>

#include "base/tooltail.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *tail(const char *s)
{
	static char out[MOAT_TAIL_MAX + 1];
	moat_tail_quote(s, strlen(s), out, sizeof out);
	return out;
}

Test(tooltail, last_lines_joined)
{
	cr_assert_str_eq(tail("fatal: invalid reference: nope\n"), "fatal: invalid reference: nope");
	cr_assert_str_eq(tail("a\n\n  \nb\r\nc"), "a | b | c");
	cr_assert_str_eq(tail("1\n2\n3\n4\n5\n6\n7\n"), "... | 3 | 4 | 5 | 6 | 7");
	cr_assert_str_eq(tail(""), "");
	cr_assert_str_eq(tail("\n\n"), "");
}

Test(tooltail, escaped)
{
	cr_assert_str_eq(tail("a\x1b[31mb\x07\tc\\d\re\n"), "a\\x1b[31mb\\x07\\tc\\\\d\\re");
	cr_assert_str_eq(tail("\xc2\x9b" "2J \xe2\x80\xae" "x \xff\xc3\xa9\n"),
			 "\\u009b2J \\u202ex \\xff\xc3\xa9");
}

Test(tooltail, bounded)
{
	char big[4000];
	memset(big, 'x', sizeof big - 2);
	big[sizeof big - 2] = '\n';
	big[sizeof big - 1] = '\0';
	const char *t = tail(big);
	cr_assert_leq(strlen(t), MOAT_TAIL_MAX);
	cr_assert(strlen(t) > MOAT_TAIL_MAX - 8);
	cr_assert_str_eq(t + strlen(t) - 3, "...");
	/* escapes count against the bound too, and are never cut in half */
	memset(big, '\x1b', sizeof big - 2);
	t = tail(big);
	cr_assert_leq(strlen(t), MOAT_TAIL_MAX);
	cr_assert_str_eq(t + strlen(t) - 7, "\\x1b...");
	char small[8];
	moat_tail_quote("abcdefghij\n", 11, small, sizeof small);
	cr_assert_str_eq(small, "abcd...");
}

Test(tooltail, read_keeps_the_end)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	FILE *w = fdopen(p[1], "w");
	for (int i = 0; i < 2000; i++) /* more than a pipe's buffer */
		fprintf(w, "line %d\n", i);
	fclose(w);
	char out[MOAT_TAIL_MAX + 1];
	cr_assert_eq(moat_tail_read(p[0], out, sizeof out), 0);
	close(p[0]);
	cr_assert_str_eq(out, "... | line 1995 | line 1996 | line 1997 | line 1998 | line 1999");
}
