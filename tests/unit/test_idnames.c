/* The agent's passwd/group parser (src/agent/idnames.c). */
#include "agent/idnames.h"

#include <criterion/criterion.h>
#include <string.h>

Test(idnames, passwd_and_group_lines)
{
	const char txt[] = "root:x:0:0:root:/root:/bin/bash\n"
			   "user:x:1000:1000::/home/user:/bin/sh\n"
			   "users:x:100:a,b\n" /* a group line: id is the third field too */
			   "nogroup:x:65534:";  /* no newline at the end */
	struct idname v[8];
	size_t n = idnames_parse(txt, sizeof txt - 1, v, 8);
	cr_assert_eq(n, 4);
	cr_assert_str_eq(v[0].name, "root");
	cr_assert_eq(v[0].id, 0);
	cr_assert_str_eq(v[1].name, "user");
	cr_assert_eq(v[1].id, 1000);
	cr_assert_eq(v[2].id, 100);
	cr_assert_str_eq(v[3].name, "nogroup");
	cr_assert_eq(v[3].id, 65534);
}

Test(idnames, bad_lines_skipped_and_bounded)
{
	const char txt[] = "\n"
			   "noid\n"
			   ":x:5:5\n"                              /* no name */
			   "a:x:-1:0\n"                            /* not a number */
			   "b:x:4294967296:0\n"                    /* over UINT_MAX */
			   "c:x:12x:0\n"
			   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:x:7:7\n" /* 33 bytes */
			   "caf\xe9:x:8:8\n"                       /* not UTF-8: cleaned */
			   "d:x:4294967295\n"
			   "e:x:9:9\n";
	struct idname v[8];
	size_t n = idnames_parse(txt, sizeof txt - 1, v, 2);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(v[0].name, "caf?");
	cr_assert_eq(v[0].id, 8);
	cr_assert_str_eq(v[1].name, "d");
	cr_assert_eq(v[1].id, 4294967295u);
	cr_assert_eq(idnames_parse(txt, sizeof txt - 1, v, 8), 3);
	cr_assert_eq(idnames_parse("x:y:1", 5, v, 0), 0);
}
