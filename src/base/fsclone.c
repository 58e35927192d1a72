/* Cheap tree copies: see fsclone.h. */
#define _GNU_SOURCE
#include "fsclone.h"

#include "cleanup.h"
#include "walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define BTRFS_FIRST_INO 256 /* a subvolume's root directory */

const char *moat_fsclone_name(enum moat_fsclone b)
{
	return b == MOAT_FSCLONE_BTRFS ? "btrfs" : b == MOAT_FSCLONE_REFLINK ? "reflink" : "copy";
}

const char *moat_fsclone_cost(enum moat_fsclone b)
{
	switch (b) {
	case MOAT_FSCLONE_BTRFS:
		return "O(1): a btrfs subvolume snapshot, whatever the bytes or files";
	case MOAT_FSCLONE_REFLINK:
		return "O(files): a tree of reflinked files (data shared, not copied)";
	default:
		return "O(bytes): every byte is copied (plain ext4); put the data directory on "
		       "btrfs (O(1)) or xfs with reflink=1 (O(files)) for cheap snapshots";
	}
}

/* A descriptor an ioctl accepts for the directory dirfd/name (O_PATH
 * ones are refused by ioctl). */
static int open_real_dir(int dirfd, const char *name)
{
	return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* The btrfs ioctls take a last component in a directory: the directory
 * of path (relative to dirfd) opened, *base its last component. */
static int open_parent(int dirfd, const char *path, const char **base)
{
	const char *sl = strrchr(path, '/');
	*base = sl ? sl + 1 : path;
	if (!sl)
		return open_real_dir(dirfd, ".");
	char *par = strndup(path, (size_t)(sl - path));
	if (!par)
		return -1;
	int fd = open_real_dir(dirfd, par[0] ? par : "/");
	free(par);
	return fd;
}

static bool is_subvol(int fd)
{
	struct statfs sf;
	struct stat st;
	return fstatfs(fd, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC && fstat(fd, &st) == 0 &&
	       st.st_ino == BTRFS_FIRST_INO && S_ISDIR(st.st_mode);
}

/* ---- btrfs ---------------------------------------------------------------- */

static int btrfs_mkdir(int dirfd, const char *path, mode_t mode, struct moat_err *e)
{
	const char *name;
	_cleanup_close_ int d = open_parent(dirfd, path, &name);
	struct btrfs_ioctl_vol_args a = {0};
	if (strlen(name) >= sizeof a.name)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "subvolume %s", name);
	snprintf(a.name, sizeof a.name, "%s", name);
	if (d < 0 || ioctl(d, BTRFS_IOC_SUBVOL_CREATE, &a) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "btrfs subvolume %s", name);
	if (fchmodat(d, name, mode, 0) < 0) {
		int err = errno;
		moat_fsclone_remove(d, name);
		return moat_err_set(e, MOAT_E_SYSTEM, err, "chmod %s", name);
	}
	return 0;
}

static int btrfs_snap(int sdirfd, const char *src, int ddirfd, const char *dst, bool ro,
		      struct moat_err *e)
{
	_cleanup_close_ int s = open_real_dir(sdirfd, src);
	const char *dpath = dst;
	_cleanup_close_ int d = open_parent(ddirfd, dpath, &dst);
	if (s < 0 || d < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "snapshot of %s", src);
	if (!is_subvol(s))
		return moat_err_set(e, MOAT_E_SYSTEM, EINVAL, "%s is not a btrfs subvolume", src);
	struct btrfs_ioctl_vol_args_v2 a = {.fd = s, .flags = ro ? BTRFS_SUBVOL_RDONLY : 0};
	if (strlen(dst) >= sizeof a.name)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "snapshot %s", dst);
	snprintf(a.name, sizeof a.name, "%s", dst);
	if (ioctl(d, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "btrfs snapshot of %s as %s", src, dst);
	return 0;
}

static int btrfs_destroy(int dirfd, const char *path, int subfd)
{
	const char *name;
	_cleanup_close_ int d = open_parent(dirfd, path, &name);
	if (d < 0)
		return -1;
	struct btrfs_ioctl_vol_args_v2 a = {0};
	snprintf(a.name, sizeof a.name, "%s", name);
	if (ioctl(d, BTRFS_IOC_SNAP_DESTROY_V2, &a) == 0)
		return 0;
	/* without CAP_SYS_ADMIN (nor user_subvol_rm_allowed): empty it and
	 * rmdir, which an empty subvolume's owner may do; a read-only one is
	 * made writable first (its owner may) */
	__u64 flags = 0;
	if (ioctl(subfd, BTRFS_IOC_SUBVOL_GETFLAGS, &flags) == 0 && (flags & BTRFS_SUBVOL_RDONLY)) {
		flags &= ~(__u64)BTRFS_SUBVOL_RDONLY;
		if (ioctl(subfd, BTRFS_IOC_SUBVOL_SETFLAGS, &flags) < 0)
			return -1;
	}
	return moat_walk_rm(d, name, MOAT_WALK_OPEN_UP | MOAT_WALK_DEV_ONLY);
}

int moat_fsclone_remove(int dirfd, const char *name)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -1 : 0;
	_cleanup_close_ int fd = open_real_dir(dirfd, name);
	if (fd >= 0 && is_subvol(fd))
		return btrfs_destroy(dirfd, name, fd);
	if (fd >= 0) {
		/* subvolumes one level down (sandboxes/<id>/fs) go first: the
		 * walk does not cross into them */
		_cleanup_close_ int dfd = dup(fd);
		DIR *dp = dfd >= 0 ? fdopendir(dfd) : NULL;
		if (dp) {
			dfd = -1;
			struct dirent *de;
			while ((de = readdir(dp)))
				if (de->d_type == DT_DIR && strcmp(de->d_name, ".") &&
				    strcmp(de->d_name, "..")) {
					_cleanup_close_ int c = open_real_dir(fd, de->d_name);
					if (c >= 0 && is_subvol(c))
						btrfs_destroy(fd, de->d_name, c);
				}
			closedir(dp);
		}
	}
	return moat_walk_rm(dirfd, name, MOAT_WALK_OPEN_UP);
}

