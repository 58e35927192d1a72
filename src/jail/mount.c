/* The sandbox's filesystem view, built from scratch.
 *
 * prepare (host): compile the policy into a list of mount ops, sorted so a
 * parent is mounted before anything inside it and masks/protections come
 * last (so they win). child: run the ops with one switch, in a private
 * mount namespace:
 *   1. a setup tmpfs on /tmp, pivot_root into it: the host root is now at
 *      /oldroot, the new root being built at /newroot;
 *   2. every op reads from /oldroot/<src> and mounts on /newroot/<dst>;
 *   3. detach /oldroot, pivot into /newroot, detach the setup tmpfs.
 * Sources were realpath'd on the host, so no symlink inside /oldroot is
 * followed; targets inside host-backed binds are opened with
 * RESOLVE_IN_ROOT / O_NOFOLLOW so a hostile symlink cannot redirect a mask. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OLD "/oldroot"
#define NEW "/newroot"

static const char *const system_dirs[] = {
	"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL,
};

/* /proc of our own pid namespace. Its writable knobs (/proc/sys,
 * sysrq-trigger) belong to the host's root, which the capability-less,
 * never-root sandbox is not; what is left to hide are readable files that
 * describe other processes of the host. */
static const char *const proc_mask[] = {"timer_list", "sched_debug", NULL};

static struct mop *add_op(struct jail_ctx *c, enum mop_kind kind, const char *src,
			  const char *dst, unsigned flags, enum ll_class ll)
{
	c->ops = realloc(c->ops, (c->nops + 1) * sizeof *c->ops);
	if (!c->ops) {
		fputs("moat: out of memory\n", stderr);
		abort();
	}
	struct mop *op = &c->ops[c->nops++];
	memset(op, 0, sizeof *op);
	op->kind = kind;
	op->src = src ? strdup(src) : NULL;
	op->dst = strdup(dst);
	op->flags = flags;
	op->ll = ll;
	op->fd = -1;
	op->ph_pin = -1;
	op->upper_fd = -1;
	return op;
}

void jail_mount_free(struct jail_ctx *c)
{
	for (size_t i = 0; i < c->nops; i++) {
		free(c->ops[i].src);
		free(c->ops[i].dst);
		free(c->ops[i].host);
		free(c->ops[i].text);
		moat_strv_free(&c->ops[i].extra);
		moat_strv_free(&c->ops[i].repos);
		moat_strv_free(&c->ops[i].watch);
		moat_strv_free(&c->ops[i].secrets);
		if (c->ops[i].fd >= 0)
			close(c->ops[i].fd);
		if (c->ops[i].ph_pin >= 0)
			close(c->ops[i].ph_pin);
		for (size_t k = 0; c->ops[i].lower_fds && k < c->ops[i].lowers.n; k++)
			if (c->ops[i].lower_fds[k] >= 0)
				close(c->ops[i].lower_fds[k]);
		free(c->ops[i].lower_fds);
		moat_strv_free(&c->ops[i].lowers);
		free(c->ops[i].upper);
		if (c->ops[i].upper_fd >= 0)
			close(c->ops[i].upper_fd);
	}
	free(c->ops);
	c->ops = NULL;
	c->nops = 0;
}

static bool covered_by(const struct moat_strv *list, const char *path)
{
	for (size_t i = 0; i < list->n; i++)
		if (moat_path_within(path, list->v[i]))
			return true;
	return false;
}

/* Is a host path shown in the sandbox by some bind of the plan? */
static bool visible(const struct jail_ctx *c, const char *path)
{
	if (c->p->fs_base != MOAT_FS_SYSTEM)
		return true;
	if (c->p->rootfs) /* the image replaces the host's system directories */
		return covered_by(&c->p->allow_read, path) ||
		       covered_by(&c->p->allow_write, path) ||
		       moat_path_within(path, c->p->workspace);
	for (size_t i = 0; system_dirs[i]; i++)
		if (moat_path_within(path, system_dirs[i]))
			return true;
	return covered_by(&c->p->allow_read, path) ||
	       covered_by(&c->p->allow_write, path) ||
	       moat_path_within(path, c->p->workspace);
}

/* Binds of host paths, sorted by depth so parents go first. */
struct bind {
	const char *path;
	bool rw;
	bool protect;
	const char *at;     /* inside path when not the same */
	uint64_t tmpfs;     /* the workspace is a sized tmpfs */
};

static int bind_cmp(const void *a, const void *b)
{
	const struct bind *x = a, *y = b;
	size_t lx = strlen(x->path), ly = strlen(y->path);
	return lx < ly ? -1 : lx > ly;
}

/* Users mode as root: /var is a private directory of root's, with
 * copy-on-write layers of the package managers' state (dpkg, apt,
 * debconf), so that root can install a package; the rest of the host's
 * /var (logs, other daemons' data) stays out of the view. */
static int users_masks(struct jail_ctx *c, const char *dir, int depth, struct moat_err *e);

static const char *const users_var_dirs[] = {
	"/var/lib/dpkg", "/var/lib/apt", NULL,
};

static int users_var(struct jail_ctx *c, struct moat_err *e)
{
	add_op(c, MOP_TMPFS, NULL, "/var", 0, LL_RW)->mode = 0755;
	static const char *const dirs[] = {"/var/tmp", "/var/log", "/var/cache/apt", NULL};
	for (size_t i = 0; dirs[i]; i++)
		add_op(c, MOP_TMPFS, NULL, dirs[i], 0, LL_RW)->mode =
			strcmp(dirs[i], "/var/tmp") ? 0755 : 01777;
	/* debconf's answers are small: a copy (see op_snapshot) */
	struct stat st;
	if (lstat("/var/cache/debconf", &st) == 0 && S_ISDIR(st.st_mode))
		add_op(c, MOP_SNAPSHOT, "/var/cache/debconf", "/var/cache/debconf", 0, LL_RW);
	/* dpkg's and apt's state is tens of MB, too much to copy at every
	 * start: layers over the live host directories, their root-only
	 * entries masked as found now (package data, no secrets, is all a
	 * later host change could add) */
	for (size_t i = 0; users_var_dirs[i]; i++) {
		if (lstat(users_var_dirs[i], &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		struct mop *ov = add_op(c, MOP_OVERLAY, users_var_dirs[i], users_var_dirs[i],
					MOP_F_SHARED, LL_RW);
		if (jail_ns_prepare_idmapped_range(c, ov, e) < 0 ||
		    users_masks(c, users_var_dirs[i], 0, e) < 0)
			return -1;
	}
	return 0;
}

/* Users mode as root: host root's files are root's inside, so what only
 * root may read on the host (mode without "others" read: /etc/shadow,
 * ssh host keys, /etc/ssl/private, ...) would be readable by the
 * sandbox's root. Mask every such entry of a tree (a directory whole). */
static bool dir_empty(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return false;
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n == 0;
}

static int users_masks(struct jail_ctx *c, const char *dir, int depth, struct moat_err *e)
{
	if (depth > 16)
		return 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char path[PATH_MAX];
		if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISLNK(st.st_mode))
			continue;
		bool dir_ = S_ISDIR(st.st_mode);
		bool open_ = dir_ ? (st.st_mode & (S_IROTH | S_IXOTH)) == (S_IROTH | S_IXOTH)
				  : (st.st_mode & S_IROTH) || !S_ISREG(st.st_mode);
		/* nothing to hide in an empty file or directory (dpkg's and
		 * apt's lock files and partial/ directories must stay usable) */
		if (!open_ && (dir_ ? dir_empty(path) : st.st_size == 0))
			continue;
		if (!open_)
			add_op(c, MOP_MASK, NULL, path, 0, LL_NONE);
		else if (dir_)
			rc = users_masks(c, path, depth + 1, e);
	}
	closedir(d);
	return rc;
}

