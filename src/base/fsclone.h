/* Cheap copies of a directory tree: the storage under moat serve's
 * sandboxes and snapshots. One backend is chosen at the daemon's start by
 * probing the data directory (moat doctor reports it):
 *
 *   btrfs    the data dir is on btrfs and subvolumes can be made, snapshot
 *            and destroyed there: every sandbox's fs/ is a subvolume, a
 *            snapshot a read-only snapshot of it, a restore or a fork a
 *            writable snapshot of that. O(1) whatever the bytes or files.
 *   reflink  FICLONE works (xfs with reflink=1, btrfs without subvolume
 *            rights): a tree walk whose files share their data with the
 *            source. O(files), not O(bytes).
 *   copy     neither (plain ext4): a tree walk that copies every byte
 *            (copy_file_range). O(bytes).
 *
 * The tree walk (reflink, copy) goes by descriptors only (src/base/walk.h):
 * no symlink followed, no other mount entered (it is an error: a
 * sandbox's fs/ holds only its own files), modes, owners, times, the
 * xattrs user.* and trusted.overlay.* (an overlay upper's opaque dirs;
 * its whiteouts are 0/0 character devices, the only device kept) and
 * hard links within the tree. */
#ifndef MOAT_FSCLONE_H
#define MOAT_FSCLONE_H

#include <moat/err.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum moat_fsclone { MOAT_FSCLONE_COPY, MOAT_FSCLONE_REFLINK, MOAT_FSCLONE_BTRFS };

/* Which backend works in the directory open at dirfd (probed by making
 * and removing a few entries named .fsclone-probe-*). Never fails: copy
 * is the floor; why a better one is not used goes to why (may be NULL). */
enum moat_fsclone moat_fsclone_probe(int dirfd, char *why, size_t whylen);
/* "btrfs", "reflink", "copy" */
const char *moat_fsclone_name(enum moat_fsclone b);
/* One line: what a snapshot costs on it (and the advice on copy). */
const char *moat_fsclone_cost(enum moat_fsclone b);

/* An empty directory `name` in dirfd (a subvolume on btrfs), mode. */
int moat_fsclone_mkdir(enum moat_fsclone b, int dirfd, const char *name, mode_t mode,
		       struct moat_err *e);
/* Copy the tree src (in sdirfd: made by moat_fsclone_mkdir or a clone)
 * to dst (in ddirfd, must not exist, same filesystem for btrfs and
 * reflink). readonly: a frozen copy (btrfs: a read-only snapshot; else a
 * plain tree). skip: names directly under src not copied but made empty
 * with src's mode (an overlay's work/), NULL-terminated, or NULL; a
 * read-only btrfs snapshot keeps them, a writable one empties them.
 * size (may be NULL): the bytes copied (a tree walk), or -1 (btrfs: ask
 * moat_fsclone_size). On
 * failure nothing of dst is left. ENOSPC and EDQUOT keep their errno. */
int moat_fsclone_clone(enum moat_fsclone b, int sdirfd, const char *src, int ddirfd,
		       const char *dst, bool readonly, const char *const *skip, int64_t *size,
		       struct moat_err *e);
/* Remove `name` in dirfd, whatever made it: a subvolume (writable or
 * read-only) is destroyed, a directory holding subvolumes one level down
 * (sandboxes/<id> with fs/) loses them first, the rest is rm -rf
 * (moat_walk_rm, opening up mode-000 directories). 0 when gone or absent. */
int moat_fsclone_remove(int dirfd, const char *name);
/* Bytes the tree takes (sum of allocated blocks; a hard link once), or
 * -1 with errno. */
int64_t moat_fsclone_size(int dirfd, const char *name);

#endif
