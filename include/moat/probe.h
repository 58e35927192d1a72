/* What this kernel offers, probed without side effects on the host. Used by
 * `moat doctor` and by the engine to fail closed. */
#ifndef MOAT_PROBE_H
#define MOAT_PROBE_H

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

#endif
