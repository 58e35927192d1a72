/* Landlock: a second wall under the mount view. Rules follow the mount plan
 * (each op carries an access class); TCP bind/connect are denied when the
 * network is off; abstract unix sockets and signals are scoped to the
 * sandbox. Uses the newest ABI the kernel offers and masks what older ABIs
 * lack (the kernel sample's switch). Debian 12's UAPI header stops at ABI
 * 2, so the later constants (fixed kernel ABI) are defined here. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include <moat/probe.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#define LL_NET_BIND_TCP (1ULL << 0)
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_RULE_NET_PORT 2
struct ll_net_port_attr {
	__u64 allowed_access;
	__u64 port;
} __attribute__((packed));
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)

/* The ABI 6 layout of struct landlock_ruleset_attr. */
struct ll_ruleset_attr {
	__u64 handled_access_fs;
	__u64 handled_access_net;
	__u64 scoped;
};

#define FS_READ (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | \
		 LANDLOCK_ACCESS_FS_READ_DIR)
#define FS_ALL_V1 ((1ULL << 13) - 1)

int moat_probe_landlock_abi(int *err)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0,
			   LANDLOCK_CREATE_RULESET_VERSION);
	if (abi < 0) {
		if (err)
			*err = errno;
		return 0;
	}
	return (int)abi;
}

int jail_landlock_prepare(struct jail_ctx *c, struct moat_err *e)
{
	int err = 0;
	c->landlock_abi = moat_probe_landlock_abi(&err);
	if (c->landlock_abi > 0)
		return 0;
	moat_err_set(e, MOAT_E_SYSTEM, err,
		     "Landlock is not available (kernel >= 5.13 with "
		     "CONFIG_SECURITY_LANDLOCK and lsm=landlock needed)");
	return jail_degrade(c, e);
}

static __u64 fs_all(int abi)
{
	__u64 a = FS_ALL_V1;
	if (abi >= 2)
		a |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		a |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		a |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return a;
}

static __u64 class_access(enum ll_class cl, int abi)
{
	__u64 all = fs_all(abi);
	switch (cl) {
	case LL_NONE:
		return 0;
	case LL_RO:
		return FS_READ;
	case LL_RW:
		return all;
	case LL_DEV:
		return (FS_READ | LANDLOCK_ACCESS_FS_WRITE_FILE |
			LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV) & all;
	case LL_PROC:
		return FS_READ | LANDLOCK_ACCESS_FS_WRITE_FILE;
	}
	return 0;
}

static int add_path_rule(int ruleset, const char *path, __u64 access, int abi,
			 struct moat_err *e)
{
	_cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "landlock: open %s", path);
	}
	struct landlock_path_beneath_attr pb = {.allowed_access = access,
						.parent_fd = fd};
	/* Rights that only make sense on directories must not be asked for
	 * on a file (EINVAL): keep the file-applicable ones. */
	struct stat st;
	if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
		pb.allowed_access &= LANDLOCK_ACCESS_FS_EXECUTE |
				     LANDLOCK_ACCESS_FS_WRITE_FILE |
				     LANDLOCK_ACCESS_FS_READ_FILE |
				     (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0) |
				     (abi >= 5 ? LANDLOCK_ACCESS_FS_IOCTL_DEV : 0);
	if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "landlock rule %s", path);
	return 0;
}

int jail_landlock_child(struct jail_ctx *c, struct moat_err *e)
{
	int abi = c->landlock_abi;
	if (abi <= 0)
		return 0;
	struct ll_ruleset_attr attr = {.handled_access_fs = fs_all(abi)};
	size_t size = sizeof attr.handled_access_fs;
	/* Degrade per ABI: each version adds to what can be handled. */
	switch (abi) {
	default: /* 6 and newer */
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
		size = sizeof attr;
		/* fall through */
	case 5:
	case 4:
		if (c->p->net == MOAT_NET_NONE) {
			attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
			if (size < 2 * sizeof(__u64))
				size = 2 * sizeof(__u64);
		}
		break;
	case 3:
	case 2:
	case 1:
		break;
	}
	_cleanup_close_ int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
	if (rs < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "landlock_create_ruleset");
	/* "/" itself is listable; everything else comes from the mount plan. */
	if (add_path_rule(rs, "/", LANDLOCK_ACCESS_FS_READ_DIR, abi, e) < 0)
		return -1;
	for (size_t i = 0; i < c->nops; i++) {
		const struct mop *op = &c->ops[i];
		__u64 a = class_access(op->ll, abi);
		if (a && add_path_rule(rs, op->dst, a, abi, e) < 0)
			return -1;
		/* /dev is read-mostly, but shared memory lives below it */
		if (op->kind == MOP_DEV &&
		    add_path_rule(rs, "/dev/shm", class_access(LL_RW, abi), abi, e) < 0)
			return -1;
	}
	/* Agent mode: pid 1 may run moat's agent binary, that file alone (it
	 * is not in the sandbox's view; the descriptor is pid 1's). */
	if (c->l->agent) {
		struct landlock_path_beneath_attr pb = {
			.allowed_access = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE,
			.parent_fd = c->l->agent_exe};
		if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "landlock rule for the agent");
	}
	/* TCP 53 (loopback is the only interface): the resolver's listener,
	 * for a client that retries over TCP (net.c) */
	if (c->p->net == MOAT_NET_NONE && abi >= 4) {
		struct ll_net_port_attr np = {.allowed_access = LL_NET_CONNECT_TCP,
					      .port = MOAT_DNS_PORT};
		if (syscall(SYS_landlock_add_rule, rs, LL_RULE_NET_PORT, &np, 0) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "landlock rule for port 53");
	}
	/* With the gateway, the way out is TCP to its two ports on loopback. */
	if (c->p->gateway && abi >= 4) {
		const __u64 ports[] = {MOAT_GATE_HTTP_PORT, MOAT_GATE_SOCKS_PORT};
		for (size_t i = 0; i < 2; i++) {
			struct ll_net_port_attr np = {.allowed_access = LL_NET_CONNECT_TCP,
						      .port = ports[i]};
			if (syscall(SYS_landlock_add_rule, rs, LL_RULE_NET_PORT, &np, 0) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno,
						    "landlock rule for port %llu",
						    (unsigned long long)ports[i]);
		}
	}
	/* moat serve's sessions: the control plane's listener on loopback */
	if (c->p->control && abi >= 4) {
		struct ll_net_port_attr np = {.allowed_access = LL_NET_CONNECT_TCP,
					      .port = MOAT_CONTROL_PORT};
		if (syscall(SYS_landlock_add_rule, rs, LL_RULE_NET_PORT, &np, 0) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "landlock rule for port %d",
					    MOAT_CONTROL_PORT);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_NO_NEW_PRIVS");
	if (syscall(SYS_landlock_restrict_self, rs, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "landlock_restrict_self");
	return 0;
}
