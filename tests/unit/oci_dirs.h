/* For the OCI unit tests: what a store directory holds, read on the host. */
#ifndef MOAT_TEST_OCI_DIRS_H
#define MOAT_TEST_OCI_DIRS_H

#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* Entries of root/sub (not . and ..). */
static inline size_t oci_dir_count(const char *root, const char *sub)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", root, sub);
	DIR *d = opendir(p);
	cr_assert_not_null(d, "%s", p);
	size_t n = 0;
	for (struct dirent *de; (de = readdir(d));)
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

#endif