/* ---- the tree walk (reflink, copy) ------------------------------------- */

struct hlink {
	dev_t dev;
	ino_t ino;
	char *path; /* relative to the top of the copy */
};

struct copy {
	enum moat_fsclone b;
	int *stk;            /* destination directories by depth (0: the top) */
	size_t nstk;
	dev_t dev;           /* the source's device: nothing else is entered */
	const char *const *skip;
	struct hlink *links;
	size_t nlinks, caplinks;
	int64_t bytes;       /* moat_fsclone_size */
	struct moat_err *e;
};

static bool xattr_kept(const char *name)
{
	return !strncmp(name, "user.", 5) || !strncmp(name, "trusted.overlay.", 16);
}

/* user.* and trusted.overlay.* from s to d (both open, not O_PATH) */
static int copy_xattrs(int s, int d, const char *path, struct moat_err *e)
{
	char names[65536], val[65536];
	ssize_t n = flistxattr(s, names, sizeof names);
	if (n < 0)
		return errno == ENOTSUP ? 0 : moat_err_set(e, MOAT_E_SYSTEM, errno, "xattrs of %s", path);
	for (char *k = names; k < names + n; k += strlen(k) + 1) {
		if (!xattr_kept(k))
			continue;
		ssize_t vl = fgetxattr(s, k, val, sizeof val);
		if (vl < 0 || fsetxattr(d, k, val, (size_t)vl, 0) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "xattr %s of %s", k, path);
	}
	return 0;
}

/* owner, mode, times of d from st (after the xattrs: a chown clears set-id
 * bits, a read-only mode would refuse user xattrs) */
