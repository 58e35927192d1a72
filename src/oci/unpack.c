/* Layer tar -> overlay lower directory: see unpack.h.
 *
 * Two libarchive readers in a pipe: `raw` decompresses the blob (gzip,
 * zstd or none, told from the bytes) as one "raw" entry, and `tar` reads
 * the tar from what raw gives, through a callback that hashes every byte
 * (the diff_id) and counts them (max_bytes). What tar leaves after its
 * end-of-archive blocks is drained through the same hash, so the diff_id
 * is the sha256 of the whole uncompressed stream, in one pass.
 *
 * Safety: the tree is built below a descriptor of a fresh 0700 directory
 * that only this call writes; each entry's parent is opened with openat2
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), so a
 * symlink the tar planted is never followed, and the leaf is made with an
 * *at call that does not follow it either (O_EXCL | O_NOFOLLOW, mkdirat,
 * symlinkat, mknodat, linkat without AT_SYMLINK_FOLLOW). Symlink targets
 * are written as they are: nothing here follows them, and the sandbox
 * resolves them in its own root. */
#define _GNU_SOURCE
#include "unpack.h"

#include "tarname.h"

#include "base/cleanup.h"
#include "base/walk.h"

#include <archive.h>
#include <archive_entry.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define UNPACK_BUF (1u << 20)
#define OPQ ".wh..wh..opq"
#define WH ".wh."

/* A directory's mode and mtime, set when everything below it is made (a
 * read-only directory would refuse its children; their creation would
 * change its mtime). */
struct dirfix {
	char *path; /* "" for the root */
	mode_t mode;
	struct timespec mtime;
	bool has_mtime;
	size_t depth, seq;
};

struct unpack {
	const struct oci_unpack_opts *o;
	struct moat_err *e;
	int in_fd, rootfd;
	struct archive *raw, *tar;
	unsigned char *inbuf, *tarbuf;
	uint64_t in_bytes, tar_bytes, data_bytes;
	struct oci_sha256 h;
	bool over; /* max_bytes passed (the readers only see "-1") */
	/* the last parent opened (entries come grouped by directory) */
	char *ppath;
	int pfd;
	struct dirfix *dirs;
	size_t ndirs, capdirs;
	const char *name; /* the entry's name as the tar gives it, for errors */
};

