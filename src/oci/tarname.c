/* Untrusted tar member names: see tarname.h. */
#include "tarname.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

int oci_tar_name_clean(const char *in, char *out, size_t cap, struct moat_err *e)
{
	if (!in || !*in)
		return moat_err_set(e, MOAT_E_USAGE, 0, "tar entry with an empty name");
	if (in[0] == '/')
		return moat_err_set(e, MOAT_E_USAGE, 0, "tar entry \"%.200s\": absolute name refused", in);
	size_t o = 0;
	const char *p = in;
	while (*p) {
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == 0) /* "a//b"; a trailing "/" ends the loop below */
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "tar entry \"%.200s\": empty path component refused", in);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "tar entry \"%.200s\": \"..\" refused", in);
		if (n > NAME_MAX)
			return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "tar entry \"%.200s\"", in);
		if (!(n == 1 && p[0] == '.')) {
			if (o + (o ? 1 : 0) + n + 1 > cap)
				return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG,
						    "tar entry \"%.200s\"", in);
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		if (!end)
			break;
		p = end + 1; /* "a/" ends here with *p == 0: a directory's slash */
	}
	if (cap == 0)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "tar entry \"%.200s\"", in);
	out[o] = 0;
	return 0;
}