/* Remove the tree name of dfd, not following links; directories made
 * searchable first (overlayfs leaves work/work mode 000). */
static int rm_tree(int dfd, const char *name, int depth)
{
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dfd, name, 0);
	if (depth > 32) {
		errno = ELOOP;
		return -1;
	}
	if ((st.st_mode & 0700) != 0700 && fchmodat(dfd, name, 0700, 0) < 0)
		return -1;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rc = rm_tree(dirfd(d), de->d_name, depth + 1);
	closedir(d);
	return rc < 0 ? -1 : unlinkat(dfd, name, AT_REMOVEDIR);
}

/* A directory entry of dfd that must be a directory (made when missing,
 * mode, owned as dfd: the id-mapping shows that owner as the sandbox's
 * user): never a link an imported tree planted. Returns 1 when made. */
static int sub_dir(int dfd, const char *name, unsigned mode, const char *what,
		   struct moat_err *e)
{
	bool made = mkdirat(dfd, name, mode) == 0;
	if (!made && errno != EEXIST)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "rootfs upper %s: mkdir %s", what, name);
	struct stat st;
	if (made && geteuid() == 0 &&
	    (fstat(dfd, &st) < 0 || fchownat(dfd, name, st.st_uid, st.st_gid,
					     AT_SYMLINK_NOFOLLOW) < 0))
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "rootfs upper %s: chown %s", what,
				    name);
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "rootfs upper %s: %s", what, name);
	if (!S_ISDIR(st.st_mode))
		return moat_err_set(e, MOAT_E_USAGE, ENOTDIR, "rootfs upper %s: %s", what, name);
	return made;
}

/* The image's changes on disk: <upper>/upper (made when missing, with the
 * top layer's mode: the overlay root's) and an empty <upper>/work
 * (overlayfs refuses or complains about a workdir an earlier mount left:
 * work/work, work/index, work/incompat), under an exclusive lock held
 * while the sandbox lives: two overlays on one upper corrupt it. */
static int upper_prepare(struct jail_ctx *c, const char *dir, const char *top,
			 struct moat_err *e)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "rootfs upper %s", dir);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno == EWOULDBLOCK ? 0 : errno,
				    "rootfs upper %s%s", dir, errno == EWOULDBLOCK ?
				    " is in use by another sandbox" : ": lock");
	int made = sub_dir(fd, "upper", 0755, dir, e);
	if (made < 0)
		return -1;
	struct stat st;
	if (made && stat(top, &st) == 0 && fchmodat(fd, "upper", st.st_mode & 07777, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "rootfs upper %s: chmod upper", dir);
	if (rm_tree(fd, "work", 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "rootfs upper %s: clear work/", dir);
	if (sub_dir(fd, "work", 0700, dir, e) < 0)
		return -1;
	c->upper_lock = steal_fd(&fd);
	return 0;
}

/* An image: its layers (top first) as the overlay's lowers, each bound,
 * or id-mapped on its own under root (an overlay cannot itself be
 * id-mapped: EINVAL), and its upper on disk when the policy has one. */
static int image_layers(struct jail_ctx *c, struct mop *ov, struct moat_err *e)
{
	const struct moat_policy *p = c->p;
	size_t n = p->rootfs_layers.n;
	if (!n || n > MOAT_ROOTFS_LAYERS_MAX)
		return moat_err_set(e, MOAT_E_USAGE, 0, "image: %zu layers (policy not finalized?)",
				    n);
	ov->lower_fds = malloc(n * sizeof *ov->lower_fds);
	if (!ov->lower_fds)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "image layers");
	for (size_t i = 0; i < n; i++) {
		ov->lower_fds[i] = -1;
		moat_strv_add(&ov->lowers, p->rootfs_layers.v[i]);
	}
	for (size_t i = 0; c->host_root && i < n; i++)
		if ((ov->lower_fds[i] = jail_ns_idmap_tree(c, ov->lowers.v[i], true, e)) < 0)
			return moat_err_prefix(e, "image layer");
	if (!p->rootfs_upper)
		return 0;
	if (upper_prepare(c, p->rootfs_upper, ov->lowers.v[0], e) < 0)
		return -1;
	if (!(ov->upper = strdup(p->rootfs_upper)))
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "rootfs upper");
	/* root: what the sandbox writes belongs to the directory's owner */
	if (c->host_root &&
	    (ov->upper_fd = jail_ns_idmap_tree(c, p->rootfs_upper, false, e)) < 0)
		return moat_err_prefix(e, "rootfs upper");
	return 0;
}

