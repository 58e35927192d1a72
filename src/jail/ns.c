/* Namespaces and id maps.
 *
 * Rootless: the command keeps the caller's uid (map "U U 1").
 * Run by root: the sandbox runs as an unprivileged host uid (MOAT_HOST_UID)
 * and sees itself as uid 1000; host-backed writable directories are
 * mounted id-mapped so that files written there belong to the directory's
 * owner and not to that unprivileged uid (mount_setattr(2), MOUNT_ATTR_IDMAP).
 * One code path for both: the mode is the host_root field. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#define MOAT_HOST_UID 65534 /* nobody: owns nothing worth having */
#define MOAT_INSIDE_ID 1000

int jail_ns_prepare(struct jail_ctx *c, struct moat_err *e)
{
	c->host_root = geteuid() == 0;
	if (c->p->users)
		return jail_users_prepare(c, e);
	if (c->host_root) {
		c->uid_out = MOAT_HOST_UID;
		c->gid_out = MOAT_HOST_UID;
		c->uid_in = MOAT_INSIDE_ID;
		c->gid_in = MOAT_INSIDE_ID;
	} else {
		c->uid_out = c->uid_in = geteuid();
		c->gid_out = c->gid_in = getegid();
	}
	return 0;
}

static int write_maps(pid_t pid, const char *uidmap, const char *gidmap,
		      bool deny_setgroups, struct moat_err *e)
{
	char path[64];
	if (deny_setgroups) {
		snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
		if (moat_write_file(path, "deny", e) < 0)
			return moat_err_prefix(e, "user namespace");
	}
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
	if (moat_write_file(path, uidmap, e) < 0)
		return moat_err_prefix(e, "user namespace uid map");
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
	if (moat_write_file(path, gidmap, e) < 0)
		return moat_err_prefix(e, "user namespace gid map");
	return 0;
}

static int idle_child(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return 0;
}

/* A user namespace mapping on-disk owner (uid, gid) to the sandbox's host
 * ids, used only as the idmapping of a mount. Returns an ns fd.
 * The namespace needs a process only while its maps are written and the
 * fd opened: a CLONE_VM child on a small stack of its own (no page-table
 * copy) that never has to run. It is killed at once but reaped only in
 * jail_ns_free(), so we never wait for it to be scheduled. */
static int idmap_userns_maps(struct jail_ctx *c, const char *um, const char *gm,
			     struct moat_err *e)
{
	if (c->nhelpers == JAIL_MAX_HELPERS)
		return moat_err_set(e, MOAT_E_USAGE, 0, "too many writable paths");
	size_t sz = 16384;
	char *stack = malloc(sz);
	if (!stack)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "helper stack");
	pid_t pid = clone(idle_child, stack + sz, CLONE_NEWUSER | CLONE_VM | SIGCHLD, NULL);
	if (pid < 0) {
		free(stack);
		return moat_err_set(e, MOAT_E_SYSTEM, errno,
				    "id-mapped mount: cannot create a user namespace");
	}
	c->helpers[c->nhelpers] = pid;
	c->helper_stacks[c->nhelpers++] = stack;
	char path[64];
	int fd = -1;
	if (write_maps(pid, um, gm, false, e) == 0) {
		snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			moat_err_set(e, MOAT_E_SYSTEM, errno, "open %s", path);
	}
	kill(pid, SIGKILL);
	return fd;
}

/* The namespace mapping on-disk owner (uid, gid) to the sandbox's host
 * ids: one per distinct owner, kept until jail_ns_free (an image's many
 * layers, normally all root's, share one). Not to be closed by the caller. */
static int idmap_userns(struct jail_ctx *c, uid_t uid, gid_t gid, struct moat_err *e)
{
	for (size_t i = 0; i < c->nidmaps; i++)
		if (c->idmaps[i].uid == uid && c->idmaps[i].gid == gid)
			return c->idmaps[i].fd;
	if (c->nidmaps == JAIL_MAX_HELPERS)
		return moat_err_set(e, MOAT_E_USAGE, 0, "too many writable paths or image "
				    "layers of distinct owners");
	char um[64], gm[64];
	snprintf(um, sizeof um, "%u %u 1\n", (unsigned)uid, (unsigned)c->uid_out);
	snprintf(gm, sizeof gm, "%u %u 1\n", (unsigned)gid, (unsigned)c->gid_out);
	int fd = idmap_userns_maps(c, um, gm, e);
	if (fd >= 0)
		c->idmaps[c->nidmaps++] = (struct jail_idmap){uid, gid, fd};
	return fd;
}

void jail_ns_free(struct jail_ctx *c)
{
	for (size_t i = 0; i < c->nidmaps; i++)
		close(c->idmaps[i].fd);
	c->nidmaps = 0;
	for (size_t i = 0; i < c->nhelpers; i++) {
		while (waitpid(c->helpers[i], NULL, __WALL) < 0 && errno == EINTR)
			;
		free(c->helper_stacks[i]);
	}
	c->nhelpers = 0;
}

/* Root mode: every host-backed writable bind becomes a detached id-mapped
 * mount created here (it needs host privilege) and attached by the child.
 * So does an image's lower layer (MOP_OVERLAY keeps its kind), read-only:
 * its owner (root, normally) becomes the sandbox's user, so that overlayfs,
 * mounted inside the sandbox's user namespace, can copy its files up. */
