/* Finding moat's sibling binaries: see exe.h. */
#define _GNU_SOURCE
#include "exe.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int moat_exe_find(const char *name, char *out, size_t cap, struct moat_err *e)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "cannot find my own binary "
				    "(/proc/self/exe)");
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "/proc/self/exe: %s: not a path", self);
	*slash = '\0';
	/* beside us; then moat in bin looks in ../libexec/moat, and a helper
	 * in libexec/moat looks in ../../bin */
	size_t sl = strlen(self);
	bool in_libexec = sl >= 13 && !strcmp(self + sl - 13, "/libexec/moat");
	const char *const rel[] = {"", in_libexec ? "/../../bin" : "/../libexec/moat"};
	char tried[MOAT_ERR_MSG / 2] = "";
	for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
		char path[PATH_MAX];
		int w = snprintf(path, sizeof path, "%s%s/%s", self, rel[i], name);
		if (w < 0 || (size_t)w >= sizeof path)
			continue;
		moat_path_normalize(path);
		if (access(path, X_OK) == 0) {
			if (strlen(path) >= cap)
				return moat_err_set(e, MOAT_E_SYSTEM, ENAMETOOLONG, "%s", path);
			memcpy(out, path, strlen(path) + 1);
			return 0;
		}
		size_t tl = strlen(tried);
		snprintf(tried + tl, sizeof tried - tl, "%s%s", tl ? ", " : "", path);
	}
	return moat_err_set(e, MOAT_E_USAGE, 0, "cannot find %s: looked for %s (install moat "
			    "with `make install`, or run it from its build directory)",
			    name, tried);
}
