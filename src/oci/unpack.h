/* One layer blob (tar; gzip or zstd or none) into a directory for
 * overlayfs: OCI whiteouts (.wh.NAME) become overlay whiteouts (a 0/0
 * character device), opaque markers (.wh..wh..opq) the opaque xattrs
 * (trusted.overlay.opaque as root, and user.overlay.opaque, which the
 * engine's userxattr overlay reads). Hard links and long names kept;
 * device nodes, fifos' set-id bits, links out of the tree and names with
 * "..", absolute or NUL refused or stripped (set-id and sticky bits off;
 * devices and a link that leaves the layer are errors naming the entry).
 * Never writes outside dst, whatever the tar says: every create is
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS ...) from dst's fd.
 * Fuzzed (fuzz_unpack). */
#ifndef MOAT_OCI_UNPACK_H
#define MOAT_OCI_UNPACK_H

#include "digest.h"

#include <moat/err.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct oci_unpack_opts {
	bool keep_owners;   /* root: the tar's uids/gids (0..65535, else 0); else
			     * every file the caller's */
	uint64_t max_bytes; /* uncompressed bytes at most (tar bomb): EFBIG */
	uint64_t max_entries;
	void (*progress)(void *arg, uint64_t bytes_in);
	void *arg;
};

/* Unpack the blob read from fd into dst, which must not exist: the
 * tree is made as dst.tmp-<random> and renamed to dst when complete (a
 * failed unpack removes it). diff_id gets the sha256 of the uncompressed
 * tar, which the caller checks against the config's rootfs.diff_ids. */
int oci_unpack_layer(int fd, const char *dst, const struct oci_unpack_opts *o,
		     char diff_id[OCI_DIGEST_LEN + 1], struct moat_err *e);

/* The reverse, for export: the overlay tree at dirfd (an upper or a
 * frozen snapshot) as a gzip'd layer tar on out_fd, overlay whiteouts and
 * opaque directories turned back into OCI's; digest and diff_id of what
 * was written, size its length. */
int oci_pack_layer(int dirfd, int out_fd, char digest[OCI_DIGEST_LEN + 1],
		   char diff_id[OCI_DIGEST_LEN + 1], int64_t *size, struct moat_err *e);
/* The same with only the entry `only` directly under dirfd (and its tree)
 * in the layer, under its own name: a snapshot's workspace/ as a layer
 * whose files land in /workspace. */
int oci_pack_layer_only(int dirfd, const char *only, int out_fd,
			char digest[OCI_DIGEST_LEN + 1], char diff_id[OCI_DIGEST_LEN + 1],
			int64_t *size, struct moat_err *e);

#endif
