/* Layer tar -> overlay lower directory, and back: see unpack.h. */
#define _GNU_SOURCE
#include "unpack.h"

#include <errno.h>

int oci_unpack_layer(int fd, const char *dst, const struct oci_unpack_opts *o,
		     char diff_id[OCI_DIGEST_LEN + 1], struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, ENOSYS, "unpack %s", dst);
}

int oci_pack_layer(int dirfd, int out_fd, char digest[OCI_DIGEST_LEN + 1],
		   char diff_id[OCI_DIGEST_LEN + 1], int64_t *size, struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, ENOSYS, "pack layer");
}