int jail_mount_prepare(struct jail_ctx *c, struct moat_err *e)
{
	const struct moat_policy *p = c->p;
	const char *home = c->l->home;

	/* 1. the base view */
	if (p->fs_base == MOAT_FS_SYSTEM && p->rootfs) {
		struct mop *ov = add_op(c, MOP_OVERLAY, p->rootfs, "/", 0, LL_RW);
		ov->size = p->rootfs_size;
		if (p->workspace_tmpfs) { /* the one budget: see jail_mount_child */
			ov->size = 0;
			ov->flags |= MOP_F_SHARED;
		}
		if (image_layers(c, ov, e) < 0)
			return -1;
	} else if (p->fs_base == MOAT_FS_SYSTEM) {
		for (size_t i = 0; system_dirs[i]; i++) {
			struct stat st;
			if (lstat(system_dirs[i], &st) < 0)
				continue;
			if (S_ISLNK(st.st_mode)) {
				char target[PATH_MAX];
				ssize_t n = readlink(system_dirs[i], target, sizeof target - 1);
				if (n < 0)
					return moat_err_set(e, MOAT_E_SYSTEM, errno,
							    "readlink %s", system_dirs[i]);
				target[n] = '\0';
				add_op(c, MOP_SYMLINK, target, system_dirs[i], 0, LL_NONE);
			} else if (p->users && c->host_root && strcmp(system_dirs[i], "/etc") == 0) {
				/* users mode: a copy made now, not a view of the live
				 * host /etc (see op_snapshot) */
				add_op(c, MOP_SNAPSHOT, "/etc", "/etc", 0, LL_RW);
			} else if (p->users && c->host_root) {
				/* users mode: a private copy-on-write layer over
				 * the host's directory, host root's files root's */
				struct mop *ov = add_op(c, MOP_OVERLAY, system_dirs[i],
							system_dirs[i], MOP_F_SHARED, LL_RW);
				if (jail_ns_prepare_idmapped_range(c, ov, e) < 0)
					return -1;
			} else {
				add_op(c, MOP_BIND, system_dirs[i], system_dirs[i],
				       MOP_F_RDONLY, LL_RO);
			}
		}
		if (p->users && c->host_root && users_var(c, e) < 0)
			return -1;
	} else {
		bool rw = p->fs_base == MOAT_FS_HOST_WRITE;
		add_op(c, MOP_BIND, "/", "/", rw ? 0 : MOP_F_RDONLY, rw ? LL_RW : LL_RO);
		if (!rw) {
			/* Host daemons' sockets live under /run: a read-only
			 * mount does not stop connect(2) on a socket file. */
			add_op(c, MOP_TMPFS, NULL, "/run", MOP_F_RDONLY, LL_NONE)->mode = 0755;
			add_op(c, MOP_TMPFS, NULL, "/sys", MOP_F_RDONLY, LL_NONE)->mode = 0555;
		}
	}
	/* The private home is mounted over $HOME: it must not be (or contain)
	 * the root or a system directory. */
	if (home && p->fs_base != MOAT_FS_HOST_WRITE) {
		static const char *const sys[] = {"/proc", "/dev", NULL};
		bool bad = home[0] != '/' || strcmp(home, "/") == 0;
		for (size_t i = 0; !bad && system_dirs[i]; i++)
			bad = moat_path_within(home, system_dirs[i]) ||
			      moat_path_within(system_dirs[i], home);
		for (size_t i = 0; !bad && sys[i]; i++)
			bad = moat_path_within(sys[i], home);
		if (bad)
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "HOME=%s cannot hold the sandbox's private home "
					    "(it would cover system directories); set HOME to "
					    "a home directory", home);
	}
	/* kernel filesystems before anything private or host-bound: a home or
	 * a workspace may live below /dev/shm */
	add_op(c, MOP_PROC, NULL, "/proc", 0, LL_PROC);
	add_op(c, MOP_DEV, NULL, "/dev", 0, LL_DEV);
	if (p->fs_base != MOAT_FS_HOST_WRITE) {
		add_op(c, MOP_TMPFS, NULL, "/tmp", 0, LL_RW)->mode = 01777;
		/* A private, empty home unless the policy shows the real one. */
		if (home && !covered_by(&p->allow_read, home) &&
		    !covered_by(&p->allow_write, home) &&
		    !moat_path_within(home, p->workspace)) {
			struct mop *h = add_op(c, MOP_TMPFS, NULL, home, 0, LL_RW);
			h->mode = p->users ? 0750 : 0700;
			h->user_owned = p->users && strcmp(home, "/root") != 0;
		}
		if (p->users) {
			/* both users' homes, and the accounts they belong to */
			if (!home || strcmp(home, "/root") != 0)
				add_op(c, MOP_TMPFS, NULL, "/root", 0, LL_RW)->mode = 0700;
			if (!home || strcmp(home, "/home/user") != 0) {
				struct mop *h = add_op(c, MOP_TMPFS, NULL, "/home/user", 0, LL_RW);
				h->mode = 0750;
				h->user_owned = true;
			}
			add_op(c, MOP_USERS_ETC, NULL, "/etc", 0, LL_NONE);
		}
	}


	/* 2. host binds: allow-read, allow-write, the workspace */
	size_t nb = p->allow_read.n + p->allow_write.n + 1;
	_cleanup_free_ struct bind *b = calloc(nb, sizeof *b);
	if (!b)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "mount plan");
	size_t k = 0;
	for (size_t i = 0; i < p->allow_read.n; i++)
		b[k++] = (struct bind){.path = p->allow_read.v[i]};
	for (size_t i = 0; i < p->allow_write.n; i++)
		b[k++] = (struct bind){.path = p->allow_write.v[i], .rw = true, .protect = true};
	b[k++] = (struct bind){p->workspace, p->workspace_write, p->workspace_write,
			       p->workspace_at, p->workspace_tmpfs};
	/* --deny-write of a writable path itself, or of a directory around it,
	 * makes that whole path read-only. */
	for (size_t i = 0; i < k; i++)
		for (size_t j = 0; b[i].rw && j < p->deny_write.n; j++)
			if (moat_path_within(b[i].path, p->deny_write.v[j]))
				b[i].rw = b[i].protect = false;
	qsort(b, k, sizeof *b, bind_cmp);
	for (size_t i = 0; i < k; i++) {
		/* In danger-full-access "/" is already the host, writable. */
		if (p->fs_base == MOAT_FS_HOST_WRITE && strcmp(b[i].path, "/") == 0)
			continue;
		const char *dst = b[i].at ? b[i].at : b[i].path;
		if (b[i].tmpfs) {
			struct mop *t = add_op(c, MOP_TMPFS, NULL, dst,
					       b[i].rw ? 0 : MOP_F_RDONLY, b[i].rw ? LL_RW : LL_RO);
			t->mode = 0755;
			t->user_owned = p->users;
			/* a directory of the size-bounded setup tmpfs (see
			 * jail_mount_child), not a filesystem of its own */
			t->size = 0;
			continue;
		}
		struct mop *op = add_op(c, MOP_BIND, b[i].path, dst,
					b[i].rw ? 0 : MOP_F_RDONLY, b[i].rw ? LL_RW : LL_RO);
		if (b[i].rw && c->host_root && jail_ns_prepare_idmapped(c, op, e) < 0)
			return -1;
	}


	/* The sandbox's own accounts over the host's (or the image's, when
	 * they lack the sandbox's ids): after the binds (an allow-read of /etc
	 * is covered too), before the masks (a deny-read still wins). */
	if (!p->users && p->fs_base != MOAT_FS_HOST_WRITE) {
		char *text[2];
		static const char *const at[2] = {"/etc/passwd", "/etc/group"};
		jail_accounts(c, &text[0], &text[1]);
		for (int i = 0; i < 2; i++)
			if (text[i])
				add_op(c, MOP_GEN_FILE, NULL, at[i], MOP_F_OPTIONAL, LL_NONE)->text =
					text[i];
	}

	/* 3. masks: secrets, then the policy's deny-read; only where a host
	 * bind makes them visible at all */
	for (size_t i = 0; i < p->hidden.n; i++)
		if (visible(c, p->hidden.v[i]))
			add_op(c, MOP_MASK, NULL, p->hidden.v[i], 0, LL_NONE);
	for (size_t i = 0; i < p->deny_read.n; i++)
		if (visible(c, p->deny_read.v[i]))
			add_op(c, MOP_MASK, NULL, p->deny_read.v[i], 0, LL_NONE);
	/* no network: lookups go to the sandbox's resolver (net.c) */
	if (p->net == MOAT_NET_NONE) {
		struct mop *op = add_op(c, MOP_GEN_FILE, NULL, "/etc/resolv.conf",
					MOP_F_OPTIONAL | MOP_F_FOLLOW, LL_NONE);
		if (!(op->text = strdup(jail_net_resolv_conf))) {
			fputs("moat: out of memory\n", stderr);
			abort();
		}
	}

	/* 4. write protection inside every host-backed writable root */
	for (size_t i = 0; i < k; i++) {
		if (!b[i].protect)
			continue;
		struct mop *op = add_op(c, MOP_PROTECT, NULL, b[i].at ? b[i].at : b[i].path,
					0, LL_NONE);
		if (!b[i].tmpfs)
			op->host = strdup(b[i].path);
		op->names = p->fs_base == MOAT_FS_HOST_WRITE ? NULL : moat_mandatory_deny;
		size_t rl = strcmp(b[i].path, "/") ? strlen(b[i].path) + 1 : 1;
		for (size_t j = 0; j < p->deny_write.n; j++) {
			const char *d = p->deny_write.v[j];
			if (moat_path_within(d, b[i].path) && strcmp(d, b[i].path) != 0)
				moat_strv_add(&op->extra, d + rl);
		}
		/* Repositories placed before the start: their .git names get
		 * placeholders like the top's (a clone made with an empty
		 * template has no .git/hooks to bind read-only), and the child
		 * scans them as nested repositories, however deep. */
		for (size_t j = 0; op->names && j < p->protect_repos.n; j++) {
			const char *r = p->protect_repos.v[j];
			if (!moat_path_within(r, b[i].path) || strcmp(r, b[i].path) == 0)
				continue;
			moat_strv_add(&op->repos, r + rl);
			for (size_t n = 0; op->names[n]; n++)
				if (!strncmp(op->names[n], ".git/", 5))
					moat_strv_take(&op->extra,
						       moat_strdupf("%s/%s", r + rl, op->names[n]));
		}
		/* A secret that does not exist yet must not be planted either
		 * (~/.ssh/authorized_keys when the home is writable). */
		for (size_t j = 0; j < p->hidden.n; j++) {
			const char *h = p->hidden.v[j];
			/* every one, existing or not: an existing secret is masked
			 * already (protect leaves it), a placeholder left by a killed
			 * run is masked again and cleaned up afterwards */
			if (moat_path_within(h, b[i].path) && strcmp(h, b[i].path) != 0)
				moat_strv_add(&op->secrets, h + rl);
		}
		if (!b[i].tmpfs)
			moat_strv_add(&c->protect_roots, b[i].path);
	}
	if (p->fs_base == MOAT_FS_HOST_WRITE && p->deny_write.n) {
		struct mop *op = add_op(c, MOP_PROTECT, NULL, "/", 0, LL_NONE);
		op->host = strdup("/");
		for (size_t j = 0; j < p->deny_write.n; j++)
			moat_strv_add(&op->extra, p->deny_write.v[j] + 1);
	}
	if (p->fs_base == MOAT_FS_SYSTEM && !p->rootfs)
		add_op(c, MOP_ROOT_RO, NULL, "/", 0, LL_NONE);
	return 0;
}

