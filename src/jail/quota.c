/* Per-user kernel quotas. inotify, fanotify and namespace counts, and the
 * rlimit-based ucounts (mq bytes, pending signals, processes, locked shm),
 * are charged to the sandbox's user in its own user namespace and, up the
 * chain, to whoever created that namespace: host root for root runs, the
 * caller for rootless ones (kernel/ucount.c). So each sandbox gets its own
 * low ceilings: /proc/sys/user/max_* always shows the opener's own namespace,
 * writable with CAP_SYS_RESOURCE there, which the child still holds before
 * caps.c drops everything; the command can never raise them. rlimits are
 * set soft and hard (raising a hard limit needs CAP_SYS_RESOURCE on the
 * host). */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The caller's own limit for key i, or -1 when unknown/unlimited. *dir
 * caches an O_PATH descriptor of /proc/sys/user (one path walk, not one
 * per file). */
static int64_t caller_limit(int i, int *dir)
{
	const struct moat_quota_info *q = &moat_quota_info[i];
	if (q->sysctl) {
		if (*dir < 0)
			*dir = open("/proc/sys/user", O_PATH | O_DIRECTORY | O_CLOEXEC);
		_cleanup_close_ int fd = *dir < 0 ? -1 : openat(*dir, q->sysctl, O_RDONLY | O_CLOEXEC);
		char buf[32];
		ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
		if (n <= 0)
			return -1;
		buf[n] = '\0';
		char *end;
		long long v = strtoll(buf, &end, 10);
		return end != buf && v >= 0 ? v : -1;
	}
	struct rlimit rl;
	if (getrlimit(q->rlimit, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > (rlim_t)INT64_MAX)
		return -1;
	return (int64_t)rl.rlim_cur;
}

static int64_t default_of(int i, int *dir)
{
	const struct moat_quota_info *q = &moat_quota_info[i];
	int64_t v = q->def;
	if (q->frac) {
		int64_t lim = caller_limit(i, dir);
		if (lim >= 0 && lim / q->frac < v)
			v = lim / q->frac;
	}
	return v;
}

void moat_jail_quota_defaults(int64_t q[MOAT_QUOTAS])
{
	_cleanup_close_ int dir = -1;
	for (int i = 0; i < MOAT_QUOTAS; i++)
		q[i] = default_of(i, &dir);
}

int jail_quota_prepare(struct jail_ctx *c, struct moat_err *e)
{
	(void)e;
	_cleanup_close_ int dir = -1;
	for (int i = 0; i < MOAT_QUOTAS; i++) {
		int64_t v = c->p->quotas[i] >= 0 ? c->p->quotas[i] : default_of(i, &dir);
		struct rlimit rl;
		/* an rlimit cannot be raised past the caller's hard limit */
		if (!moat_quota_info[i].sysctl && getrlimit(moat_quota_info[i].rlimit, &rl) == 0 &&
		    rl.rlim_max != RLIM_INFINITY && (uint64_t)v > (uint64_t)rl.rlim_max)
			v = (int64_t)rl.rlim_max;
		c->quota[i] = v;
	}
	return 0;
}

int jail_quota_child(struct jail_ctx *c, struct moat_err *e)
{
	/* our own /proc (mounted by mount.c): its sys/user is our namespace's */
	_cleanup_close_ int dir = open("/proc/sys/user", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "quotas: /proc/sys/user");
	for (int i = 0; i < MOAT_QUOTAS; i++) {
		const struct moat_quota_info *q = &moat_quota_info[i];
		if (!q->sysctl) {
			struct rlimit rl = {(rlim_t)c->quota[i], (rlim_t)c->quota[i]};
			if (setrlimit(q->rlimit, &rl) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno,
						    "quota %s: setrlimit to %lld", q->name,
						    (long long)c->quota[i]);
			continue;
		}
		int fd = openat(dir, q->sysctl, O_WRONLY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			/* an older kernel: nothing to write it to */
			moat_err_set(e, MOAT_E_SYSTEM, 0,
				     "quota %s: this kernel has no /proc/sys/user/%s", q->name,
				     q->sysctl);
			if (jail_degrade(c, e) < 0)
				return -1;
			continue;
		}
		char buf[24];
		int n = snprintf(buf, sizeof buf, "%lld\n", (long long)c->quota[i]);
		int err = fd < 0 ? errno : moat_write_all(fd, buf, (size_t)n) < 0 ? errno : 0;
		if (fd >= 0)
			close(fd);
		if (err)
			return moat_err_set(e, MOAT_E_SYSTEM, err,
					    "quota %s: cannot write /proc/sys/user/%s", q->name,
					    q->sysctl);
	}
	return 0;
}