static long sys_openat2(int dirfd, const char *path, int flags, uint64_t resolve)
{
	struct open_how how = {.flags = (uint64_t)flags, .mode = 0, .resolve = resolve};
	return syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* A directory below the root: never through a symlink, never out. */
static int open_beneath(int rootfd, const char *path, int flags)
{
	long fd;
	do
		fd = sys_openat2(rootfd, path, flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
				 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
	while (fd < 0 && errno == EAGAIN);
	return (int)fd;
}

static int fail(struct unpack *u, int errnum, const char *fmt, const char *what)
{
	if (what)
		return moat_err_set(u->e, MOAT_E_USAGE, errnum, "layer entry \"%.300s\": %s%s",
				    u->name, fmt, what);
	return moat_err_set(u->e, MOAT_E_USAGE, errnum, "layer entry \"%.300s\": %s", u->name, fmt);
}

static la_ssize_t raw_read(struct archive *a, void *arg, const void **buf)
{
	struct unpack *u = arg;
	ssize_t n;
	do
		n = read(u->in_fd, u->inbuf, UNPACK_BUF);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		archive_set_error(a, errno, "reading the layer blob");
		return -1;
	}
	u->in_bytes += (uint64_t)n;
	if (u->o->progress)
		u->o->progress(u->o->arg, u->in_bytes);
	*buf = u->inbuf;
	return n;
}

/* Uncompressed bytes: hashed and counted here, whoever asks for them. */
static la_ssize_t tar_pull(struct unpack *u, struct archive *a)
{
	la_ssize_t n = archive_read_data(u->raw, u->tarbuf, UNPACK_BUF);
	if (n < 0) {
		archive_set_error(a, archive_errno(u->raw) ? archive_errno(u->raw) : EIO,
				  "decompressing the layer: %s", archive_error_string(u->raw));
		return -1;
	}
	u->tar_bytes += (uint64_t)n;
	if (u->o->max_bytes && u->tar_bytes > u->o->max_bytes) {
		u->over = true;
		archive_set_error(a, EFBIG, "layer over max_bytes");
		return -1;
	}
	if (n > 0 && oci_sha256_update(&u->h, u->tarbuf, (size_t)n) < 0) {
		archive_set_error(a, ENOMEM, "sha256");
		return -1;
	}
	return n;
}

static la_ssize_t tar_read(struct archive *a, void *arg, const void **buf)
{
	struct unpack *u = arg;
	*buf = u->tarbuf;
	return tar_pull(u, a);
}

static void drop_parent(struct unpack *u)
{
	free(u->ppath);
	u->ppath = NULL;
	if (u->pfd >= 0)
		close(u->pfd);
	u->pfd = -1;
}

/* The parent directory of an entry (a cached descriptor, not to be
 * closed), made with mode 0755 where the tar did not list it. */
static int open_parent(struct unpack *u, const char *parent)
{
	if (!*parent)
		return u->rootfd;
	if (u->ppath && strcmp(u->ppath, parent) == 0)
		return u->pfd;
	drop_parent(u);
	int fd = open_beneath(u->rootfd, parent, O_PATH);
	if (fd < 0 && errno == ENOENT) {
		/* component by component, making what is missing */
		_cleanup_free_ char *p = strdup(parent);
		if (!p)
			return fail(u, ENOMEM, "parent", NULL);
		int cur = -1;
		for (char *c = p, *next; c; c = next) {
			next = strchr(c, '/');
			if (next)
				*next++ = 0;
			int base = cur >= 0 ? cur : u->rootfd;
			int nfd = open_beneath(base, c, O_PATH);
			if (nfd < 0 && errno == ENOENT) {
				if (mkdirat(base, c, 0755) < 0 && errno != EEXIST) {
					int err = errno;
					if (cur >= 0)
						close(cur);
					return fail(u, err, "making its parent directory", NULL);
				}
				nfd = open_beneath(base, c, O_PATH);
			}
			int err = errno;
			if (cur >= 0)
				close(cur);
			if (nfd < 0)
				return fail(u, err == ELOOP || err == ENOTDIR ? ENOTDIR : err,
					    "a parent is not a directory (a symlink is not followed)",
					    NULL);
			cur = nfd;
		}
		fd = cur;
	} else if (fd < 0) {
		int err = errno;
		return fail(u, err == ELOOP || err == ENOTDIR ? ENOTDIR : err,
			    "a parent is not a directory (a symlink is not followed)", NULL);
	}
	u->ppath = strdup(parent);
	if (!u->ppath) {
		close(fd);
		return fail(u, ENOMEM, "parent", NULL);
	}
	u->pfd = fd;
	return fd;
}

/* Make room for a new entry at name (the later entry of a tar wins). */
static int remove_existing(struct unpack *u, int pfd, const char *name)
{
	struct stat st;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : fail(u, errno, "replacing it", NULL);
	if (S_ISDIR(st.st_mode)) {
		/* the cached parent may be inside (it is never pfd's child
		 * when pfd is the cache itself) */
		if (pfd != u->pfd)
			drop_parent(u);
		if (moat_walk_rm(pfd, name, MOAT_WALK_OPEN_UP) < 0)
			return fail(u, errno, "replacing a directory", NULL);
		return 0;
	}
	if (unlinkat(pfd, name, 0) < 0 && errno != ENOENT)
		return fail(u, errno, "replacing it", NULL);
	return 0;
}

static bool is_whiteout_dev(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0);
}

/* The opaque markers on a directory: trusted.* for a root overlay (EPERM
 * unprivileged: skipped), user.* for the engine's userxattr mounts. */
static int set_opaque(struct unpack *u, int dirfd)
{
	if (fsetxattr(dirfd, "trusted.overlay.opaque", "y", 1, 0) < 0 && errno != EPERM)
		return fail(u, errno, "setting trusted.overlay.opaque", NULL);
	if (fsetxattr(dirfd, "user.overlay.opaque", "y", 1, 0) < 0)
		return fail(u, errno, "setting user.overlay.opaque", NULL);
	return 0;
}

static int opaque_at(struct unpack *u, int pfd, const char *name)
{
	_cleanup_close_ int fd = -1;
	if (name)
		fd = open_beneath(pfd, name, O_RDONLY);
	else
		fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return fail(u, errno, "opening the directory to make it opaque", NULL);
	return set_opaque(u, fd);
}