/* ---- child side --------------------------------------------------------- */

static int set_attr(int dfd, const char *path, unsigned flags, uint64_t set,
		    const char *what, struct moat_err *e)
{
	struct mount_attr a = {.attr_set = set};
	if (mount_setattr(dfd, path, flags, &a, sizeof a) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mount_setattr %s", what);
	return 0;
}

/* mkdir -p the parents of path (absolute, under NEW), then the leaf as a
 * directory or an empty file. Existing entries are fine. */
static int make_mountpoint(const char *path, bool dir, struct moat_err *e)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "%s", path);
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "mkdir %s", buf);
		*s = '/';
	}
	if (dir) {
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "mkdir %s", buf);
	} else {
		int fd = open(buf, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
		if (fd < 0 && errno != EEXIST && errno != EROFS && errno != EISDIR)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "create %s", buf);
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

/* The object an O_PATH descriptor refers to (a symlink itself, when opened
 * O_NOFOLLOW), as a path mount(2) can take: the magic link in the host's
 * /proc, which is still reachable while the tree is being built. */
static void fd_path(int fd, char *buf, size_t cap)
{
	snprintf(buf, cap, OLD "/proc/self/fd/%d", fd);
}

int jail_mount_onto(const char *src, int fd, const char *what, struct moat_err *e)
{
	/* One bind: src lives on a read-only, nosuid, nodev, noexec mount and
	 * a bind inherits its flags. */
	char target[64];
	fd_path(fd, target, sizeof target);
	if (mount(src, target, NULL, MS_BIND, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mask %s", what);
	return 0;
}

int jail_mount_ro_self(int fd, const char *what, struct moat_err *e)
{
	_cleanup_close_ int t = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
					   AT_EMPTY_PATH | AT_RECURSIVE);
	if (t < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open_tree %s", what);
	if (set_attr(t, "", AT_EMPTY_PATH | AT_RECURSIVE,
		     MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, what, e) < 0)
		return -1;
	if (move_mount(t, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "read-only bind %s", what);
	return 0;
}

int jail_mount_pin(int fd, const char *what, struct moat_err *e)
{
	char path[64];
	fd_path(fd, path, sizeof path);
	if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "pin %s", what);
	return 0;
}

/* Open a path of the new root as the sandbox will resolve it. */
static int open_in_root(int rootfd, const char *path, bool follow)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW),
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	while (*path == '/')
		path++;
	if (!*path)
		path = ".";
	return (int)syscall(SYS_openat2, rootfd, path, &how, sizeof how);
}

static int op_bind(const struct mop *op, const char *src, const char *dst,
		   struct moat_err *e)
{
	struct stat st;
	if (stat(src, &st) < 0) {
		if (op->flags & MOP_F_OPTIONAL)
			return 0;
		return moat_err_set(e, MOAT_E_USAGE, errno, "bind %s", op->src);
	}
	if (make_mountpoint(dst, S_ISDIR(st.st_mode), e) < 0)
		return -1;
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "bind %s on %s", op->src, op->dst);
	uint64_t set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	if (op->flags & MOP_F_RDONLY)
		set |= MOUNT_ATTR_RDONLY;
	return set_attr(AT_FDCWD, dst, AT_RECURSIVE, set, op->dst, e);
}

/* Every "tmpfs" of the sandbox (/, /tmp, the home, /dev, /dev/shm) is a
 * directory of the one setup tmpfs, bound into place: one superblock to
 * create and tear down instead of six. Returns the bound directory. */
