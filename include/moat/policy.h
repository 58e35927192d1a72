/* The sandbox policy: one validated struct that every front-end fills and
 * the engine only reads. Sources are applied in this order, later ones
 * winning for scalars and appending to lists:
 *   defaults <- --mode preset <- --policy FILE <- --srt-settings FILE <- flags
 * then moat_policy_finalize() resolves and validates it once. */
#ifndef MOAT_POLICY_H
#define MOAT_POLICY_H

#include <moat/err.h>
#include <moat/strv.h>

#include <stdbool.h>
#include <stdint.h>

enum moat_net_mode {
	MOAT_NET_NONE = 0, /* own network namespace, loopback only */
	MOAT_NET_HOST,     /* the host's network (explicit opt-out) */
};

/* What of the host filesystem is visible before allow/deny lists apply. */
enum moat_fs_base {
	MOAT_FS_SYSTEM = 0, /* /usr /bin /sbin /lib* /etc read-only (default) */
	MOAT_FS_HOST_READ,  /* the whole host read-only (read-only / workspace-write modes, srt) */
	MOAT_FS_HOST_WRITE, /* the whole host writable (danger-full-access) */
};

/* Per-user kernel counts that cgroups do not bound (docs/policy.md
 * "quotas"). Each sandbox's user namespace gets its own ceiling: a
 * /proc/sys/user/max_* of that namespace, or an rlimit (soft and hard). */
enum moat_quota {
	MOAT_Q_INOTIFY_INSTANCES,
	MOAT_Q_INOTIFY_WATCHES,
	MOAT_Q_FANOTIFY_GROUPS,
	MOAT_Q_FANOTIFY_MARKS,
	MOAT_Q_USER_NS,
	MOAT_Q_MNT_NS,
	MOAT_Q_IPC_NS,
	MOAT_Q_PID_NS,
	MOAT_Q_NET_NS,
	MOAT_Q_UTS_NS,
	MOAT_Q_CGROUP_NS,
	MOAT_Q_TIME_NS,
	MOAT_Q_MQ_BYTES,
	MOAT_Q_SIGPENDING,
	MOAT_Q_NPROC,
	MOAT_Q_MEMLOCK,
	MOAT_QUOTAS
};

struct moat_quota_info {
	const char *name;   /* policy key, --quota NAME */
	const char *sysctl; /* file in /proc/sys/user, or NULL */
	int rlimit;         /* RLIMIT_*, when sysctl is NULL */
	int64_t def;        /* default ceiling ... */
	unsigned frac;      /* ... at most the caller's own limit / frac (0: def) */
	int64_t max;        /* largest accepted value */
};
extern const struct moat_quota_info moat_quota_info[MOAT_QUOTAS];
/* The index of a quota key, or -1. */
int moat_quota_find(const char *name);
/* "NAME=N" (--quota): sets q[NAME]. Errors name the key. */
int moat_quota_parse(int64_t q[MOAT_QUOTAS], const char *arg, struct moat_err *e);
/* A value for key i: an integer from 0 to its max. */
int moat_quota_check(int i, int64_t v, struct moat_err *e);

struct moat_policy {
	char *workspace;      /* NULL = current directory */
	char *workspace_at;   /* where the workspace appears inside; NULL = the
			       * same path (moat serve: "/workspace") */
	char *rootfs;         /* a root filesystem image (host directory) seen
			       * read-only under a private writable overlay
			       * instead of the host's system directories */
	uint64_t rootfs_size; /* bytes the overlay may hold; 0 = tmpfs default */
	struct moat_strv rootfs_layers; /* an image of several layers (host
					 * directories, top first), each
					 * id-mapped on its own under root and
					 * stacked as the overlay's lowerdirs;
					 * rootfs alone is the one layer */
	char *rootfs_upper;   /* a host directory holding upper/ and work/: the
			       * image's changes kept on disk (moat serve: the
			       * sandbox's fs/, snapshots); NULL: in a tmpfs.
			       * upper/ and work/ are created when missing;
			       * work/ is emptied at every start. One sandbox
			       * at a time (an exclusive lock while it runs) */
	bool freezer;         /* a freezer cgroup even without limits (moat
			       * serve: pause/resume, moat_cgroup_freeze) */
	uint64_t workspace_tmpfs; /* >0: the workspace is private and in
				   * memory, and with /tmp, the home, /dev/shm
				   * and an image's changes shares one tmpfs
				   * of this many bytes (and one inode per
				   * 4 KiB): moat serve's disk limit */
	bool workspace_write; /* false in read-only mode */
	enum moat_fs_base fs_base;
	struct moat_strv allow_read, deny_read, allow_write, deny_write;
	struct moat_strv protect_repos; /* absolute paths inside a writable root:
					 * git repositories placed there before
					 * the start (moat serve's git_repo
					 * entries), protected like a nested
					 * repository whatever their depth */
	enum moat_net_mode net;
	struct moat_strv net_allow, net_deny; /* domain patterns (gateway) */
	struct moat_strv net_secrets;  /* "NAME@host1,host2" (gateway) */
	struct moat_strv net_resolve;  /* "HOST[:PORT]:ADDR" pins (gateway) */
	bool gateway;         /* set by finalize: no network but through the
			       * egress gateway (an allowlist was given) */
	bool control;         /* moat serve's sessions: a listener on
			       * 127.0.0.1:MOAT_CONTROL_PORT inside (net NONE
			       * only; refused otherwise), handed to the host
			       * like the gateway's, Landlock allowing TCP
			       * connect to it (docs/control-plane.md) */
	struct moat_strv env;                 /* "NAME" (pass) or "NAME=VALUE" */
	uint64_t memory;     /* bytes; 0 = no limit */
	uint64_t pids;       /* 0 = no limit */
	uint64_t cpu_milli;  /* 1000 = one CPU; 0 = no limit */
	uint64_t timeout_ms; /* 0 = none */
	int64_t quotas[MOAT_QUOTAS]; /* -1 = the default (moat_jail_quota_defaults) */
	/* Users mode (docs/policy.md "Users mode"): inside ids 0..65535 map
	 * to a host range of the sandbox's own (root: a per-sandbox slot of
	 * a reserved band; rootless: the caller's /etc/subuid range through
	 * newuidmap, the caller itself being 1000), root (0) keeps Docker's
	 * default capabilities within the sandbox's user namespace, and the
	 * system directories are private copy-on-write overlays (root only;
	 * rootless they stay read-only). */
	bool users;
	bool users_root;      /* moat run: the command runs as root (0), else as user (1000);
			       * an agent always starts as root */
	int32_t users_slot;   /* root: the id slot (MOAT_USERS_SLOTS), -1 = the
			       * engine takes a free one of its own half */
	bool allow_degraded;
	struct moat_strv warnings; /* for the front-end to print */
	struct moat_strv hidden;   /* set by finalize: secrets to mask */
	struct moat_strv origins;  /* "PATH\x1fWHERE": a path's source, for messages */
	bool finalized;
};

