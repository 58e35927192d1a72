/* Tar archives <-> entry streams (proto/entries.h), in the daemon: the
 * agent inside a sandbox never sees a tar, libarchive never runs there. */
#ifndef MOAT_SERVE_ARCHIVE_H
#define MOAT_SERVE_ARCHIVE_H

#include "proto/entries.h"

#include <stddef.h>
#include <stdint.h>

struct moat_archive_limits {
	uint64_t max_total;   /* sum of file sizes; 0: 1 GiB */
	uint64_t max_entries; /* entries in the archive; 0: 100000 */
};

/* Untrusted tar (tar/ustar/pax/gnutar, optionally gzip, bzip2, xz or zstd
 * compressed) -> entry stream appended to *out. "./" prefixes and trailing
 * '/' are stripped, the entry "." is skipped, set-id bits are dropped.
 * Refused, with an error naming the entry and nothing appended: absolute
 * paths, ".." components, hard links, symlinks whose target is absolute or
 * lexically leaves the archive root, devices, FIFOs, sockets, duplicate
 * paths, entries below a file or symlink of the archive. e->errnum is
 * EFBIG when a limit is exceeded (lim NULL: defaults), EINVAL when the
 * archive is malformed or refused, ENOMEM when out of memory. */
int moat_archive_to_entries(const void *tar, size_t len,
			    const struct moat_archive_limits *lim,
			    struct moat_buf *out, struct moat_err *e);

/* Entry stream -> pax (ustar where it suffices) tar appended to *out;
 * deterministic: uid/gid 0, no user/group names, paths as given. The
 * stream is validated first; nothing is appended on failure. */
int moat_entries_to_archive(const void *stream, size_t len,
			    struct moat_buf *out, struct moat_err *e);

#endif