static int scratch_bind_as(const char *dst, unsigned mode, uint64_t attrs, bool user,
			   struct moat_err *e)
{
	static unsigned n;
	char dir[32];
	snprintf(dir, sizeof dir, "/s%u", n++);
	if (mkdir(dir, 0700) < 0 || chmod(dir, mode) < 0 ||
	    (user && chown(dir, MOAT_USERS_UID, MOAT_USERS_UID) < 0))
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "scratch dir for %s", dst);
	if (make_mountpoint(dst, true, e) < 0)
		return -1;
	if (mount(dir, dst, NULL, MS_BIND, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "private directory on %s", dst);
	return set_attr(AT_FDCWD, dst, 0, attrs, dst, e);
}

static int scratch_bind(const char *dst, unsigned mode, uint64_t attrs, struct moat_err *e)
{
	return scratch_bind_as(dst, mode, attrs, false, e);
}

static int op_tmpfs(const struct mop *op, const char *dst, struct moat_err *e)
{
	uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	if (op->flags & MOP_F_RDONLY)
		attrs |= MOUNT_ATTR_RDONLY;
	if (op->size) {
		/* A size-bounded filesystem of its own (a served sandbox's
		 * workspace with a disk limit): ENOSPC, not a full host disk. */
		char opts[64];
		snprintf(opts, sizeof opts, "size=%llu,mode=%o",
			 (unsigned long long)op->size, op->mode);
		if (make_mountpoint(dst, true, e) < 0)
			return -1;
		if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "tmpfs on %s", op->dst);
		if (op->user_owned && chown(dst, MOAT_USERS_UID, MOAT_USERS_UID) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "chown %s", op->dst);
		return 0;
	}
	return scratch_bind_as(dst, op->mode, attrs, op->user_owned, e);
}

static int op_proc(const char *dst, struct moat_err *e)
{
	if (make_mountpoint(dst, true, e) < 0)
		return -1;
	if (mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mount proc on %s", dst);
	char p[PATH_MAX];
	for (size_t i = 0; proc_mask[i]; i++) {
		snprintf(p, sizeof p, "%s/%s", dst, proc_mask[i]);
		_cleanup_close_ int fd = open(p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && jail_mount_onto(JAIL_EMPTY_FILE, fd, p, e) < 0)
			return -1;
	}
	return 0;
}

static int op_dev(const char *dst, struct moat_err *e)
{
	static const char *const nodes[] = {"null", "zero", "full", "random",
					    "urandom", "tty", NULL};
	static const char *const links[][2] = {
		{"/proc/self/fd", "fd"},         {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"},   {"/proc/self/fd/2", "stderr"},
		{"pts/ptmx", "ptmx"},
	};
	char p[PATH_MAX], s[PATH_MAX];
	if (scratch_bind(dst, 0755, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, e) < 0)
		return -1;
	for (size_t i = 0; nodes[i]; i++) {
		snprintf(p, sizeof p, "%s/%s", dst, nodes[i]);
		snprintf(s, sizeof s, OLD "/dev/%s", nodes[i]);
		if (make_mountpoint(p, false, e) < 0)
			return -1;
		if (mount(s, p, NULL, MS_BIND, NULL) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "bind /dev/%s", nodes[i]);
	}
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", dst, links[i][1]);
		if (symlink(links[i][0], p) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "symlink %s", p);
	}
	snprintf(p, sizeof p, "%s/pts", dst);
	if (mkdir(p, 0755) < 0 ||
	    mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=620,max=256") < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "devpts on %s", p);
	snprintf(p, sizeof p, "%s/shm", dst);
	if (scratch_bind(p, 01777, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, e) < 0)
		return -1;
	/* No new device nodes or files directly in /dev. */
	return set_attr(AT_FDCWD, dst, 0, MOUNT_ATTR_RDONLY, dst, e);
}

static int op_mask(int rootfd, const struct mop *op, struct moat_err *e)
{
	_cleanup_close_ int fd = open_in_root(rootfd, op->dst, false);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR || errno == EACCES)
			return 0; /* not visible: nothing to hide */
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "hide %s", op->dst);
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "stat %s", op->dst);
	return jail_mount_onto(S_ISDIR(st.st_mode) ? JAIL_EMPTY_DIR : JAIL_EMPTY_FILE,
			       fd, op->dst, e);
}

static int op_protect(struct jail_ctx *c, int rootfd, const struct mop *op,
		      struct moat_err *e)
{
	/* Wait for the host's placeholders (mostly done long before). A futex
	 * on the shared page: no CPU burnt while the host is still creating
	 * them. A host that died meanwhile never sets it (and moat serve's
	 * sandboxes have no parent-death signal): look every 100 ms. */
	while (!__atomic_load_n(&c->go[JAIL_GO_PROTECT], __ATOMIC_ACQUIRE)) {
		struct timespec ts = {0, 100 * 1000 * 1000};
		syscall(SYS_futex, &c->go[JAIL_GO_PROTECT], FUTEX_WAIT, 0, &ts, NULL, 0);
		if (!__atomic_load_n(&c->go[JAIL_GO_PROTECT], __ATOMIC_ACQUIRE) &&
		    jail_host_gone(c))
			return moat_err_set(e, MOAT_E_SYSTEM, EPIPE, "the host went away");
	}
	_cleanup_close_ int fd = open_in_root(rootfd, op->dst, true);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", op->dst);
	size_t used = 0;
	char *rep = JAIL_REPORT(c->go);
	while (used < JAIL_REPORT_CAP && rep[used]) /* earlier roots' records */
		used += strlen(rep + used) + 1;
	return jail_protect_child(fd, op->dst, op->names, &op->extra, &op->secrets, &op->repos,
				  (int)(op - c->ops), rep + used, JAIL_REPORT_CAP - used, e);
}

/* The image read-only, the sandbox's changes in a tmpfs of its own (or,
 * with an upper on disk, there): the image is never written and every
 * sandbox starts from it afresh (or from its own earlier changes).
 * Everything overlayfs names in its options (shown in the sandbox's
 * mountinfo) is a neutral path of the setup tmpfs: /ovl/lower (one
 * layer) or /ovl/l0 (top), /ovl/l1, ...; /ovl/upper or /ovl/u/upper. */
