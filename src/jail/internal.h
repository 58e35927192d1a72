/* Engine internals shared by the files of src/jail/. Each isolation concern
 * has its own file; functions are named by the side of clone() that runs
 * them: *_prepare (host, before clone), *_parent (host, after clone),
 * *_child (inside the sandbox, before the command runs). */
#ifndef MOAT_JAIL_INTERNAL_H
#define MOAT_JAIL_INTERNAL_H

#include <moat/jail.h>
#include <moat/policy.h>
#include <moat/strv.h>

#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- mount plan: a compiled list of ops run by one switch ------------- */
enum mop_kind {
	MOP_TMPFS,   /* dst: a fresh, empty private directory (mode), tmpfs-backed */
	MOP_BIND,    /* src (host path) -> dst */
	MOP_BIND_FD, /* detached mount fd (idmapped workspace) -> dst */
	MOP_SYMLINK, /* dst -> src (link text) */
	MOP_PROC,    /* dst: fresh procfs + masks */
	MOP_DEV,     /* dst: minimal /dev */
	MOP_MASK,    /* dst: hide (empty read-only file or dir), if visible */
	MOP_PROTECT, /* dst: writable root; write-protect mandatory names */
	MOP_ROOT_RO, /* make the new root tmpfs read-only */
	MOP_OVERLAY, /* src (host rootfs) read-only, under a writable overlay
		      * on a private tmpfs (size), as the new root; users
		      * mode: a system directory over its host one */
	MOP_USERS_ETC, /* users mode: /etc/passwd and /etc/group of root and user */
	MOP_SNAPSHOT,  /* users mode as root: a private, writable copy of src made at
			* start, of what an unprivileged user may read there */
	MOP_RESOLV,    /* dst (/etc/resolv.conf): the sandbox's resolver (net.c) */
};

#define MOP_F_RDONLY 1u
#define MOP_F_OPTIONAL 2u /* source may be missing */
#define MOP_F_SHARED 4u   /* overlay: its changes go to the setup tmpfs (one disk budget) */

/* Landlock access classes attached to mount ops. */
enum ll_class { LL_NONE = 0, LL_RO, LL_RW, LL_DEV, LL_PROC };

struct mop {
	enum mop_kind kind;
	unsigned flags;
	enum ll_class ll;
	char *src;
	char *dst;
	int fd;
	unsigned mode;
	uint64_t size;            /* MOP_TMPFS: >0 = its own tmpfs of this size */
	char *host;               /* MOP_PROTECT: the root's host path, where the
				   * host makes placeholders; NULL = none (tmpfs) */
	const char *const *names; /* MOP_PROTECT: relative names */
	struct moat_strv extra;   /* MOP_PROTECT: user deny-write paths (relative) */
	struct moat_strv repos;   /* MOP_PROTECT: repositories to scan as nested
				   * ones at any depth (relative) */
	struct moat_strv watch;   /* MOP_PROTECT: existing-only names missing at start */
	struct moat_strv secrets; /* MOP_PROTECT: missing secrets paths (relative):
				   * parents created for real, the leaf protected */
	bool user_owned;          /* MOP_TMPFS: users mode, owned by user (1000) */
	int ph_pin;               /* MOP_PROTECT: O_PATH on the inode the host's
				   * file placeholders share, or -1 */
};

/* ---- the per-spawn context ------------------------------------------- */
#define JAIL_MAX_HELPERS 32
struct jail_ctx {
	const struct moat_policy *p;
	const struct moat_launch *l;
	bool host_root;     /* moat runs as host uid 0 */
	uid_t uid_in, uid_out;
	gid_t gid_in, gid_out;
	int ws_fd;          /* root mode: detached idmapped workspace mount */
	struct mop *ops;
	size_t nops;
	int landlock_abi;   /* 0: skip (degraded) */
	bool use_seccomp;
	int sync_rd, sync_wr; /* parent -> child (socket pair): maps written, go
			       * on; the child keeps its end through set-up to
			       * notice a host that died (jail_host_gone) */
	volatile int *go;     /* shared page: [0] the same news, seen without a
			       * wakeup; [1] placeholders created (JAIL_GO_PROTECT) */
	int err_rd, err_wr;   /* child -> parent: setup error or EOF on exec */
	int st_rd, st_wr;     /* child -> parent: exit code when all are gone */
	pid_t helpers[JAIL_MAX_HELPERS]; /* idmap user-namespace holders, to reap */
	char *helper_stacks[JAIL_MAX_HELPERS];
	size_t nhelpers;
	int gate_sp[2];     /* gateway mode: child -> host, the listening sockets */
	int gate_fds[2];    /* host: received (HTTP proxy, SOCKS5) */
	int gate_child[2];  /* child: its copies (kept for an agent) */
	int tty_master;     /* host: terminal mode's pty master (pty.c) */
	int dns_fds[2];     /* host: the resolver's sockets (UDP, TCP 127.0.0.1:53) */
	int64_t quota[MOAT_QUOTAS];     /* ceilings the child sets (quota.c) */
	bool users;                     /* users mode (users.c) */
	uint32_t users_base, users_gbase; /* host id of inside 0 (rootless: the subid
					 * range, inside 1000 being the caller) */
	int users_lock;                 /* moat run as root: the slot's lock, or -1 */
	int users_range_ns;             /* root: the id-map of system lower layers, or -1 */
	char *users_passwd, *users_group; /* the sandbox's /etc/passwd and /etc/group */
	struct moat_strv protect_roots; /* host paths with placeholders */
	int *locks;                     /* shared flock on each of them */
	size_t nlocks;
};

