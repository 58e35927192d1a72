/* Tree walks through directory descriptors: see walk.h. */
#define _GNU_SOURCE
#include "walk.h"

#include "cleanup.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The default budget of descriptors: an eighth of what the process may
 * open, between 16 and 1024. */
static size_t default_fds(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1024;
	size_t n = (size_t)(rl.rlim_cur / 8);
	return n < 16 ? 16 : n > 1024 ? 1024 : n;
}

struct frame {
	char *name;      /* in the parent directory; NULL for the top */
	struct stat st;  /* as listed: a reopened directory must match it */
	int fd;          /* -1 while closed to spare descriptors */
	DIR *d;          /* the listing being read (owns fd), or NULL */
	char **rest;     /* what was left of the listing when d was closed */
	size_t nrest, next;
	size_t plen;     /* length of this directory's path in w->path */
	bool anchor;     /* counted as an anchor while open (see below) */
};

struct walker {
	const struct moat_walk_opt *o;
	struct frame *fr;
	size_t n, cap;
	/* Descriptors: a window of the deepest levels (nopen of at most
	 * max_open) and anchors, every stride-th level (nanchor of at most
	 * max_anchor; the stride doubles when they are too many), so that a
	 * reopen walks at most a stride of names: linear in the depth. */
	size_t nopen, max_open;
	size_t nanchor, max_anchor, stride;
	size_t lo;       /* no window frame in [1, lo) holds one */
	char *path;
	size_t pcap;
	uint64_t mnt;    /* the top's mount id (0: unknown, compare devices) */
	dev_t dev;
	int err;         /* first error (KEEP_GOING) */
};

/* lstat through statx, with the mount id when the kernel gives one */
static int stat_at(int dirfd, const char *name, int flags, struct stat *st, uint64_t *mnt)
{
	struct statx sx;
	if (statx(dirfd, name, flags | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
		  STATX_BASIC_STATS | STATX_MNT_ID, &sx) < 0) {
		if (errno != ENOSYS)
			return -1;
		*mnt = 0;
		return fstatat(dirfd, name, st, flags | AT_SYMLINK_NOFOLLOW);
	}
	memset(st, 0, sizeof *st);
	st->st_dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
	st->st_ino = sx.stx_ino;
	st->st_mode = sx.stx_mode;
	st->st_nlink = sx.stx_nlink;
	st->st_uid = sx.stx_uid;
	st->st_gid = sx.stx_gid;
	st->st_rdev = makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
	st->st_size = (off_t)sx.stx_size;
	st->st_blksize = sx.stx_blksize;
	st->st_blocks = (blkcnt_t)sx.stx_blocks;
	st->st_atim.tv_sec = sx.stx_atime.tv_sec;
	st->st_atim.tv_nsec = sx.stx_atime.tv_nsec;
	st->st_mtim.tv_sec = sx.stx_mtime.tv_sec;
	st->st_mtim.tv_nsec = sx.stx_mtime.tv_nsec;
	st->st_ctim.tv_sec = sx.stx_ctime.tv_sec;
	st->st_ctim.tv_nsec = sx.stx_ctime.tv_nsec;
	*mnt = (sx.stx_mask & STATX_MNT_ID) ? sx.stx_mnt_id : 0;
	return 0;
}

static bool same_inode(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* u+rwx on a directory we cannot read or write, without following a link:
 * chmod through an O_PATH descriptor's /proc/self/fd name (fchmod refuses
 * O_PATH), after checking it is the directory that was listed. */
static int open_up(int dirfd, const char *name, const struct stat *want)
{
	_cleanup_close_ int p =
		openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (p < 0 || fstat(p, &st) < 0)
		return -1;
	if (!same_inode(&st, want)) {
		errno = ESTALE;
		return -1;
	}
	char self[32];
	snprintf(self, sizeof self, "/proc/self/fd/%d", p);
	/* no set-id or sticky bits: not needed to remove it, and a sandbox's
	 * seccomp filter refuses them */
	return chmod(self, (st.st_mode & 0777) | S_IRWXU);
}