static int op_overlay(const struct mop *op, const char *lower, const char *dst,
		      struct moat_err *e)
{
	/* a page (the most mount(2) copies): 128 layers of "/ovl/l127:" fit */
	char opts[4096];
	/* the image's scratch is /ovl; users mode's system directories have
	 * one each, /ovl-usr, /ovl-etc, ... */
	char d[PATH_MAX], up[PATH_MAX + 16], wk[PATH_MAX + 16], lo[PATH_MAX + 16];
	if (strcmp(op->dst, "/") == 0)
		snprintf(d, sizeof d, "/ovl");
	else {
		snprintf(d, sizeof d, "/ovl-%s", op->dst + 1);
		for (char *q = d + 1; *q; q++)
			if (*q == '/')
				*q = '-';
	}
	const char *what = op->lowers.n ? op->lowers.v[0] : op->src;
	snprintf(up, sizeof up, "%s/upper", d);
	snprintf(wk, sizeof wk, "%s/work", d);
	if (op->upper) {
		/* the changes on disk: <upper> attached at /ovl/u (upperdir and
		 * workdir must share one mount) */
		char u[PATH_MAX + 8], src[PATH_MAX + 16];
		snprintf(u, sizeof u, "%s/u", d);
		snprintf(up, sizeof up, "%s/upper", u);
		snprintf(wk, sizeof wk, "%s/work", u);
		if (mkdir(d, 0700) < 0 || mkdir(u, 0755) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "overlay scratch for %s", what);
		if (op->upper_fd >= 0) {
			if (move_mount(op->upper_fd, "", AT_FDCWD, u, MOVE_MOUNT_F_EMPTY_PATH) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "attach id-mapped "
						    "rootfs upper %s", op->upper);
		} else {
			snprintf(src, sizeof src, OLD "%s", op->upper);
			if (mount(src, u, NULL, MS_BIND | MS_REC, NULL) < 0 ||
			    set_attr(AT_FDCWD, u, AT_RECURSIVE, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
				     op->upper, e) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "bind rootfs upper %s",
						    op->upper);
		}
	} else if (op->flags & MOP_F_SHARED) {
		/* changes in the setup tmpfs: the sandbox's disk budget */
		if (mkdir(d, 0700) < 0 || mkdir(up, 0755) < 0 || mkdir(wk, 0755) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "overlay scratch for %s",
					    what);
	} else {
		if (op->size)
			snprintf(opts, sizeof opts, "size=%llu,mode=0755",
				 (unsigned long long)op->size);
		else
			snprintf(opts, sizeof opts, "mode=0755");
		if (mkdir(d, 0700) < 0 || mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0 ||
		    mkdir(up, 0755) < 0 || mkdir(wk, 0755) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "overlay scratch for %s", what);
	}
	size_t n = op->lowers.n ? op->lowers.n : 1, len = 0;
	len = (size_t)snprintf(opts, sizeof opts, "lowerdir=");
	char top[PATH_MAX + 16] = "";
	for (size_t i = 0; i < n; i++) {
		const char *name = op->lowers.n ? op->lowers.v[i] : op->src;
		int fd = op->lowers.n ? op->lower_fds[i] : op->fd;
		if (n == 1)
			snprintf(lo, sizeof lo, "%s/lower", d);
		else
			snprintf(lo, sizeof lo, "%s/l%zu", d, i);
		if (mkdir(lo, 0755) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "overlay scratch for %s", name);
		if (fd >= 0) { /* root mode: the layer id-mapped by the host */
			if (move_mount(fd, "", AT_FDCWD, lo, MOVE_MOUNT_F_EMPTY_PATH) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "attach id-mapped %s",
						    name);
		} else {
			/* Bound at a neutral path first: overlayfs shows its
			 * lowerdir= in the sandbox's mountinfo and mounts, and
			 * the image's host path is none of the sandbox's business. */
			char src[PATH_MAX + 16];
			if (op->lowers.n)
				snprintf(src, sizeof src, OLD "%s", name);
			else
				snprintf(src, sizeof src, "%s", lower);
			if (mount(src, lo, NULL, MS_BIND | MS_REC, NULL) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "bind %s", name);
		}
		if (i == 0)
			snprintf(top, sizeof top, "%s", lo);
		int k = snprintf(opts + len, sizeof opts - len, "%s%s", i ? ":" : "", lo);
		if (k < 0 || (size_t)k >= sizeof opts - len)
			return moat_err_set(e, MOAT_E_USAGE, E2BIG, "overlay of %zu layers", n);
		len += (size_t)k;
	}
	/* the upper root gives the overlay's root its owner and mode (an
	 * upper on disk got them when it was made) */
	struct stat st;
	if (!op->upper && stat(top, &st) == 0 && chmod(up, st.st_mode & 07777) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "overlay scratch for %s", what);
	/* An image's overlay is mounted in the sandbox's user namespace,
	 * where trusted.* xattrs are out of reach: userxattr makes overlayfs
	 * read the layers' opaque directories from user.overlay.opaque (the
	 * unpacker sets both) and keep its own marks in user.overlay.* of
	 * the upper (ext4, btrfs, xfs; tmpfs since 6.6). Whiteouts (0/0
	 * character devices) need no xattr. */
	int k = snprintf(opts + len, sizeof opts - len, ",upperdir=%s,workdir=%s%s", up, wk,
			 op->lowers.n ? ",userxattr" : "");
	if (k < 0 || (size_t)k >= sizeof opts - len)
		return moat_err_set(e, MOAT_E_USAGE, E2BIG, "overlay of %zu layers", n);
	if (strcmp(op->dst, "/") != 0 && make_mountpoint(dst, true, e) < 0)
		return -1;
	if (mount("overlay", dst, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno,
				    "overlay of %s %s%s (kernel without overlayfs in user "
				    "namespaces, or over id-mapped layers?)",
				    strcmp(op->dst, "/") ? "system directory" : "root filesystem", what,
				    n > 1 ? " and its lower layers" : "");
	return 0;
}

/* Users mode as root: copy the tree at sfd into dfd, keeping only what an
 * unprivileged user may read. Read through the host's view (OLDROOT, not
 * id-mapped): host root's files are unmapped there, so the sandbox's
 * capabilities do not apply and the kernel checks as for "others"; the
 * mode is checked too. Not others-readable: skipped (an empty file made
 * empty, mode kept); a directory not
 * others-searchable: made empty, mode kept. Everything is root's inside
 * (the host's owners are unmapped in this view). */
static int snap_tree(int sfd, int dfd, int depth, const char *what, struct moat_err *e)
{
	int dup_ = fcntl(sfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = dup_ < 0 ? NULL : fdopendir(dup_);
	if (!d) {
		if (dup_ >= 0)
			close(dup_);
		return 0; /* unreadable: left empty */
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		const char *n = de->d_name;
		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		struct stat st = {.st_mode = S_IFLNK};
		/* symlinks are most of /etc (alternatives, rc?.d): no stat */
		if (de->d_type != DT_LNK && fstatat(sfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			char t[PATH_MAX];
			ssize_t len = readlinkat(sfd, n, t, sizeof t - 1);
			if (len < 0)
				continue;
			t[len] = '\0';
			if (symlinkat(t, dfd, n) < 0)
				rc = moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy %s", what);
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (mkdirat(dfd, n, 0700) < 0) {
				rc = moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy %s", what);
				continue;
			}
			if ((st.st_mode & (S_IROTH | S_IXOTH)) == (S_IROTH | S_IXOTH) && depth < 32) {
				_cleanup_close_ int s2 = openat(sfd, n, O_RDONLY | O_DIRECTORY |
								O_NOFOLLOW | O_CLOEXEC);
				_cleanup_close_ int d2 = openat(dfd, n, O_RDONLY | O_DIRECTORY |
								O_NOFOLLOW | O_CLOEXEC);
				struct stat st2;
				if (d2 < 0)
					rc = moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy %s",
							  what);
				else if (s2 >= 0 && fstat(s2, &st2) == 0 &&
					 (st2.st_mode & (S_IROTH | S_IXOTH)) == (S_IROTH | S_IXOTH))
					rc = snap_tree(s2, d2, depth + 1, what, e);
			}
			if (fchmodat(dfd, n, st.st_mode & 07777, 0) < 0 && rc == 0)
				rc = moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy %s", what);
			continue;
		}
		if (!S_ISREG(st.st_mode))
			continue;
		if (!(st.st_mode & S_IROTH)) {
			/* an empty root-only file (a lock, debconf's passwords.dat)
			 * stays, empty: nothing read, nothing to hide */
			if (st.st_size == 0) {
				_cleanup_close_ int z = openat(dfd, n, O_WRONLY | O_CREAT | O_EXCL |
							       O_NOFOLLOW | O_CLOEXEC, 0600);
				if (z < 0 || fchmod(z, st.st_mode & 07777) < 0) {
					/* best effort: absent or root's */
				}
			}
			continue;
		}
		/* O_NONBLOCK: a file swapped for a FIFO meanwhile does not hang us */
		_cleanup_close_ int in = openat(sfd, n, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat st2;
		if (in < 0 || fstat(in, &st2) < 0 || !S_ISREG(st2.st_mode) || !(st2.st_mode & S_IROTH))
			continue;
		_cleanup_close_ int out = openat(dfd, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
						     O_CLOEXEC, 0600);
		if (out < 0) {
			rc = moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy %s", what);
			continue;
		}
		for (off_t left = st2.st_size; left > 0;) {
			ssize_t k = sendfile(out, in, NULL, 1 << 20);
			if (k == 0)
				break;
			left -= k > 0 ? k : 0;
			if (k < 0) {
				if (errno == EINTR)
					continue;
				if (errno == ENOSPC || errno == EDQUOT)
					rc = moat_err_set(e, MOAT_E_SYSTEM, errno,
							  "users mode: copy %s (disk limit)", what);
				break; /* a read error: the file as far as read */
			}
		}
		struct timespec ts[2] = {st2.st_atim, st2.st_mtim};
		if (rc == 0 && (fchmod(out, st2.st_mode & 07777) < 0 || futimens(out, ts) < 0))
			rc = moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy %s", what);
	}
	closedir(d);
	return rc;
}

/* Users mode as root: a system directory whose host copy may gain
 * root-only entries later (/etc) is a copy made now, in the setup tmpfs
 * (the sandbox's disk budget), writable by root inside: never a live view
 * in which the sandbox's root could read what host root adds. */
static int op_snapshot(const struct mop *op, const char *src, const char *dst,
		       struct moat_err *e)
{
	char d[PATH_MAX];
	snprintf(d, sizeof d, "/snap-%s", op->dst + 1);
	for (char *q = d + 1; *q; q++)
		if (*q == '/')
			*q = '-';
	_cleanup_close_ int sfd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (sfd < 0 || fstat(sfd, &st) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: open %s", op->src);
	if (mkdir(d, 0700) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy of %s", op->src);
	_cleanup_close_ int dfd = open(d, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy of %s", op->src);
	if (snap_tree(sfd, dfd, 0, op->src, e) < 0)
		return -1;
	if (fchmod(dfd, st.st_mode & 0777) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: copy of %s", op->src);
	if (make_mountpoint(dst, true, e) < 0)
		return -1;
	if (mount(d, dst, NULL, MS_BIND, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: bind %s", op->dst);
	return set_attr(AT_FDCWD, dst, 0, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, dst, e);
}

/* Users mode: /etc/passwd and /etc/group know root and user. Root as
 * host root (/etc an overlay): written into the sandbox's copy, which
 * root may change; rootless (/etc read-only): read-only files bound over. */
static int op_users_etc(struct jail_ctx *c, const char *dst, struct moat_err *e)
{
	const char *names[] = {"passwd", "group"};
	const char *text[] = {c->users_passwd, c->users_group};
	for (int i = 0; i < 2; i++) {
		char path[PATH_MAX], src[64];
		snprintf(path, sizeof path, "%s/%s", dst, names[i]);
		snprintf(src, sizeof src, c->host_root ? "%s" : "/users-%s",
			 c->host_root ? path : names[i]);
		_cleanup_close_ int fd = open(src, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
						   O_CLOEXEC, 0644);
		if (fd < 0 || moat_write_all(fd, text[i], strlen(text[i])) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: write %s", src);
		if (c->host_root)
			continue;
		if (make_mountpoint(path, false, e) < 0)
			return -1;
		if (mount(src, path, NULL, MS_BIND, NULL) < 0 ||
		    set_attr(AT_FDCWD, path, 0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
			     MOUNT_ATTR_NODEV, path, e) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: %s", path);
	}
	return 0;
}

/* A generated file over dst: written into the setup tmpfs, then a
 * read-only, nosuid, nodev, noexec clone of it is moved onto the object
 * dst names as the sandbox resolves it (RESOLVE_IN_ROOT; the last
 * component not followed: a symlinked /etc/passwd is covered itself, and
 * no link can point the mount elsewhere; with FOLLOW, a resolv.conf
 * linked into /run is covered where it leads, inside, else the link). */
static int op_gen_file(int rootfd, const struct mop *op, struct moat_err *e)
{
	static unsigned n;
	char src[32];
	snprintf(src, sizeof src, "/gen%u", n++);
	bool follow = op->flags & MOP_F_FOLLOW;
	_cleanup_close_ int dfd = follow ? open_in_root(rootfd, op->dst, true) : -1;
	if (dfd < 0)
		dfd = open_in_root(rootfd, op->dst, false);
	if (dfd < 0) {
		if ((op->flags & MOP_F_OPTIONAL) &&
		    (errno == ENOENT || errno == ENOTDIR || (follow && errno == EACCES)))
			return 0;
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", op->dst);
	}
	struct stat st;
	if (fstat(dfd, &st) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "stat %s", op->dst);
	if (S_ISDIR(st.st_mode))
		return follow ? 0 : moat_err_set(e, MOAT_E_USAGE, EISDIR, "%s", op->dst);
	{
		_cleanup_close_ int fd = open(src, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
						   O_CLOEXEC, 0444);
		if (fd < 0 || moat_write_all(fd, op->text, strlen(op->text)) < 0 ||
		    fchmod(fd, 0444) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "write %s for %s", src,
					    op->dst);
	}
	_cleanup_close_ int t = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (t < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open_tree %s", src);
	if (set_attr(t, "", AT_EMPTY_PATH, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
		     MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, op->dst, e) < 0)
		return -1;
	if (move_mount(t, "", dfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mount %s", op->dst);
	return 0;
}

static int run_op(struct jail_ctx *c, struct mop *op, int rootfd, struct moat_err *e)
{
	char src[PATH_MAX], dst[PATH_MAX];
	if (snprintf(dst, sizeof dst, NEW "%s", strcmp(op->dst, "/") ? op->dst : "") >=
	    (int)sizeof dst)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "%s", op->dst);
	if (op->src && snprintf(src, sizeof src, OLD "%s", op->src) >= (int)sizeof src)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "%s", op->src);
	switch (op->kind) {
	case MOP_TMPFS:
		return op_tmpfs(op, dst, e);
	case MOP_BIND:
		if (strcmp(op->dst, "/") == 0) {
			/* whole-host view: bind the old root over the new one */
			if (mount(OLD, NEW, NULL, MS_BIND | MS_REC, NULL) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "bind /");
			return set_attr(AT_FDCWD, NEW, AT_RECURSIVE,
					MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
					((op->flags & MOP_F_RDONLY) ? MOUNT_ATTR_RDONLY : 0),
					"/", e);
		}
		return op_bind(op, src, dst, e);
	case MOP_BIND_FD:
		if (make_mountpoint(dst, true, e) < 0)
			return -1;
		if (move_mount(op->fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno,
					    "attach id-mapped %s", op->dst);
		return 0;
	case MOP_SYMLINK:
		if (make_mountpoint(dst, true, e) < 0) /* creates parents */
			return -1;
		rmdir(dst);
		if (symlink(op->src, dst) < 0 && errno != EEXIST)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "symlink %s", op->dst);
		return 0;
	case MOP_PROC:
		return op_proc(dst, e);
	case MOP_DEV:
		return op_dev(dst, e);
	case MOP_MASK:
		return op_mask(rootfd, op, e);
	case MOP_PROTECT:
		return op_protect(c, rootfd, op, e);
	case MOP_OVERLAY:
		return op_overlay(op, src, dst, e);
	case MOP_USERS_ETC:
		return op_users_etc(c, dst, e);
	case MOP_SNAPSHOT:
		return op_snapshot(op, src, dst, e);
	case MOP_GEN_FILE:
		return op_gen_file(rootfd, op, e);
	case MOP_ROOT_RO:
		return set_attr(AT_FDCWD, NEW, 0, MOUNT_ATTR_RDONLY, "/", e);
	}
	return moat_err_set(e, MOAT_E_SYSTEM, EINVAL, "unknown mount op");
}

/* PATH keeps only the directories the finished view has: the caller's
 * ~/.pyenv/shims or ~/.cargo/bin under a private home, a hidden path, are
 * not there and would only name what the sandbox cannot see. Checked here,
 * in the tree itself (no second model of the plan), before the command
 * runs; order kept, relative entries (cwd-dependent) kept. In place: the
 * child owns a copy of the environment (clone without CLONE_VM), built by
 * the caller on the heap, and the result is never longer; no allocation
 * after clone. Every entry gone: left as it was (nothing to search). */
static void path_filter(char *const *envp)
{
	char *v = NULL;
	for (size_t i = 0; envp && envp[i] && !v; i++)
		if (strncmp(envp[i], "PATH=", 5) == 0)
			v = envp[i] + 5;
	if (!v)
		return;
	char *out = v, *p = v;
	bool kept = false;
	for (;;) {
		char *end = strchrnul(p, ':');
		size_t n = (size_t)(end - p);
		bool keep = true;
		if (n && p[0] == '/' && n < PATH_MAX) {
			char dir[PATH_MAX];
			struct stat st;
			memcpy(dir, p, n);
			dir[n] = '\0';
			keep = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
		}
		if (keep) {
			if (kept)
				*out++ = ':';
			memmove(out, p, n);
			out += n;
			kept = true;
		}
		if (!*end)
			break;
		p = end + 1;
	}
	if (kept)
		*out = '\0';
	/* else: every entry gone, PATH untouched (out == v never written past) */
}

/* inodes of the setup tmpfs that moat itself uses (mount points, masks) */
#define SKELETON_INODES 1024

int jail_mount_child(struct jail_ctx *c, struct moat_err *e)
{
	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "make / private");
	/* With a disk budget (moat serve's limits.disk) this one tmpfs holds
	 * everything the sandbox may write: the workspace, /tmp, the home,
	 * /dev/shm and an image's changes are directories of it. Bytes and
	 * inodes are both bounded (one inode per 4 KiB page, plus room for
	 * the skeleton of mount points): ENOSPC inside, never a host disk
	 * or the kernel's memory filled with empty files. */
	char opts[96] = "mode=0755";
	uint64_t disk = c->p->workspace_tmpfs;
	if (disk)
		snprintf(opts, sizeof opts, "mode=0755,size=%llu,nr_inodes=%llu",
			 (unsigned long long)disk, (unsigned long long)(disk / 4096 + SKELETON_INODES));
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "setup tmpfs");
	if (mkdir("/tmp/newroot", 0755) < 0 || mkdir("/tmp/oldroot", 0755) < 0 ||
	    mkdir("/tmp/masks", 0755) < 0 || mkdir("/tmp/masks/emptydir", 0) < 0 ||
	    mkdir("/tmp/masks/phdir", 0) < 0 || chmod("/tmp/masks/phdir", 0555) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "setup dirs");
	static const struct { const char *path; unsigned mode; } srcs[] = {
		{"/tmp/masks/empty", 0}, {"/tmp/masks/ph", 0444},
	};
	for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
		int fd = open(srcs[i].path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0);
		if (fd < 0 || fchmod(fd, srcs[i].mode) < 0) {
			int err = errno;
			if (fd >= 0)
				close(fd);
			return moat_err_set(e, MOAT_E_SYSTEM, err, "setup file");
		}
		close(fd);
	}
	if (mount("/tmp/masks", "/tmp/masks", NULL, MS_BIND, NULL) < 0 ||
	    set_attr(AT_FDCWD, "/tmp/masks", 0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
		     MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, "masks", e) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "mask sources");
	/* The new root is a directory of the setup tmpfs, bound onto itself
	 * to be a mount point for pivot_root. */
	if (mount("/tmp/newroot", "/tmp/newroot", NULL, MS_BIND, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "new root");
	if (chdir("/tmp") < 0 || syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot") < 0 ||
	    chdir("/") < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "pivot_root (setup)");

	_cleanup_close_ int rootfd = -1;
	for (size_t i = 0; i < c->nops; i++) {
		/* (Re)open the root after anything mounted on it, so masks and
		 * protections resolve in the tree the sandbox will see. */
		if (rootfd < 0) {
			rootfd = open(NEW, O_PATH | O_DIRECTORY | O_CLOEXEC);
			if (rootfd < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "open new root");
		}
		if (run_op(c, &c->ops[i], rootfd, e) < 0)
			return -1;
		if (strcmp(c->ops[i].dst, "/") == 0) {
			close(rootfd);
			rootfd = -1;
		}
	}
	if (umount2(OLD, MNT_DETACH) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "detach host root");
	if (chdir(NEW) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "detach setup root");
	path_filter(c->l->envp);
	return 0;
}