#define JAIL_GO_PROTECT 1
/* The shared page: two ints of news, then the child's report of nested
 * repositories without a .git/commondir ("<op index>:<rel>/.git/commondir\0"...),
 * which the host watches like the top-level one. */
#define JAIL_SHARED_SIZE 4096
#define JAIL_REPORT(go) ((char *)((go) + 2))
#define JAIL_REPORT_CAP (JAIL_SHARED_SIZE - 2 * sizeof(int))

/* Message a child sends when setup fails. One write, < PIPE_BUF. */
struct jail_msg {
	int kind;
	int errnum;
	char msg[1024];
};

/* Send e over fd and _exit(125/126/127). Used only in the child. */
__attribute__((noreturn)) void jail_child_fail(int fd, const struct moat_err *e);
/* The host closed its end of the sync socket (it died): checked by the child. */
bool jail_host_gone(const struct jail_ctx *c);

/* ns.c */
int jail_ns_prepare(struct jail_ctx *c, struct moat_err *e);
pid_t jail_ns_clone(struct jail_ctx *c, struct moat_err *e);
int jail_ns_parent(struct jail_ctx *c, pid_t pid, struct moat_err *e);
int jail_ns_child(struct jail_ctx *c, struct moat_err *e);
/* Reap the helper processes of id-mapped mounts. */
void jail_ns_free(struct jail_ctx *c);
/* Root mode: turn a writable bind op into a detached id-mapped mount. */
int jail_ns_prepare_idmapped(struct jail_ctx *c, struct mop *op, struct moat_err *e);

/* users.c: users mode. prepare: the id range (a slot or the caller's
 * subordinate ids); parent: the maps (newuidmap rootless); caps: Docker's
 * set for root, the final identity of moat run's command. */
int jail_users_prepare(struct jail_ctx *c, struct moat_err *e);
int jail_users_parent(struct jail_ctx *c, pid_t pid, struct moat_err *e);
int jail_users_caps(struct jail_ctx *c, struct moat_err *e);
void jail_users_free(struct jail_ctx *c);
uint64_t jail_users_capset(void);
/* The sandbox's /etc/passwd and /etc/group (malloc'd; aborts on OOM). */
void jail_users_accounts(char **passwd, char **group);
/* Root: a system directory as an overlay's lower layer, its ids 0..65535
 * shown as the sandbox's (host root's files are root's inside). */
int jail_ns_prepare_idmapped_range(struct jail_ctx *c, struct mop *op, struct moat_err *e);

/* mount.c */
int jail_mount_prepare(struct jail_ctx *c, struct moat_err *e);
int jail_mount_child(struct jail_ctx *c, struct moat_err *e);
void jail_mount_free(struct jail_ctx *c);

/* Mask sources, in a read-only, nosuid, nodev, noexec mount of the setup
 * tmpfs (clones of it inherit those flags). */
#define JAIL_EMPTY_FILE "/masks/empty"
#define JAIL_EMPTY_DIR "/masks/emptydir"

/* mount.c helpers shared with protect.c: mount a read-only copy of `src`
 * onto the object `fd` refers to (which may be a symlink); bind `fd` onto
 * itself read-only. */
int jail_mount_onto(const char *src, int fd, const char *what, struct moat_err *e);
int jail_mount_ro_self(int fd, const char *what, struct moat_err *e);
/* Bind a directory onto itself, writable: a mount point cannot be renamed
 * or removed, so what is protected below it stays where it is. */
int jail_mount_pin(int fd, const char *what, struct moat_err *e);

/* protect.c: mandatory write-deny inside a writable root */
int jail_protect_child(int rootfd, const char *root, const char *const *names,
		       const struct moat_strv *extra, const struct moat_strv *secrets,
		       const struct moat_strv *repos, int opidx, char *report, size_t report_cap,
		       struct moat_err *e);
