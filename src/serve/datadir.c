/* moat serve's default data directory: see datadir.h. */
#include "datadir.h"

#include <stdio.h>
#include <string.h>

static int put(char *out, size_t cap, struct moat_err *e, const char *dir, size_t dlen,
	       const char *tail)
{
	int w = snprintf(out, cap, "%.*s%s", (int)dlen, dir, tail);
	if (w < 0 || (size_t)w >= cap)
		return moat_err_set(e, MOAT_E_USAGE, 0, "default data directory %.*s%s: too long "
				    "(give --data DIR)", (int)dlen, dir, tail);
	return 0;
}

int serve_default_data_dir(uid_t euid, const char *(*env)(const char *name), char *out,
			   size_t cap, struct moat_err *e)
{
	const char *v = env("STATE_DIRECTORY");
	if (v && v[0] == '/')
		return put(out, cap, e, v, strcspn(v, ":"), "");
	if (euid == 0)
		return put(out, cap, e, "/var/lib/moat", 13, "");
	v = env("XDG_STATE_HOME");
	if (v && v[0] == '/')
		return put(out, cap, e, v, strlen(v), "/moat");
	v = env("HOME");
	if (v && v[0] == '/')
		return put(out, cap, e, v, strlen(v), "/.local/state/moat");
	return moat_err_set(e, MOAT_E_USAGE, 0, "no default data directory: HOME is not set "
			    "(give --data DIR)");
}
