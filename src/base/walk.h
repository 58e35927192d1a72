/* Walking a directory tree that someone else may have shaped (a sandbox's
 * workspace, a cloned repository): through directory descriptors only.
 *
 * Every entry is looked at with statx/openat relative to its parent's
 * descriptor (no full path is ever resolved, so no PATH_MAX), a symlink is
 * never followed (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW), a directory is checked
 * to be the inode that was listed, and another mount (mount id, or device)
 * is reported but not entered. Depth is bounded only by the filesystem: the
 * stack of directories lives on the heap, and beyond max_fds open levels
 * (half of them the deepest, half anchors spread over the depth) the
 * others are closed (their remaining listing kept in memory) and reopened
 * later by name from the nearest ancestor still open, each component with
 * O_NOFOLLOW and checked against its recorded device and inode. */
#ifndef MOAT_WALK_H
#define MOAT_WALK_H

#include <moat/err.h>

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

enum {
	/* directories the walker cannot read or write are given u+rwx
	 * through their descriptor (we own them: mode-000 placeholders, a
	 * sandbox's chmod 000) */
	MOAT_WALK_OPEN_UP = 1u << 0,
	/* errors skip the entry and the walk goes on (removal); the first
	 * one is returned at the end. Without it the walk stops at once. */
	MOAT_WALK_KEEP_GOING = 1u << 1,
	/* enter directories on other mounts too (only for walks inside the
	 * sandbox's own view, where nothing there is more secret) */
	MOAT_WALK_CROSS_MOUNTS = 1u << 2,
	/* "another mount" means another device only, not another mount of
	 * the same filesystem (a bind of a directory onto itself) */
	MOAT_WALK_DEV_ONLY = 1u << 3,
};

enum moat_walk_event {
	MOAT_WALK_ENTRY, /* an entry (before its contents, for a directory) */
	MOAT_WALK_LEAVE, /* a directory, after its contents */
};

/* what the callback returns besides 0 (go on) and -1 (stop: an error) */
#define MOAT_WALK_SKIP 1 /* do not enter this directory */

struct moat_walk_ent {
	int dirfd;             /* the parent directory, open */
	const char *name;      /* the entry's name in dirfd */
	const struct stat *st; /* its lstat */
	const char *path;      /* relative to the top: "a/b/c" */
	size_t path_len;
	size_t depth;          /* 1 for the top directory's entries */
	bool other_mount;      /* on another mount: never entered */
};

typedef int (*moat_walk_fn)(enum moat_walk_event ev, const struct moat_walk_ent *en,
			    void *arg);

struct moat_walk_opt {
	unsigned flags;
	moat_walk_fn fn;
	void *arg;
	size_t max_fds; /* levels kept open at once; 0 = RLIMIT_NOFILE / 8, 16..1024 */
};

/* Walk the directory open at topfd (kept open, not closed; any kind of
 * descriptor, O_PATH included), pre-order with a LEAVE event after each
 * directory's contents. 0 on success; -1 with errno and e (may be NULL)
 * set on the first error (or the callback's -1: e is then the callback's
 * to fill). */
int moat_walk(int topfd, const struct moat_walk_opt *o, struct moat_err *e);

/* rm -rf of `name` below dirfd (`name` may be a path: only its last
 * component is not followed; a non-directory is just unlinked). Nothing
 * below is followed or crossed into; flags may add MOAT_WALK_OPEN_UP and
 * MOAT_WALK_DEV_ONLY (KEEP_GOING is implied: everything removable goes).
 * 0 when it is gone (or was not there), -1 with errno of the first
 * failure. */
int moat_walk_rm(int dirfd, const char *name, unsigned flags);

#endif
