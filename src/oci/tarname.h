/* Member names of untrusted tars (layers, image archives), made safe to
 * use relative to a directory: see oci_tar_name_clean. Pure; fuzzed
 * through fuzz_unpack and fuzz_layout. */
#ifndef MOAT_OCI_TARNAME_H
#define MOAT_OCI_TARNAME_H

#include <moat/err.h>

#include <stddef.h>

/* "./a/b/" -> "a/b": "." components and one trailing "/" dropped; an
 * empty name, an absolute one, a ".." component, an empty component
 * ("a//b"), a component over NAME_MAX or a result over cap are refused
 * (-1, e names the entry). The layer's root itself gives "". */
int oci_tar_name_clean(const char *in, char *out, size_t cap, struct moat_err *e);

#endif