static int set_attrs(int d, const struct stat *st, const char *path, struct moat_err *e)
{
	struct stat have;
	if (fstat(d, &have) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", path);
	if ((have.st_uid != st->st_uid || have.st_gid != st->st_gid) &&
	    fchown(d, st->st_uid, st->st_gid) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "owner of %s", path);
	if (fchmod(d, st->st_mode & 07777) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mode of %s", path);
	struct timespec ts[2] = {st->st_atim, st->st_mtim};
	if (futimens(d, ts) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "times of %s", path);
	return 0;
}

/* an entry that is not opened (symlink, whiteout, fifo): owner and times by name */
static int set_attrs_at(int dir, const char *name, const struct stat *st, const char *path,
			struct moat_err *e)
{
	if (fchownat(dir, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0 &&
	    !(errno == EPERM && geteuid() != 0 && st->st_uid == geteuid()))
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "owner of %s", path);
	if (!S_ISLNK(st->st_mode) && fchmodat(dir, name, st->st_mode & 07777, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mode of %s", path);
	struct timespec ts[2] = {st->st_atim, st->st_mtim};
	if (utimensat(dir, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "times of %s", path);
	return 0;
}

static int copy_data(enum moat_fsclone b, int s, int d, off_t size, const char *path,
		     struct moat_err *e)
{
	if (b == MOAT_FSCLONE_REFLINK) {
		if (ioctl(d, FICLONE, s) == 0)
			return 0;
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "reflink of %s", path);
	}
	off_t left = size;
	while (left > 0) {
		ssize_t n = copy_file_range(s, NULL, d, NULL, (size_t)left, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "copy of %s", path);
		if (n == 0)
			break; /* shrank meanwhile: what is there is copied */
		left -= n;
	}
	return 0;
}

static const char *hlink_find(struct copy *c, const struct stat *st)
{
	for (size_t i = 0; i < c->nlinks; i++)
		if (c->links[i].dev == st->st_dev && c->links[i].ino == st->st_ino)
			return c->links[i].path;
	return NULL;
}

static int hlink_add(struct copy *c, const struct stat *st, const char *path)
{
	if (c->nlinks == c->caplinks) {
		size_t cap = c->caplinks ? c->caplinks * 2 : 16;
		struct hlink *n = realloc(c->links, cap * sizeof *n);
		if (!n)
			return -1;
		c->links = n;
		c->caplinks = cap;
	}
	char *p = strdup(path);
	if (!p)
		return -1;
	c->links[c->nlinks++] = (struct hlink){st->st_dev, st->st_ino, p};
	return 0;
}

static int push_dir(struct copy *c, size_t depth, int fd)
{
	if (depth >= c->nstk) {
		size_t n = depth * 2 + 8;
		int *s = realloc(c->stk, n * sizeof *s);
		if (!s)
			return -1;
		for (size_t i = c->nstk; i < n; i++)
			s[i] = -1;
		c->stk = s;
		c->nstk = n;
	}
	c->stk[depth] = fd;
	return 0;
}

static bool skipped(const struct copy *c, const struct moat_walk_ent *en)
{
	for (size_t i = 0; en->depth == 1 && c->skip && c->skip[i]; i++)
		if (!strcmp(c->skip[i], en->name))
			return true;
	return false;
}

static int copy_file(struct copy *c, const struct moat_walk_ent *en, int pd)
{
	const struct stat *st = en->st;
	struct moat_err *e = c->e;
	if (st->st_nlink > 1) {
		const char *first = hlink_find(c, st);
		if (first) {
			if (linkat(c->stk[0], first, pd, en->name, 0) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "link %s", en->path);
			return 0;
		}
	}
	_cleanup_close_ int s =
		openat(en->dirfd, en->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat now;
	if (s < 0 || fstat(s, &now) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", en->path);
	if (now.st_ino != st->st_ino || now.st_dev != st->st_dev || !S_ISREG(now.st_mode))
		return moat_err_set(e, MOAT_E_SYSTEM, ESTALE, "%s changed during the copy", en->path);
	_cleanup_close_ int d =
		openat(pd, en->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (d < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "create %s", en->path);
	if (copy_data(c->b, s, d, now.st_size, en->path, e) < 0 ||
	    copy_xattrs(s, d, en->path, e) < 0 || set_attrs(d, &now, en->path, e) < 0)
		return -1;
	if (st->st_nlink > 1 && hlink_add(c, st, en->path) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "%s", en->path);
	return 0;
}

static int copy_entry(struct copy *c, const struct moat_walk_ent *en)
{
	const struct stat *st = en->st;
	struct moat_err *e = c->e;
	int pd = c->stk[en->depth - 1];
	if (en->other_mount || st->st_dev != c->dev)
		return moat_err_set(e, MOAT_E_SYSTEM, EXDEV,
				    "%s is on another mount or subvolume: not copied", en->path);
	if (S_ISDIR(st->st_mode)) {
		if (mkdirat(pd, en->name, 0700) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "mkdir %s", en->path);
		int d = openat(pd, en->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (d < 0 || push_dir(c, en->depth, d) < 0) {
			if (d >= 0)
				close(d);
			return moat_err_set(e, MOAT_E_SYSTEM, errno ? errno : ENOMEM, "%s", en->path);
		}
		/* made empty, with its mode: work/ of an overlay; a directory
		 * we may not read (a mode-000 placeholder of the engine's,
		 * unprivileged: entering it would need a chmod of the sandbox's
		 * own files) */
		if (skipped(c, en) ||
		    (geteuid() != 0 && (st->st_mode & (S_IRUSR | S_IXUSR)) != (S_IRUSR | S_IXUSR))) {
			c->stk[en->depth] = -1;
			int rc = set_attrs(d, st, en->path, e);
			close(d);
			return rc < 0 ? -1 : MOAT_WALK_SKIP;
		}
		return 0;
	}
	if (S_ISREG(st->st_mode))
		return copy_file(c, en, pd);
	if (S_ISLNK(st->st_mode)) {
		if (st->st_size <= 0 || st->st_size > 65535)
			return moat_err_set(e, MOAT_E_SYSTEM, EINVAL, "symlink %s", en->path);
		_cleanup_free_ char *t = malloc((size_t)st->st_size + 1);
		ssize_t n = t ? readlinkat(en->dirfd, en->name, t, (size_t)st->st_size + 1) : -1;
		if (n < 0 || n > st->st_size)
			return moat_err_set(e, MOAT_E_SYSTEM, n < 0 ? errno : ESTALE, "read link %s",
					    en->path);
		t[n] = '\0';
		if (symlinkat(t, pd, en->name) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "symlink %s", en->path);
		return set_attrs_at(pd, en->name, st, en->path, e);
	}
	if (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0)) {
		/* an overlay whiteout (any user may make one since Linux 5.8) */
		if (mknodat(pd, en->name, S_IFCHR | 0600, makedev(0, 0)) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "whiteout %s", en->path);
		return set_attrs_at(pd, en->name, st, en->path, e);
	}
	if (S_ISFIFO(st->st_mode)) {
		if (mkfifoat(pd, en->name, 0600) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "fifo %s", en->path);
		return set_attrs_at(pd, en->name, st, en->path, e);
	}
	if (S_ISSOCK(st->st_mode))
		return 0; /* a socket is a live thing of its process: nothing to keep */
	return moat_err_set(e, MOAT_E_SYSTEM, EPERM, "%s is a device: not copied", en->path);
}

static int copy_cb(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct copy *c = arg;
	if (ev == MOAT_WALK_ENTRY) {
		if (!S_ISREG(en->st->st_mode) || en->st->st_nlink < 2 || !hlink_find(c, en->st))
			c->bytes += (int64_t)en->st->st_blocks * 512;
		return copy_entry(c, en);
	}
	/* a directory's contents are in: its xattrs, owner, mode and times */
	int d = c->stk[en->depth];
	c->stk[en->depth] = -1;
	if (d < 0)
		return 0;
	_cleanup_close_ int s =
		openat(en->dirfd, en->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc = s < 0 ? moat_err_set(c->e, MOAT_E_SYSTEM, errno, "%s", en->path)
		       : copy_xattrs(s, d, en->path, c->e) < 0 || set_attrs(d, en->st, en->path, c->e) < 0
			 ? -1 : 0;
	close(d);
	return rc;
}

static int tree_copy(enum moat_fsclone b, int sdirfd, const char *src, int ddirfd,
		     const char *dst, const char *const *skip, int64_t *size, struct moat_err *e)
{
	_cleanup_close_ int s = open_real_dir(sdirfd, src);
	struct stat st;
	if (s < 0 || fstat(s, &st) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", src);
	if (mkdirat(ddirfd, dst, 0700) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mkdir %s", dst);
	int d = open_real_dir(ddirfd, dst);
	if (d < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", dst);
	struct copy c = {.b = b, .dev = st.st_dev, .skip = skip, .e = e,
			 .bytes = (int64_t)st.st_blocks * 512};
	int rc = push_dir(&c, 0, d);
	if (rc < 0) {
		close(d);
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "copy of %s", src);
	}
	struct moat_walk_opt o = {.flags = 0, .fn = copy_cb, .arg = &c};
	rc = moat_walk(s, &o, NULL);
	if (rc < 0 && !e->msg[0])
		moat_err_set(e, MOAT_E_SYSTEM, errno, "walk of %s", src);
	if (rc == 0)
		rc = copy_xattrs(s, d, src, e) < 0 || set_attrs(d, &st, src, e) < 0 ? -1 : 0;
	if (size)
		*size = c.bytes;
	for (size_t i = 0; i < c.nstk; i++)
		if (c.stk[i] >= 0)
			close(c.stk[i]);
	free(c.stk);
	for (size_t i = 0; i < c.nlinks; i++)
		free(c.links[i].path);
	free(c.links);
	return rc;
}

/* ---- the interface ------------------------------------------------------ */

int moat_fsclone_mkdir(enum moat_fsclone b, int dirfd, const char *name, mode_t mode,
		       struct moat_err *e)
{
	if (b == MOAT_FSCLONE_BTRFS)
		return btrfs_mkdir(dirfd, name, mode, e);
	if (mkdirat(dirfd, name, 0700) < 0 || fchmodat(dirfd, name, mode, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mkdir %s", name);
	return 0;
}

/* the skipped names emptied in a writable btrfs snapshot */
static int empty_skipped(int ddirfd, const char *dst, const char *const *skip, struct moat_err *e)
{
	_cleanup_close_ int d = open_real_dir(ddirfd, dst);
	if (d < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", dst);
	for (size_t i = 0; skip && skip[i]; i++) {
		struct stat st;
		if (fstatat(d, skip[i], &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (moat_walk_rm(d, skip[i], MOAT_WALK_OPEN_UP) < 0 || mkdirat(d, skip[i], 0700) < 0 ||
		    fchmodat(d, skip[i], st.st_mode & 07777, 0) < 0 ||
		    fchownat(d, skip[i], st.st_uid, st.st_gid, 0) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "empty %s/%s", dst, skip[i]);
	}
	return 0;
}

int moat_fsclone_clone(enum moat_fsclone b, int sdirfd, const char *src, int ddirfd,
		       const char *dst, bool readonly, const char *const *skip, int64_t *size,
		       struct moat_err *e)
{
	int rc;
	if (size)
		*size = -1;
	if (b == MOAT_FSCLONE_BTRFS) {
		rc = btrfs_snap(sdirfd, src, ddirfd, dst, readonly, e);
		if (rc == 0 && !readonly)
			rc = empty_skipped(ddirfd, dst, skip, e);
		if (rc < 0 && errno != EEXIST)
			moat_fsclone_remove(ddirfd, dst);
		return rc;
	}
	rc = tree_copy(b, sdirfd, src, ddirfd, dst, skip, size, e);
	if (rc < 0 && e->errnum != EEXIST) {
		int err = e->errnum;
		moat_fsclone_remove(ddirfd, dst);
		errno = err;
	}
	return rc;
}

/* ---- size --------------------------------------------------------------- */

static int size_cb(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct copy *c = arg;
	if (ev != MOAT_WALK_ENTRY)
		return 0;
	if (en->st->st_nlink > 1 && !S_ISDIR(en->st->st_mode)) {
		if (hlink_find(c, en->st))
			return 0;
		if (hlink_add(c, en->st, "") < 0)
			return -1;
	}
	c->bytes += (int64_t)en->st->st_blocks * 512;
	return 0;
}

int64_t moat_fsclone_size(int dirfd, const char *name)
{
	_cleanup_close_ int s = open_real_dir(dirfd, name);
	struct stat st;
	if (s < 0 || fstat(s, &st) < 0)
		return -1;
	struct copy c = {.bytes = (int64_t)st.st_blocks * 512};
	struct moat_walk_opt o = {.flags = MOAT_WALK_DEV_ONLY, .fn = size_cb, .arg = &c};
	int rc = moat_walk(s, &o, NULL);
	for (size_t i = 0; i < c.nlinks; i++)
		free(c.links[i].path);
	free(c.links);
	return rc < 0 ? -1 : c.bytes;
}

/* ---- the probe ------------------------------------------------------------ */

enum moat_fsclone moat_fsclone_probe(int dirfd, char *why, size_t whylen)
{
	char a[64], b[64];
	snprintf(a, sizeof a, ".fsclone-probe-%d-a", (int)getpid());
	snprintf(b, sizeof b, ".fsclone-probe-%d-b", (int)getpid());
	moat_fsclone_remove(dirfd, a);
	moat_fsclone_remove(dirfd, b);
	struct statfs sf;
	_cleanup_close_ int d = open_real_dir(dirfd, ".");
	if (why && whylen)
		why[0] = '\0';
	if (d >= 0 && fstatfs(d, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC) {
		struct moat_err e = {0};
		struct stat st;
		bool ok = btrfs_mkdir(d, a, 0700, &e) == 0 &&
			  btrfs_snap(d, a, d, b, true, &e) == 0;
		/* both must go, or the backend is of no use here */
		ok = moat_fsclone_remove(d, b) == 0 && ok;
		ok = moat_fsclone_remove(d, a) == 0 && ok;
		ok = ok && fstatat(d, a, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
		     fstatat(d, b, &st, AT_SYMLINK_NOFOLLOW) < 0;
		if (ok)
			return MOAT_FSCLONE_BTRFS;
		if (why)
			snprintf(why, whylen, "btrfs subvolumes: %s", e.msg[0] ? e.msg : "cannot remove one");
	}
	enum moat_fsclone r = MOAT_FSCLONE_COPY;
	_cleanup_close_ int fa = openat(dirfd, a, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	_cleanup_close_ int fb = openat(dirfd, b, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	char blk[4096] = {1};
	if (fa >= 0 && fb >= 0 && write(fa, blk, sizeof blk) == (ssize_t)sizeof blk &&
	    fsync(fa) == 0 && ioctl(fb, FICLONE, fa) == 0)
		r = MOAT_FSCLONE_REFLINK;
	else if (why && !why[0])
		snprintf(why, whylen, "reflink (FICLONE): %s", strerror(errno));
	unlinkat(dirfd, a, 0);
	unlinkat(dirfd, b, 0);
	return r;
}