/* Open a directory entry for reading, the very inode that was listed. */
static int open_dir(unsigned flags, int dirfd, const char *name, const struct stat *want)
{
	int oflags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	if ((flags & MOAT_WALK_OPEN_UP) && (want->st_mode & S_IRWXU) != S_IRWXU &&
	    open_up(dirfd, name, want) < 0 && errno == ESTALE)
		return -1;
	int fd = openat(dirfd, name, oflags);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) < 0 || !same_inode(&st, want)) {
		close(fd);
		errno = ESTALE; /* swapped since it was listed */
		return -1;
	}
	return fd;
}

static void drop_rest(struct frame *f)
{
	for (size_t i = 0; i < f->nrest; i++)
		free(f->rest[i]);
	free(f->rest);
	f->rest = NULL;
	f->nrest = f->next = 0;
}

static void close_frame(struct frame *f)
{
	if (f->d)
		closedir(f->d);
	else if (f->fd >= 0)
		close(f->fd);
	f->d = NULL;
	f->fd = -1;
}

static bool dots(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

/* Give up frame i's descriptor: what is left of its listing moves to the
 * heap first, so that the listing goes on where it was. */
static int spare(struct walker *w, size_t i)
{
	struct frame *f = &w->fr[i];
	if (f->d) {
		struct dirent *de;
		errno = 0;
		while ((de = readdir(f->d))) {
			if (dots(de->d_name))
				continue;
			if (f->nrest % 64 == 0) {
				char **r = realloc(f->rest, (f->nrest + 64) * sizeof *r);
				if (!r)
					return -1;
				f->rest = r;
			}
			if (!(f->rest[f->nrest] = strdup(de->d_name)))
				return -1;
			f->nrest++;
			errno = 0;
		}
		if (errno)
			return -1;
	}
	close_frame(f);
	if (f->anchor)
		w->nanchor--;
	else
		w->nopen--;
	f->anchor = false;
	return 0;
}

/* Close the shallowest open frame above the top. */
static int spare_one(struct walker *w)
{
	for (size_t i = w->lo; i < w->n; i++)
		if (w->fr[i].fd >= 0 && !w->fr[i].anchor) {
			w->lo = i + 1;
			return spare(w, i);
		}
	return 0;
}

/* Frame i just got a descriptor: count it, as an anchor or in the window,
 * and keep both within their budgets (frame i itself stays open). */
static int opened(struct walker *w, size_t i)
{
	struct frame *f = &w->fr[i];
	f->anchor = i % w->stride == 0;
	if (!f->anchor) {
		w->nopen++;
		if (i < w->lo)
			w->lo = i;
		return w->nopen > w->max_open ? spare_one(w) : 0;
	}
	if (++w->nanchor <= w->max_anchor)
		return 0;
	w->stride *= 2;
	for (size_t a = w->stride / 2; a <= i; a += w->stride / 2) {
		struct frame *g = &w->fr[a];
		if (!g->anchor || a % w->stride == 0)
			continue;
		if (a < i) {
			if (spare(w, a) < 0)
				return -1;
		} else { /* frame i joins the window instead */
			g->anchor = false;
			w->nanchor--;
			w->nopen++;
			if (i < w->lo)
				w->lo = i;
			if (w->nopen > w->max_open && spare_one(w) < 0)
				return -1;
		}
	}
	return 0;
}

/* Frame k (the deepest) needs its descriptor: reopen from the nearest
 * ancestor still open, one component at a time, never following a link
 * and checking each is the directory it was. */
static int reacquire(struct walker *w, size_t k)
{
	if (w->fr[k].fd >= 0)
		return 0;
	size_t j = k;
	while (w->fr[j].fd < 0)
		j--; /* the top is always open */
	for (size_t i = j + 1; i <= k; i++) {
		struct frame *f = &w->fr[i];
		f->fd = openat(w->fr[i - 1].fd, f->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (f->fd < 0)
			return -1;
		if (opened(w, i) < 0)
			return -1;
		if (fstat(f->fd, &st) < 0 || !same_inode(&st, &f->st)) {
			errno = ESTALE;
			return -1;
		}
	}
	return 0;
}

/* The next name of the deepest frame, NULL at its end (or an error). */
static const char *next_name(struct frame *f, int *err)
{
	*err = 0;
	if (f->d) {
		struct dirent *de;
		errno = 0;
		while ((de = readdir(f->d)) && dots(de->d_name))
			errno = 0;
		if (!de)
			*err = errno;
		return de ? de->d_name : NULL;
	}
	return f->next < f->nrest ? f->rest[f->next++] : NULL;
}

static int set_path(struct walker *w, size_t plen, const char *name, size_t *len)
{
	size_t nl = strlen(name), need = plen + (plen ? 1 : 0) + nl + 1;
	if (need > w->pcap) {
		size_t c = w->pcap ? w->pcap : 256;
		while (c < need)
			c *= 2;
		char *p = realloc(w->path, c);
		if (!p)
			return -1;
		w->path = p;
		w->pcap = c;
	}
	if (plen)
		w->path[plen++] = '/';
	memcpy(w->path + plen, name, nl + 1);
	*len = plen + nl;
	return 0;
}

static int push(struct walker *w, const char *name, const struct stat *st, int fd, size_t plen)
{
	if (w->n == w->cap) {
		size_t c = w->cap ? w->cap * 2 : 16;
		struct frame *f = realloc(w->fr, c * sizeof *f);
		if (!f)
			return -1;
		w->fr = f;
		w->cap = c;
	}
	struct frame *f = &w->fr[w->n];
	memset(f, 0, sizeof *f);
	f->fd = fd;
	f->st = *st;
	f->plen = plen;
	f->name = name ? strdup(name) : NULL;
	if (name && !f->name)
		return -1;
	f->d = fdopendir(fd); /* owns fd from here on */
	if (!f->d) {
		free(f->name);
		return -1;
	}
	w->n++;
	return 0;
}

static void pop(struct walker *w)
{
	struct frame *f = &w->fr[--w->n];
	if (f->fd >= 0 && w->n > 0) {
		if (f->anchor)
			w->nanchor--;
		else
			w->nopen--;
	}
	close_frame(f);
	drop_rest(f);
	free(f->name);
	if (w->lo > w->n)
		w->lo = w->n;
}

/* An error at an entry: stop, or note it and go on. */
static int failed(struct walker *w, int err)
{
	if (!w->err)
		w->err = err ? err : EIO;
	return (w->o->flags & MOAT_WALK_KEEP_GOING) ? 0 : -1;
}

static int step(struct walker *w)
{
	size_t k = w->n - 1;
	int rerr;
	const char *nm = next_name(&w->fr[k], &rerr);
	if (rerr)
		return failed(w, rerr) < 0 ? -1 : (pop(w), 0);
	if (!nm) {
		/* the end of directory k: tell its parent's walker */
		struct frame f = w->fr[k];
		f.name = f.name ? strdup(f.name) : NULL;
		size_t plen = w->fr[k].plen;
		pop(w);
		if (!w->n) /* the top itself */
			return 0;
		_cleanup_free_ char *name = f.name;
		if (!name || reacquire(w, w->n - 1) < 0)
			return failed(w, name ? errno : ENOMEM);
		w->path[plen] = '\0';
		struct moat_walk_ent en = {.dirfd = w->fr[w->n - 1].fd, .name = name,
					   .st = &f.st, .path = w->path, .path_len = plen,
					   .depth = w->n};
		return w->o->fn(MOAT_WALK_LEAVE, &en, w->o->arg) < 0 ? -1 : 0;
	}
	if (!w->fr[k].d && reacquire(w, k) < 0)
		return failed(w, errno);
	int dfd = w->fr[k].fd;
	size_t len;
	if (set_path(w, w->fr[k].plen, nm, &len) < 0)
		return failed(w, ENOMEM);
	struct stat st;
	uint64_t mnt;
	if (stat_at(dfd, nm, 0, &st, &mnt) < 0)
		return errno == ENOENT ? 0 : failed(w, errno);
	bool other = st.st_dev != w->dev;
	if (!other && w->mnt && mnt && !(w->o->flags & MOAT_WALK_DEV_ONLY))
		other = mnt != w->mnt;
	struct moat_walk_ent en = {.dirfd = dfd, .name = nm, .st = &st, .path = w->path,
				   .path_len = len, .depth = k + 1, .other_mount = other};
	int r = w->o->fn(MOAT_WALK_ENTRY, &en, w->o->arg);
	if (r < 0)
		return -1;
	if (r == MOAT_WALK_SKIP || !S_ISDIR(st.st_mode))
		return 0;
	if (other && !(w->o->flags & MOAT_WALK_CROSS_MOUNTS))
		return 0;
	/* the name lives in the DIR's buffer: copy it before any readdir */
	_cleanup_free_ char *name = strdup(nm);
	if (!name)
		return failed(w, ENOMEM);
	int fd = open_dir(w->o->flags, dfd, name, &st);
	if (fd < 0)
		return failed(w, errno);
	if (push(w, name, &st, fd, len) < 0) {
		close(fd);
		return failed(w, errno ? errno : ENOMEM);
	}
	return opened(w, w->n - 1) < 0 ? failed(w, errno) : 0;
}

int moat_walk(int topfd, const struct moat_walk_opt *o, struct moat_err *e)
{
	size_t max = o->max_fds > 2 ? o->max_fds : o->max_fds ? 2 : default_fds();
	struct walker w = {.o = o, .max_open = max - max / 2, .max_anchor = max / 2,
			   .stride = 8, .lo = 1};
	struct stat st;
	int rc = -1;
	int fd = openat(topfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 || stat_at(fd, "", AT_EMPTY_PATH, &st, &w.mnt) < 0 || push(&w, NULL, &st, fd, 0) < 0) {
		int err = errno;
		if (fd >= 0 && !w.n)
			close(fd);
		errno = err;
		moat_err_set(e, MOAT_E_SYSTEM, errno, "open the directory to walk");
		goto out;
	}
	w.dev = st.st_dev;
	while (w.n)
		if (step(&w) < 0)
			break;
	if (w.n) { /* stopped */
		if (!w.err)
			w.err = errno ? errno : EIO;
		else
			moat_err_set(e, MOAT_E_SYSTEM, w.err, "%s", w.path ? w.path : ".");
	} else if (w.err) {
		moat_err_set(e, MOAT_E_SYSTEM, w.err, "%s", w.path ? w.path : ".");
	}
	rc = w.err ? -1 : 0;
out:;
	int err = w.err ? w.err : errno;
	while (w.n)
		pop(&w);
	free(w.fr);
	free(w.path);
	if (rc < 0)
		errno = err;
	return rc;
}

/* ---- removal ------------------------------------------------------------- */

struct rm {
	int err;
};

static int rm_cb(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct rm *r = arg;
	int rc = 0;
	if (en->other_mount) {
		/* a mount point: not ours to empty, and its directory cannot go */
		if (!r->err)
			r->err = EBUSY;
		return MOAT_WALK_SKIP;
	}
	if (ev == MOAT_WALK_LEAVE)
		rc = unlinkat(en->dirfd, en->name, AT_REMOVEDIR);
	else if (!S_ISDIR(en->st->st_mode))
		rc = unlinkat(en->dirfd, en->name, 0);
	if (rc < 0 && errno != ENOENT && !r->err)
		r->err = errno;
	return 0;
}

int moat_walk_rm(int dirfd, const char *name, unsigned flags)
{
	flags = (flags & (MOAT_WALK_OPEN_UP | MOAT_WALK_DEV_ONLY)) | MOAT_WALK_KEEP_GOING;
	struct stat st;
	uint64_t mnt;
	if (stat_at(dirfd, name, 0, &st, &mnt) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -1 : 0;
	int fd = open_dir(flags, dirfd, name, &st);
	if (fd < 0)
		return -1;
	struct rm r = {0};
	struct moat_walk_opt o = {.flags = flags, .fn = rm_cb, .arg = &r};
	int wrc = moat_walk(fd, &o, NULL);
	int werr = errno;
	close(fd);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0)
		return 0;
	/* what went wrong first says more than ENOTEMPTY */
	errno = wrc < 0 ? werr : r.err ? r.err : errno;
	return -1;
}

int moat_rm_tree(const char *dir)
{
	const char *slash = strrchr(dir, '/');
	if (!slash)
		return moat_walk_rm(AT_FDCWD, dir, MOAT_WALK_OPEN_UP);
	_cleanup_free_ char *parent = slash == dir ? strdup("/") : strndup(dir, (size_t)(slash - dir));
	if (!parent)
		return -1;
	_cleanup_close_ int pfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return errno == ENOENT ? 0 : -1;
	return moat_walk_rm(pfd, slash + 1, MOAT_WALK_OPEN_UP);
}
