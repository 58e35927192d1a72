/* Import of OCI layouts, OCI archives and docker save tars; export: see layout.h. */
#define _GNU_SOURCE
#include "layout.h"

#include <errno.h>

int oci_import(const char *root, const char *path, const char *which, int64_t max_bytes,
	       oci_progress_cb progress, void *arg, struct oci_image *out, struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, ENOSYS, "import %s", path);
}

int oci_export(const char *root, const char *manifest, const char *name, int fd,
	       struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, ENOSYS, "export %s", manifest);
}