/* Only user.* from the tar, and not user.overlay.* (overlay would read
 * those as its own redirect/metacopy/whiteout markers). */
static int set_xattrs(struct unpack *u, struct archive_entry *ae, int fd)
{
	if (archive_entry_xattr_reset(ae) == 0)
		return 0;
	const char *name;
	const void *val;
	size_t len;
	while (archive_entry_xattr_next(ae, &name, &val, &len) == ARCHIVE_OK) {
		if (strncmp(name, "user.", 5) != 0 || strncmp(name, "user.overlay.", 13) == 0)
			continue;
		if (fsetxattr(fd, name, val, len, 0) < 0 && errno != ENOTSUP && errno != EPERM)
			return fail(u, errno, "setting xattr ", name);
	}
	return 0;
}

static void owner_of(struct unpack *u, struct archive_entry *ae, uid_t *uid, gid_t *gid)
{
	int64_t a = archive_entry_uid(ae), b = archive_entry_gid(ae);
	*uid = a >= 0 && a <= 65535 ? (uid_t)a : 0;
	*gid = b >= 0 && b <= 65535 ? (gid_t)b : 0;
}

static int chown_at(struct unpack *u, struct archive_entry *ae, int pfd, const char *name)
{
	if (!u->o->keep_owners)
		return 0;
	uid_t uid;
	gid_t gid;
	owner_of(u, ae, &uid, &gid);
	if (fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(u, errno, "setting its owner", NULL);
	return 0;
}

static int times_at(struct unpack *u, struct archive_entry *ae, int pfd, const char *name)
{
	if (!archive_entry_mtime_is_set(ae))
		return 0;
	struct timespec ts[2] = {
		{.tv_sec = archive_entry_mtime(ae), .tv_nsec = archive_entry_mtime_nsec(ae)},
		{.tv_sec = archive_entry_mtime(ae), .tv_nsec = archive_entry_mtime_nsec(ae)},
	};
	if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(u, errno, "setting its mtime", NULL);
	return 0;
}

static int defer_dir(struct unpack *u, const char *path, struct archive_entry *ae)
{
	if (u->ndirs == u->capdirs) {
		size_t cap = u->capdirs ? u->capdirs * 2 : 64;
		struct dirfix *d = realloc(u->dirs, cap * sizeof *d);
		if (!d)
			return fail(u, ENOMEM, "directory list", NULL);
		u->dirs = d;
		u->capdirs = cap;
	}
	struct dirfix *d = &u->dirs[u->ndirs];
	d->path = strdup(path);
	if (!d->path)
		return fail(u, ENOMEM, "directory list", NULL);
	d->mode = archive_entry_perm(ae) & 0777;
	d->has_mtime = archive_entry_mtime_is_set(ae);
	d->mtime.tv_sec = archive_entry_mtime(ae);
	d->mtime.tv_nsec = archive_entry_mtime_nsec(ae);
	d->depth = 0;
	for (const char *p = path; *p; p++)
		d->depth += *p == '/';
	d->depth += *path != 0;
	d->seq = u->ndirs++;
	return 0;
}

static int write_file(struct unpack *u, struct archive_entry *ae, int pfd, const char *name)
{
	int64_t size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : 0;
	if (size < 0)
		return fail(u, EINVAL, "negative size", NULL);
	u->data_bytes += (uint64_t)size;
	if (u->o->max_bytes && u->data_bytes > u->o->max_bytes) {
		u->over = true;
		return moat_err_set(u->e, MOAT_E_USAGE, EFBIG,
				    "layer entry \"%.300s\": files larger than max_bytes (%llu) in all",
				    u->name, (unsigned long long)u->o->max_bytes);
	}
	_cleanup_close_ int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
					0600);
	if (fd < 0 && errno == EEXIST) {
		if (remove_existing(u, pfd, name) < 0)
			return -1;
		fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return fail(u, errno, "creating it", NULL);
	for (;;) {
		const void *buf;
		size_t n;
		la_int64_t off;
		int r = archive_read_data_block(u->tar, &buf, &n, &off);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			if (u->over)
				return moat_err_set(u->e, MOAT_E_USAGE, EFBIG,
						    "layer larger than max_bytes (%llu uncompressed)",
						    (unsigned long long)u->o->max_bytes);
			return fail(u, archive_errno(u->tar), "reading its data: ",
				    archive_error_string(u->tar));
		}
		if (off < 0 || (uint64_t)off + n > (uint64_t)size)
			return fail(u, EINVAL, "data beyond its size", NULL);
		const char *p = buf;
		while (n) {
			ssize_t w = pwrite(fd, p, n, off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return fail(u, w < 0 ? errno : EIO, "writing it", NULL);
			p += w;
			off += w;
			n -= (size_t)w;
		}
	}
	/* a sparse file's hole at the end */
	if (ftruncate(fd, size) < 0)
		return fail(u, errno, "sizing it", NULL);
	if (u->o->keep_owners) {
		uid_t uid;
		gid_t gid;
		owner_of(u, ae, &uid, &gid);
		if (fchown(fd, uid, gid) < 0)
			return fail(u, errno, "setting its owner", NULL);
	}
	/* after fchown, which may clear bits itself; set-id and sticky off */
	if (fchmod(fd, archive_entry_perm(ae) & 0777) < 0)
		return fail(u, errno, "setting its mode", NULL);
	if (set_xattrs(u, ae, fd) < 0)
		return -1;
	if (archive_entry_mtime_is_set(ae)) {
		struct timespec ts[2] = {
			{.tv_sec = archive_entry_mtime(ae), .tv_nsec = archive_entry_mtime_nsec(ae)},
			{.tv_sec = archive_entry_mtime(ae), .tv_nsec = archive_entry_mtime_nsec(ae)},
		};
		if (futimens(fd, ts) < 0)
			return fail(u, errno, "setting its mtime", NULL);
	}
	return 0;
}

static int make_dir(struct unpack *u, struct archive_entry *ae, int pfd, const char *name,
		    const char *path)
{
	bool opaque = false;
	if (mkdirat(pfd, name, 0700) < 0) {
		if (errno != EEXIST)
			return fail(u, errno, "making it", NULL);
		struct stat st;
		if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return fail(u, errno, "making it", NULL);
		if (!S_ISDIR(st.st_mode)) {
			/* a whiteout of this name said: the lower's is gone;
			 * this layer's directory stays, opaque over the lower */
			opaque = is_whiteout_dev(&st);
			if (remove_existing(u, pfd, name) < 0)
				return -1;
			if (mkdirat(pfd, name, 0700) < 0)
				return fail(u, errno, "making it", NULL);
		}
	}
	_cleanup_close_ int fd = open_beneath(pfd, name, O_RDONLY);
	if (fd < 0)
		return fail(u, errno, "opening it", NULL);
	if (opaque && set_opaque(u, fd) < 0)
		return -1;
	if (u->o->keep_owners) {
		uid_t uid;
		gid_t gid;
		owner_of(u, ae, &uid, &gid);
		if (fchown(fd, uid, gid) < 0)
			return fail(u, errno, "setting its owner", NULL);
	}
	if (set_xattrs(u, ae, fd) < 0)
		return -1;
	return defer_dir(u, path, ae);
}

/* .wh.NAME: NAME of the lower layers is gone. What this layer has under
 * NAME, before or after the marker, stays (OCI image-spec, layer.md:
 * whiteouts apply to lower layers only); a directory of this layer then
 * becomes opaque, which hides the lower's one as deleting it would. */
static int whiteout(struct unpack *u, int pfd, const char *victim)
{
	struct stat st;
	if (fstatat(pfd, victim, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return opaque_at(u, pfd, victim);
		return 0;
	}
	if (errno != ENOENT)
		return fail(u, errno, "whiteout", NULL);
	if (mknodat(pfd, victim, S_IFCHR | 0000, makedev(0, 0)) < 0)
		return fail(u, errno, "making the whiteout (a 0/0 character device)", NULL);
	return 0;
}

static int hard_link(struct unpack *u, const char *target, int pfd, const char *name,
		     const char *path)
{
	char t[PATH_MAX];
	if (oci_tar_name_clean(target, t, sizeof t, u->e) < 0)
		return moat_err_prefix(u->e, "layer entry \"%.300s\": hard link", u->name);
	if (!*t || strcmp(t, path) == 0)
		return fail(u, EINVAL, "hard link to itself or the root refused", NULL);
	char *slash = strrchr(t, '/');
	const char *tname = t;
	_cleanup_close_ int tfd = -1;
	int tp = u->rootfd;
	if (slash) {
		*slash = 0;
		tname = slash + 1;
		tfd = open_beneath(u->rootfd, t, O_PATH);
		if (tfd < 0)
			return fail(u, errno, "hard link: its target is not an entry of this layer",
				    NULL);
		tp = tfd;
	}
	struct stat st;
	if (fstatat(tp, tname, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(u, errno, "hard link: its target is not an entry of this layer", NULL);
	if (S_ISDIR(st.st_mode))
		return fail(u, EPERM, "hard link to a directory refused", NULL);
	/* flags 0: a symlink target is linked itself, never followed */
	if (linkat(tp, tname, pfd, name, 0) < 0) {
		if (errno != EEXIST)
			return fail(u, errno, "hard link", NULL);
		if (remove_existing(u, pfd, name) < 0)
			return -1;
		if (linkat(tp, tname, pfd, name, 0) < 0)
			return fail(u, errno, "hard link", NULL);
	}
	return 0;
}

/* mknodat/symlinkat, replacing what a previous entry put there. */
static int make_node(struct unpack *u, int pfd, const char *name, mode_t mode, const char *link)
{
	for (int i = 0; i < 2; i++) {
		int r = link ? symlinkat(link, pfd, name) : mknodat(pfd, name, mode, makedev(0, 0));
		if (r == 0)
			return 0;
		if (errno != EEXIST || i)
			break;
		if (remove_existing(u, pfd, name) < 0)
			return -1;
	}
	return fail(u, errno, "making it", NULL);
}

static int entry(struct unpack *u, struct archive_entry *ae)
{
	u->name = archive_entry_pathname(ae);
	if (!u->name)
		return moat_err_set(u->e, MOAT_E_USAGE, EINVAL, "layer entry without a (readable) name");
	char path[PATH_MAX];
	if (oci_tar_name_clean(u->name, path, sizeof path, u->e) < 0)
		return moat_err_prefix(u->e, "layer");
	mode_t type = archive_entry_filetype(ae);
	const char *hl = archive_entry_hardlink(ae);
	if (!*path) { /* the layer's root ("./") */
		if (hl || type != AE_IFDIR)
			return fail(u, EINVAL, "the root is not a directory", NULL);
		if (u->o->keep_owners) {
			uid_t uid;
			gid_t gid;
			owner_of(u, ae, &uid, &gid);
			if (fchown(u->rootfd, uid, gid) < 0)
				return fail(u, errno, "setting its owner", NULL);
		}
		return defer_dir(u, "", ae);
	}
	char parent[PATH_MAX];
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t plen = slash ? (size_t)(slash - path) : 0;
	memcpy(parent, path, plen);
	parent[plen] = 0;
	/* a directory named .wh.* is no part of OCI: nothing made below it */
	for (const char *c = parent; *c;) {
		if (strncmp(c, WH, 4) == 0)
			return fail(u, EINVAL, "a parent named .wh.* refused", NULL);
		const char *n = strchr(c, '/');
		if (!n)
			break;
		c = n + 1;
	}
	bool wh = strncmp(base, WH, 4) == 0;
	if (wh && (hl || type != AE_IFREG))
		return fail(u, EINVAL, "a .wh.* name that is not a regular file refused", NULL);
	int pfd = open_parent(u, parent);
	if (pfd < 0)
		return -1;
	if (wh) {
		if (strcmp(base, OPQ) == 0)
			return opaque_at(u, pfd, NULL);
		if (strncmp(base, WH WH, 8) == 0) /* aufs's own bookkeeping */
			return 0;
		const char *victim = base + 4;
		if (!*victim || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0)
			return fail(u, EINVAL, "a whiteout of \"\", \".\" or \"..\" refused", NULL);
		return whiteout(u, pfd, victim);
	}
	if (hl)
		return hard_link(u, hl, pfd, base, path);
	switch (type) {
	case AE_IFREG:
		return write_file(u, ae, pfd, base);
	case AE_IFDIR:
		return make_dir(u, ae, pfd, base, path);
	case AE_IFLNK: {
		const char *target = archive_entry_symlink(ae);
		if (!target || !*target)
			return fail(u, EINVAL, "symlink with an empty target", NULL);
		if (make_node(u, pfd, base, 0, target) < 0 || chown_at(u, ae, pfd, base) < 0)
			return -1;
		return times_at(u, ae, pfd, base);
	}
	case AE_IFCHR:
		if (archive_entry_rdevmajor(ae) != 0 || archive_entry_rdevminor(ae) != 0) {
			char what[64];
			snprintf(what, sizeof what, "%u:%u", (unsigned)archive_entry_rdevmajor(ae),
				 (unsigned)archive_entry_rdevminor(ae));
			return fail(u, EPERM, "character device refused: ", what);
		}
		/* 0/0: already an overlay whiteout */
		return make_node(u, pfd, base, S_IFCHR | 0000, NULL);
	case AE_IFBLK:
		return fail(u, EPERM, "block device refused", NULL);
	case AE_IFIFO:
		if (make_node(u, pfd, base, S_IFIFO | 0600, NULL) < 0 || chown_at(u, ae, pfd, base) < 0)
			return -1;
		if (fchmodat(pfd, base, archive_entry_perm(ae) & 0777, AT_SYMLINK_NOFOLLOW) < 0)
			return fail(u, errno, "setting its mode", NULL);
		return times_at(u, ae, pfd, base);
	default:
		return fail(u, EINVAL, "unsupported entry type", NULL);
	}
}

static int dirfix_cmp(const void *a, const void *b)
{
	const struct dirfix *x = a, *y = b;
	if (x->depth != y->depth)
		return x->depth > y->depth ? -1 : 1; /* deepest first */
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Directory modes and mtimes, children before parents. A directory a
 * later entry replaced is skipped (nothing is followed to find it). */
static int fix_dirs(struct unpack *u)
{
	if (u->ndirs)
		qsort(u->dirs, u->ndirs, sizeof *u->dirs, dirfix_cmp);
	for (size_t i = 0; i < u->ndirs; i++) {
		struct dirfix *d = &u->dirs[i];
		_cleanup_close_ int fd = *d->path ? open_beneath(u->rootfd, d->path, O_RDONLY)
						  : openat(u->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
				continue;
			return moat_err_set(u->e, MOAT_E_SYSTEM, errno, "layer directory \"%.300s\"",
					    d->path);
		}
		if (fchmod(fd, d->mode) < 0)
			return moat_err_set(u->e, MOAT_E_SYSTEM, errno, "layer directory \"%.300s\"",
					    d->path);
		if (d->has_mtime) {
			struct timespec ts[2] = {d->mtime, d->mtime};
			if (futimens(fd, ts) < 0)
				return moat_err_set(u->e, MOAT_E_SYSTEM, errno,
						    "layer directory \"%.300s\"", d->path);
		}
	}
	return 0;
}

static int run(struct unpack *u)
{
	u->raw = archive_read_new();
	u->tar = archive_read_new();
	u->inbuf = malloc(UNPACK_BUF);
	u->tarbuf = malloc(UNPACK_BUF);
	if (!u->raw || !u->tar || !u->inbuf || !u->tarbuf)
		return moat_err_set(u->e, MOAT_E_SYSTEM, ENOMEM, "layer");
	if (archive_read_support_filter_gzip(u->raw) != ARCHIVE_OK ||
	    archive_read_support_filter_zstd(u->raw) != ARCHIVE_OK ||
	    archive_read_support_format_raw(u->raw) != ARCHIVE_OK ||
	    archive_read_support_format_tar(u->tar) != ARCHIVE_OK)
		return moat_err_set(u->e, MOAT_E_SYSTEM, 0, "libarchive: %s",
				    archive_error_string(u->raw));
	if (archive_read_open(u->raw, u, NULL, raw_read, NULL) != ARCHIVE_OK)
		return moat_err_set(u->e, MOAT_E_USAGE, archive_errno(u->raw), "layer blob: %s",
				    archive_error_string(u->raw));
	struct archive_entry *ae;
	int r = archive_read_next_header(u->raw, &ae);
	if (r != ARCHIVE_OK)
		return moat_err_set(u->e, MOAT_E_USAGE, 0, "layer blob: %s",
				    r == ARCHIVE_EOF ? "empty" : archive_error_string(u->raw));
	if (archive_read_open(u->tar, u, NULL, tar_read, NULL) != ARCHIVE_OK)
		goto tar_error;
	/* the root is 0755 unless the tar's "./" says otherwise (later) */
	struct archive_entry *root = archive_entry_new();
	if (!root)
		return moat_err_set(u->e, MOAT_E_SYSTEM, ENOMEM, "layer");
	archive_entry_set_perm(root, 0755);
	r = defer_dir(u, "", root);
	archive_entry_free(root);
	if (r < 0)
		return -1;
	for (uint64_t n = 0;; n++) {
		r = archive_read_next_header(u->tar, &ae);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN)
			goto tar_error;
		if (u->o->max_entries && n >= u->o->max_entries)
			return moat_err_set(u->e, MOAT_E_USAGE, EFBIG,
					    "layer has more than max_entries (%llu) entries",
					    (unsigned long long)u->o->max_entries);
		if (entry(u, ae) < 0)
			return -1;
	}
	/* the tar's trailing blocks, and whatever follows: in the diff_id */
	for (;;) {
		la_ssize_t n = tar_pull(u, u->tar);
		if (n < 0)
			goto tar_error;
		if (n == 0)
			break;
	}
	return fix_dirs(u);
tar_error:
	if (u->over)
		return moat_err_set(u->e, MOAT_E_USAGE, EFBIG,
				    "layer larger than max_bytes (%llu uncompressed)",
				    (unsigned long long)u->o->max_bytes);
	return moat_err_set(u->e, MOAT_E_USAGE, archive_errno(u->tar) > 0 ? archive_errno(u->tar) : 0,
			    "layer tar: %s", archive_error_string(u->tar));
}

static void unpack_free(struct unpack *u)
{
	if (u->tar)
		archive_read_free(u->tar);
	if (u->raw)
		archive_read_free(u->raw);
	free(u->inbuf);
	free(u->tarbuf);
	drop_parent(u);
	for (size_t i = 0; i < u->ndirs; i++)
		free(u->dirs[i].path);
	free(u->dirs);
	oci_sha256_free(&u->h);
	if (u->rootfd >= 0)
		close(u->rootfd);
}

int oci_unpack_layer(int fd, const char *dst, const struct oci_unpack_opts *o,
		     char diff_id[OCI_DIGEST_LEN + 1], struct moat_err *e)
{
	const char *slash = strrchr(dst, '/');
	const char *base = slash ? slash + 1 : dst;
	if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return moat_err_set(e, MOAT_E_USAGE, EINVAL, "layer directory \"%s\"", dst);
	_cleanup_free_ char *parent = slash ? (slash == dst ? strdup("/")
							     : strndup(dst, (size_t)(slash - dst)))
					    : strdup(".");
	if (!parent)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "layer");
	_cleanup_close_ int pfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "layer directory's parent %s", parent);
	struct stat st;
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return moat_err_set(e, MOAT_E_USAGE, EEXIST, "layer directory %s", dst);
	unsigned char rnd[8];
	if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "getrandom");
	char tmp[NAME_MAX + 1];
	if (snprintf(tmp, sizeof tmp, "%.200s.tmp-%02x%02x%02x%02x%02x%02x%02x%02x", base, rnd[0],
		     rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]) >= (int)sizeof tmp)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "layer directory %s", dst);
	if (mkdirat(pfd, tmp, 0700) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "layer directory %s/%s", parent, tmp);
	struct unpack u = {.o = o, .e = e, .in_fd = fd, .pfd = -1};
	u.rootfd = open_beneath(pfd, tmp, O_RDONLY);
	int rc = -1;
	if (u.rootfd < 0)
		moat_err_set(e, MOAT_E_SYSTEM, errno, "layer directory %s/%s", parent, tmp);
	else if (oci_sha256_init(&u.h) < 0)
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sha256");
	else if (run(&u) == 0) {
		if (oci_sha256_final(&u.h, diff_id) < 0)
			moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sha256");
		else if (renameat2(pfd, tmp, pfd, base, RENAME_NOREPLACE) < 0)
			moat_err_set(e, MOAT_E_SYSTEM, errno, "layer directory %s", dst);
		else
			rc = 0;
	}
	unpack_free(&u);
	if (rc < 0) {
		int saved = e ? e->errnum : 0;
		moat_walk_rm(pfd, tmp, MOAT_WALK_OPEN_UP);
		if (e)
			e->errnum = saved;
	}
	return rc;
}