int jail_ns_prepare_idmapped(struct jail_ctx *c, struct mop *op, struct moat_err *e)
{
	struct stat st;
	if (stat(op->src, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s", op->src);
	_cleanup_close_ int ns = -1;
	int ns_shared = -1;
	if (c->users && op->kind != MOP_OVERLAY) {
		/* users mode: the owner is user (1000) inside, and what the
		 * sandbox's other ids (root...) create keeps their host id of
		 * the sandbox's range, instead of failing with EOVERFLOW */
		char um[192], gm[192];
		const uint32_t b = c->users_base, g = c->users_gbase;
		snprintf(um, sizeof um, "%u %u 1\n%u %u 1000\n%u %u 64535\n",
			 (unsigned)st.st_uid, b + 1000, b, b, b + 1001, b + 1001);
		snprintf(gm, sizeof gm, "%u %u 1\n%u %u 1000\n%u %u 64535\n",
			 (unsigned)st.st_gid, g + 1000, g, g, g + 1001, g + 1001);
		if ((st.st_uid >= b && st.st_uid - b < 65536) ||
		    (st.st_gid >= g && st.st_gid - g < 65536))
			return moat_err_set(e, MOAT_E_USAGE, 0, "%s belongs to the sandbox's "
					    "own id range", op->src);
		ns = idmap_userns_maps(c, um, gm, e);
		if (ns < 0)
			return -1;
	} else {
		ns_shared = idmap_userns(c, st.st_uid, st.st_gid, e);
		if (ns_shared < 0)
			return -1;
	}
	_cleanup_close_ int fd = open_tree(AT_FDCWD, op->src,
					   OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open_tree %s", op->src);
	bool lower = op->kind == MOP_OVERLAY;
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			    (lower ? MOUNT_ATTR_RDONLY : 0),
		.userns_fd = (uint64_t)(ns >= 0 ? ns : ns_shared),
	};
	if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno,
				    "id-mapped mount of %s (kernel or filesystem "
				    "without MOUNT_ATTR_IDMAP)", op->src);
	op->fd = steal_fd(&fd);
	if (!lower)
		op->kind = MOP_BIND_FD;
	return 0;
}

int jail_ns_idmap_tree(struct jail_ctx *c, const char *path, bool ro, struct moat_err *e)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s", path);
	int ns = idmap_userns(c, st.st_uid, st.st_gid, e);
	if (ns < 0)
		return -1;
	_cleanup_close_ int fd = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open_tree %s", path);
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			    (ro ? MOUNT_ATTR_RDONLY : 0),
		.userns_fd = (uint64_t)ns,
	};
	if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno,
				    "id-mapped mount of %s (kernel or filesystem "
				    "without MOUNT_ATTR_IDMAP)", path);
	return steal_fd(&fd);
}

int jail_ns_prepare_idmapped_range(struct jail_ctx *c, struct mop *op, struct moat_err *e)
{
	/* one namespace serves every lower layer (the same maps) */
	if (c->users_range_ns < 0) {
		char um[64], gm[64];
		snprintf(um, sizeof um, "0 %u 65536\n", c->users_base);
		snprintf(gm, sizeof gm, "0 %u 65536\n", c->users_gbase);
		c->users_range_ns = idmap_userns_maps(c, um, gm, e);
		if (c->users_range_ns < 0)
			return -1;
	}
	int ns = c->users_range_ns;
	_cleanup_close_ int fd = open_tree(AT_FDCWD, op->src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "open_tree %s", op->src);
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			    MOUNT_ATTR_RDONLY,
		.userns_fd = (uint64_t)ns,
	};
	if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno,
				    "users mode: id-mapped lower layer %s (kernel or "
				    "filesystem without MOUNT_ATTR_IDMAP)", op->src);
	op->fd = steal_fd(&fd);
	return 0;
}

pid_t jail_ns_clone(struct jail_ctx *c, struct moat_err *e)
{
	unsigned long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |
			      CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
	if (c->p->net == MOAT_NET_NONE)
		flags |= CLONE_NEWNET;
	/* Fork-like clone (no new stack): the child continues here. */
	pid_t pid = (pid_t)syscall(SYS_clone, flags, 0, 0, 0, 0);
	if (pid < 0) {
		int err = errno;
		if (err == EPERM || err == ENOSPC || err == EINVAL)
			return moat_err_set(e, MOAT_E_SYSTEM, err,
					    "cannot create namespaces (user "
					    "namespaces disabled? see moat doctor)");
		return moat_err_set(e, MOAT_E_SYSTEM, err, "clone");
	}
	return pid;
}

int jail_ns_parent(struct jail_ctx *c, pid_t pid, struct moat_err *e)
{
	if (c->users)
		return jail_users_parent(c, pid, e);
	char um[64], gm[64];
	snprintf(um, sizeof um, "%u %u 1\n", (unsigned)c->uid_in, (unsigned)c->uid_out);
	snprintf(gm, sizeof gm, "%u %u 1\n", (unsigned)c->gid_in, (unsigned)c->gid_out);
	/* Rootless must deny setgroups(2) to map a gid; root keeps it so the
	 * child can drop root's supplementary groups. */
	return write_maps(pid, um, gm, !c->host_root, e);
}

int jail_ns_child(struct jail_ctx *c, struct moat_err *e)
{
	/* Supplementary groups are kernel gids: root's group 0 would still
	 * grant group access on the host filesystem. Drop them. */
	if ((c->host_root || c->users) && setgroups(0, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "setgroups");
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_KEEPCAPS");
	if (setresgid(c->gid_in, c->gid_in, c->gid_in) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "setresgid %u", c->gid_in);
	if (setresuid(c->uid_in, c->uid_in, c->uid_in) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "setresuid %u", c->uid_in);
	/* setresuid cleared the effective set; the mount setup needs it back
	 * (these are capabilities over our own namespaces only). */
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "capget");
	d[0].effective = d[0].permitted;
	d[1].effective = d[1].permitted;
	if (syscall(SYS_capset, &h, d) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "capset");
	if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_KEEPCAPS");
	if (sethostname("moat", 4) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "sethostname");
	return 0;
}
