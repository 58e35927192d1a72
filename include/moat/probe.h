/* What this kernel offers, probed without side effects on the host. Used by
 * `moat doctor` and by the engine to fail closed. */
#ifndef MOAT_PROBE_H
#define MOAT_PROBE_H

#include <moat/err.h>

#include <stdbool.h>

struct moat_probe {
	bool userns;          /* unprivileged user namespaces can be created */
	int landlock_abi;     /* 0 = unavailable */
	int landlock_errno;   /* why unavailable */
	bool seccomp;         /* seccomp filter mode */
	int cgroup_version;   /* 1 or 2; 0 = none found */
	char cgroup_controllers[256]; /* space-separated usable controllers */
	bool overlayfs;
	bool idmap_mounts;    /* mount_setattr(MOUNT_ATTR_IDMAP) exists */
	bool pidfd;
};

void moat_probe_run(struct moat_probe *p);

/* Landlock ABI version (0 when not available; *err gets the errno). */
int moat_probe_landlock_abi(int *err);

/* Resource limits (src/jail/cgcheck.c): the bits of moat_limits_check. */
enum { MOAT_LIMIT_MEMORY = 1, MOAT_LIMIT_PIDS = 2, MOAT_LIMIT_CPU = 4 };
/* The controller of one bit: "memory", "pids" or "cpu". */
const char *moat_limit_controller(unsigned bit);
/* Can this process enforce the limits in mask: may it make, for each, a
 * cgroup below its own (the only place moat makes one)? Returns 0, or -1
 * with *failed = the first bit that cannot and e = why and the fix (which
 * names a command or option that exists). Reads only: nothing is made. */
int moat_limits_check(unsigned mask, unsigned *failed, struct moat_err *e);
/* Can this process make a freezer cgroup for a sandbox (policy.freezer,
 * moat serve's pause)? v1: the freezer hierarchy is mounted and moat's
 * own cgroup in it is writable; v2: its own cgroup is writable (the
 * freezer is core). Reads only. *version gets 1 or 2. */
int moat_freezer_check(int *version, struct moat_err *e);

#endif
