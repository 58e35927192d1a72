/* The entry stream: how file trees travel between the daemon and a
 * sandbox's agent (archive upload/download, manifest entries). The daemon
 * turns tar archives into this stream and back (libarchive stays outside
 * the sandbox); the agent only reads and writes this simple format, which
 * both sides validate.
 *
 * A stream is a sequence of records, all integers little-endian:
 *   u8  type      'f' regular file, 'd' directory, 'l' symlink
 *   u8  pad[3]    zero
 *   u32 mode      permission bits only (07777 & ~06000: no set-id)
 *   i64 mtime     seconds since the epoch
 *   u32 path_len  1..4095
 *   u64 size      file: content length; dir: 0; symlink: target length
 *   path bytes    relative, '/'-separated, no NUL, no leading '/', no
 *                 "." or ".." component, no empty component
 *   size bytes    file content or symlink target (no NUL, 1..4095)
 * Directories may be implied (a file's parents are created as needed). */
#ifndef MOAT_PROTO_ENTRIES_H
#define MOAT_PROTO_ENTRIES_H

#include <moat/err.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOAT_ENTRY_HDR 28
#define MOAT_ENTRY_PATH_MAX 4095

struct moat_entry {
	char type;           /* 'f', 'd', 'l' */
	uint32_t mode;
	int64_t mtime;
	const char *path;    /* points into the stream, NOT NUL-terminated */
	size_t path_len;
	const void *data;    /* content or link target, points into the stream */
	uint64_t size;
};

/* A growable byte buffer. */
struct moat_buf {
	char *p;
	size_t len, cap;
};
/* Append; returns -1 (ENOMEM) on failure. */
int moat_buf_add(struct moat_buf *b, const void *data, size_t len);
void moat_buf_free(struct moat_buf *b);

/* Is this a valid relative entry path (see above)? */
bool moat_entry_path_ok(const char *path, size_t len);

/* Append one record. Validates path, type, link target; fails with a
 * message naming the path. */
int moat_entry_put(struct moat_buf *b, const struct moat_entry *en,
		   struct moat_err *e);

/* Iterate: *off starts at 0. Returns 1 with *en filled, 0 at the clean end
 * of the stream, -1 on a malformed record (e names it; never reads past
 * len). */
int moat_entry_next(const void *stream, size_t len, size_t *off,
		    struct moat_entry *en, struct moat_err *e);

#endif
