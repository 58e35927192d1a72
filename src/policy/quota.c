/* The quota keys: per-user kernel counts that cgroups do not bound, one
 * ceiling per sandbox's user namespace (see include/moat/policy.h and
 * docs/policy.md "quotas"). The engine applies them (src/jail/quota.c). */
#define _GNU_SOURCE
#include <moat/policy.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define RL_MAX (INT64_C(1) << 62)

/* Defaults: a sandbox takes at most 1/frac of what the caller itself may
 * have (its own namespace's max, or its soft rlimit), and never more than
 * def. 1/16 leaves the caller 15/16 even with the sandbox at its ceiling;
 * mq gets 1/8 so that one default-sized queue (10 x 8 KiB) fits. The
 * namespace counts are 0: seccomp already refuses to create namespaces,
 * this is the second wall. */
const struct moat_quota_info moat_quota_info[MOAT_QUOTAS] = {
	[MOAT_Q_INOTIFY_INSTANCES] = {"inotify_instances", "max_inotify_instances", -1, 16, 16, INT_MAX},
	[MOAT_Q_INOTIFY_WATCHES] = {"inotify_watches", "max_inotify_watches", -1, 16384, 16, INT_MAX},
	[MOAT_Q_FANOTIFY_GROUPS] = {"fanotify_groups", "max_fanotify_groups", -1, 16, 16, INT_MAX},
	[MOAT_Q_FANOTIFY_MARKS] = {"fanotify_marks", "max_fanotify_marks", -1, 16384, 16, INT_MAX},
	[MOAT_Q_USER_NS] = {"user_namespaces", "max_user_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_MNT_NS] = {"mnt_namespaces", "max_mnt_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_IPC_NS] = {"ipc_namespaces", "max_ipc_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_PID_NS] = {"pid_namespaces", "max_pid_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_NET_NS] = {"net_namespaces", "max_net_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_UTS_NS] = {"uts_namespaces", "max_uts_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_CGROUP_NS] = {"cgroup_namespaces", "max_cgroup_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_TIME_NS] = {"time_namespaces", "max_time_namespaces", -1, 0, 0, INT_MAX},
	[MOAT_Q_MQ_BYTES] = {"mq_bytes", NULL, RLIMIT_MSGQUEUE, 131072, 8, RL_MAX},
	[MOAT_Q_SIGPENDING] = {"sigpending", NULL, RLIMIT_SIGPENDING, 1024, 16, RL_MAX},
	[MOAT_Q_NPROC] = {"nproc", NULL, RLIMIT_NPROC, 4096, 16, RL_MAX},
	[MOAT_Q_MEMLOCK] = {"memlock", NULL, RLIMIT_MEMLOCK, 1 << 20, 8, RL_MAX},
};

int moat_quota_find(const char *name)
{
	for (int i = 0; i < MOAT_QUOTAS; i++)
		if (strcmp(name, moat_quota_info[i].name) == 0)
			return i;
	return -1;
}

int moat_quota_check(int i, int64_t v, struct moat_err *e)
{
	if (v < 0 || v > moat_quota_info[i].max)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s: must be an integer from 0 to %lld",
				    moat_quota_info[i].name, (long long)moat_quota_info[i].max);
	return 0;
}

int moat_quota_parse(int64_t q[MOAT_QUOTAS], const char *arg, struct moat_err *e)
{
	const char *eq = strchr(arg, '=');
	char name[64];
	size_t n = eq ? (size_t)(eq - arg) : 0;
	if (!eq || n == 0 || n >= sizeof name)
		return moat_err_set(e, MOAT_E_USAGE, 0, "'%.64s': expected NAME=N", arg);
	memcpy(name, arg, n);
	name[n] = '\0';
	int i = moat_quota_find(name);
	if (i < 0)
		return moat_err_set(e, MOAT_E_USAGE, 0, "unknown quota '%s' (see docs/policy.md)",
				    name);
	const char *s = eq + 1;
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!isdigit((unsigned char)s[0]) || errno || *end || v > (uint64_t)INT64_MAX)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s: '%.64s' is not a number", name, s);
	if (moat_quota_check(i, (int64_t)v, e) < 0)
		return -1;
	q[i] = (int64_t)v;
	return 0;
}