/* At most this many image layers (rootfs_layers). Finalize makes rootfs
 * and rootfs_layers agree: rootfs alone becomes the one layer, layers
 * alone set rootfs to the top one (so "p->rootfs" means "an image"). */
#define MOAT_ROOTFS_LAYERS_MAX 128

/* Users mode's host id band (run as root): slot s owns host ids
 * MOAT_USERS_BAND + s * 65536 .. + 65535, for uids and gids alike. Slots
 * below MOAT_USERS_SLOTS / 2 are moat serve's (recorded in its store), the
 * others moat run's (held by a lock file while the run lasts). */
#define MOAT_USERS_BAND 0x80000000u
#define MOAT_USERS_SLOTS 4096
#define MOAT_USERS_UID 1000 /* "user" inside; root is 0 */

/* Secure defaults: system dirs read-only, workspace = cwd read-write, no
 * network, no limits, nothing of the caller's environment but the basics. */
void moat_policy_init(struct moat_policy *p);
void moat_policy_free(struct moat_policy *p);

/* Codex CLI presets: "read-only", "workspace-write", "danger-full-access". */
int moat_policy_set_mode(struct moat_policy *p, const char *mode,
			 struct moat_err *e);

/* Native JSON policy (docs/policy.md). Unknown keys and wrong types are
 * errors naming the file and the key path. Relative paths are taken
 * against cwd, "~" against home. */
int moat_policy_load_json(struct moat_policy *p, const char *file,
			  const char *cwd, const char *home, struct moat_err *e);
int moat_policy_load_json_string(struct moat_policy *p, const char *json,
				 const char *name, const char *cwd,
				 const char *home, struct moat_err *e);

/* Anthropic sandbox-runtime settings file (filesystem + network keys). */
int moat_policy_load_srt(struct moat_policy *p, const char *file,
			 const char *cwd, const char *home, struct moat_err *e);
int moat_policy_load_srt_string(struct moat_policy *p, const char *json,
				const char *name, const char *cwd,
				const char *home, struct moat_err *e);

/* Add one path to a list: made absolute against cwd/home. `what` names the
 * source for error messages (e.g. "--allow-read"). */
int moat_policy_add_path(struct moat_strv *list, const char *path,
			 const char *cwd, const char *home, const char *what,
			 struct moat_err *e);

/* Remember where a path came from ("--allow-read", "p.json:
 * filesystem.allow_read[2]") so that finalize's errors can name it. */
void moat_policy_note_origin(struct moat_policy *p, const char *path,
			     const char *where);

/* A secret for the gateway: "NAME@host1,host2" (NAME a variable name). */
int moat_policy_add_secret(struct moat_policy *p, const char *spec, struct moat_err *e);

/* Validate an --env / env entry ("NAME" or "NAME=VALUE"). */
int moat_policy_add_env(struct moat_policy *p, const char *entry,
			struct moat_err *e);

/* Resolve the workspace and every path (symlinks resolved: a path is
 * confined by what it really is), check they exist and are consistent,
 * and list the secrets to hide (moat_policy_hidden_paths for home) unless
 * the host is writable anyway. After this the engine may use the policy. */
int moat_policy_finalize(struct moat_policy *p, const char *cwd,
			 const char *home, struct moat_err *e);

/* The final environment of the command: PATH, HOME=home, TERM, LANG,
 * LC_*, TZ from `caller`, then the policy's env entries, MOAT_SANDBOX=1. */
int moat_policy_build_env(const struct moat_policy *p, char *const *caller,
			  const char *home, struct moat_strv *out,
			  struct moat_err *e);

/* Paths that are always hidden (secrets), for a given home directory:
 * appended (absolute) to *out, realpath'd variants included. */
void moat_policy_hidden_paths(const char *home, struct moat_strv *out);

/* Names write-protected inside every writable path, whether they exist or
 * not. NULL-terminated; entries ending in '/' are directories. */
extern const char *const moat_mandatory_deny[];
/* Names protected where they exist; one the sandbox creates is removed
 * after the run (a placeholder would break host tools). */
extern const char *const moat_mandatory_deny_existing[];

#endif