/* Host side, right after clone (in parallel with the child's first mounts):
 * create the placeholders the child will mount over. Best effort: what is
 * not created here the child creates itself. */
void jail_protect_parent(struct mop *op);
/* Host side, after the run: remove placeholders this or earlier runs left,
 * unless another sandbox still uses the root. */
void jail_protect_cleanup(const struct mop *op);
/* Host side, after the run: remove what the sandbox created at watched
 * names (moat_mandatory_deny_existing); warn(arg, msg) for each. */
void jail_protect_sweep(const char *root, const struct moat_strv *watch,
			void (*warn)(void *, const char *), void *arg);

/* landlock.c */
int jail_landlock_prepare(struct jail_ctx *c, struct moat_err *e);
int jail_landlock_child(struct jail_ctx *c, struct moat_err *e);

/* seccomp.c */
int jail_seccomp_prepare(struct jail_ctx *c, struct moat_err *e);
int jail_seccomp_child(struct jail_ctx *c, struct moat_err *e);

/* quota.c: per-user kernel counts. prepare: the policy's values, or the
 * defaults for this caller; child: write them into the sandbox's user
 * namespace (/proc/sys/user/max_*) and set the rlimits, while it still
 * has CAP_SYS_RESOURCE there and after every namespace set-up makes. */
int jail_quota_prepare(struct jail_ctx *c, struct moat_err *e);
int jail_quota_child(struct jail_ctx *c, struct moat_err *e);

/* pty.c: terminal mode (launch.tty). child: once the sandbox's /dev and
 * final identity are in place, make a pty from its own /dev/ptmx, put the
 * slave on 0, 1 and 2 (the caller's stdio goes) and send the master to the
 * host on the sync socket; parent: receive it (after the exec). */
int jail_pty_child(struct jail_ctx *c, struct moat_err *e);
int jail_pty_parent(struct jail_ctx *c, struct moat_err *e);

/* caps.c: rlimits, securebits, capabilities, no_new_privs */
int jail_caps_child(struct jail_ctx *c, struct moat_err *e);

/* net.c: the gateway's listening sockets inside the sandbox's netns, and
 * the resolver's (every sandbox with its own network: src/base/dnsd.h) */
#define MOAT_GATE_HTTP_PORT 3128
#define MOAT_GATE_SOCKS_PORT 1080
#define MOAT_DNS_PORT 53
int jail_net_prepare(struct jail_ctx *c, struct moat_err *e);
int jail_net_child(struct jail_ctx *c, int fds_out[2], struct moat_err *e);
int jail_net_parent(struct jail_ctx *c, struct moat_err *e);
/* MOP_RESOLV, in the child's mount plan: "nameserver 127.0.0.1" shown
 * read-only at /etc/resolv.conf (or where its symlink leads, inside). */
int jail_net_resolv_child(int rootfd, const char *dst, struct moat_err *e);
/* The file it shows, written at path (in the setup tmpfs, before the
 * mask sources turn read-only). */
int jail_net_resolv_file(const char *path, struct moat_err *e);
#define JAIL_RESOLV_FILE "/masks/resolv.conf"

/* cgcheck.c: this process's cgroup for a v1 controller, or v2's (NULL) */
int jail_own_cgroup(const char *controller, char *out, size_t cap, struct moat_err *e);
/* v2: the cgroup moat makes its cgroups in: its own, or the parent of the
 * leaf moat-<pid>-self it moved itself into (cgroup.c v2_create). */
int jail_v2_base(char *out, size_t cap, struct moat_err *e);
/* v2: is this process the only one in cgroup directory dir? */
bool jail_v2_only_self(const char *dir);
/* cgroup.c */
struct jail_cgroup;
int jail_cgroup_prepare(const struct moat_policy *p, struct jail_cgroup **out,
			struct moat_err *e);
int jail_cgroup_parent(struct jail_cgroup *cg, pid_t pid, struct moat_err *e);
bool jail_cgroup_oom(struct jail_cgroup *cg);
void jail_cgroup_destroy(struct jail_cgroup *cg);
/* Hand the directories over (appended to *out) and free the struct. */
void jail_cgroup_release(struct jail_cgroup *cg, struct moat_strv *out);
void jail_cgroup_list(const struct jail_cgroup *cg, struct moat_strv *out); /* copies */

/* Report a degraded layer (allow_degraded) or fail. */
/* e holds the reason: with allow_degraded, warn and return 0; else -1. */
int jail_degrade(struct jail_ctx *c, struct moat_err *e);

#endif
