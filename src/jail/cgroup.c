/* cgroups for --memory, --pids, --cpus (and a freezer for moat serve's
 * pause, policy.freezer), behind a tiny ops struct chosen once
 * (v2 unified, or v1 per-controller hierarchies as on hybrid systems).
 * moat's cgroup is created as a child of the cgroup moat itself runs in
 * (per controller on v1), only moat's own cgroups are ever written, and
 * they are removed when the sandbox ends. */
#define _GNU_SOURCE
#include "internal.h"

#include <moat/probe.h>

#include "../base/cleanup.h"
#include "../base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { CG_MEMORY, CG_PIDS, CG_CPU, CG_FREEZER, CG_N };
static const char *const cg_names[CG_N] = {"memory", "pids", "cpu", "freezer"};

struct jail_cgroup;
struct cg_ops {
	int (*create)(struct jail_cgroup *cg, const struct moat_policy *p, struct moat_err *e);
	bool (*oom)(struct jail_cgroup *cg);
};

struct jail_cgroup {
	const struct cg_ops *ops;
	char *dir[CG_N]; /* v1: one per controller used; v2: dir[0] only */
};

static void unique_name(char *buf, size_t cap)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(buf, cap, "moat-%d-%lx", (int)getpid(),
		 (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20)));
}

static int set_value(const char *dir, const char *file, const char *val, struct moat_err *e)
{
	_cleanup_free_ char *p = moat_strdupf("%s/%s", dir, file);
	if (moat_write_file(p, val, e) < 0)
		return moat_err_prefix(e, "cgroup");
	return 0;
}

static bool read_key(const char *dir, const char *file, const char *key, unsigned long long *v)
{
	_cleanup_free_ char *p = moat_strdupf("%s/%s", dir, file);
	char buf[4096];
	if (moat_read_file(p, buf, sizeof buf, NULL) < 0)
		return false;
	size_t kl = strlen(key);
	for (char *s = buf; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL)
		if (strncmp(s, key, kl) == 0 && s[kl] == ' ')
			return sscanf(s + kl + 1, "%llu", v) == 1;
	return false;
}

/* Remove empty cgroups that an earlier moat, killed before it could clean
 * up, left in dir: named moat-<pid>-..., with <pid> no longer alive. Only
 * our own naming is touched; rmdir fails on a cgroup still in use. */
static void sweep_stale(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		int pid;
		char tail;
		if (sscanf(de->d_name, "moat-%d-%c", &pid, &tail) != 2 || pid <= 0)
			continue;
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		_cleanup_free_ char *p = moat_strdupf("%s/%s", dir, de->d_name);
		rmdir(p);
	}
	closedir(d);
}

static int make_dir(const char *parent_mount, const char *own, const char *name,
		    char **out, struct moat_err *e)
{
	_cleanup_free_ char *parent = moat_strdupf("%s%s", parent_mount,
						   strcmp(own, "/") ? own : "");
	sweep_stale(parent);
	char *d = moat_strdupf("%s/%s", parent, name);
	if (mkdir(d, 0755) < 0) {
		int err = errno;
		moat_err_set(e, MOAT_E_SYSTEM, err,
			     "cannot create cgroup %s%s", d,
			     err == EACCES || err == EPERM || err == EROFS
				     ? " (not delegated to this user)" : "");
		free(d);
		return -1;
	}
	*out = d;
	return 0;
}

/* ---- v1 -------------------------------------------------------------------- */

static int v1_create(struct jail_cgroup *cg, const struct moat_policy *p, struct moat_err *e)
{
	char name[64];
	unique_name(name, sizeof name);
	bool want[CG_N] = {p->memory > 0, p->pids > 0, p->cpu_milli > 0, p->freezer};
	for (int i = 0; i < CG_N; i++) {
		if (!want[i])
			continue;
		char own[PATH_MAX];
		if (jail_own_cgroup(cg_names[i], own, sizeof own, e) < 0)
			return -1;
		_cleanup_free_ char *mnt = moat_strdupf("/sys/fs/cgroup/%s", cg_names[i]);
		if (make_dir(mnt, own, name, &cg->dir[i], e) < 0)
			return -1;
	}
	char v[64];
	if (want[CG_MEMORY]) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)p->memory);
		if (set_value(cg->dir[CG_MEMORY], "memory.limit_in_bytes", v, e) < 0)
			return -1;
		/* Count swap too where the kernel accounts it, so the limit
		 * cannot be escaped by swapping. */
		_cleanup_free_ char *sw = moat_strdupf("%s/memory.memsw.limit_in_bytes",
						       cg->dir[CG_MEMORY]);
		if (access(sw, F_OK) == 0 &&
		    set_value(cg->dir[CG_MEMORY], "memory.memsw.limit_in_bytes", v, e) < 0)
			return -1;
	}
	if (want[CG_PIDS]) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)p->pids);
		if (set_value(cg->dir[CG_PIDS], "pids.max", v, e) < 0)
			return -1;
	}
	if (want[CG_CPU]) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)p->cpu_milli * 100);
		if (set_value(cg->dir[CG_CPU], "cpu.cfs_period_us", "100000", e) < 0 ||
		    set_value(cg->dir[CG_CPU], "cpu.cfs_quota_us", v, e) < 0)
			return -1;
	}
	return 0;
}

static bool v1_oom(struct jail_cgroup *cg)
{
	unsigned long long n = 0;
	return cg->dir[CG_MEMORY] &&
	       read_key(cg->dir[CG_MEMORY], "memory.oom_control", "oom_kill", &n) && n > 0;
}

/* ---- v2 -------------------------------------------------------------------- */

static int v2_create(struct jail_cgroup *cg, const struct moat_policy *p, struct moat_err *e)
{
	char own[PATH_MAX], name[64];
	if (jail_v2_base(own, sizeof own, e) < 0)
		return -1;
	unique_name(name, sizeof name);
	/* Controllers must be enabled for our children in our own cgroup. */
	_cleanup_free_ char *ownd = moat_strdupf("/sys/fs/cgroup%s", strcmp(own, "/") ? own : "");
	char ctl[64] = "";
	if (p->memory)
		strcat(ctl, "+memory ");
	if (p->pids)
		strcat(ctl, "+pids ");
	if (p->cpu_milli)
		strcat(ctl, "+cpu ");
	/* the freezer is core in v2 (cgroup.freeze): no controller to enable */
	int rc = ctl[0] ? set_value(ownd, "cgroup.subtree_control", ctl, e) : 0;
	if (rc < 0 && e->errnum == EBUSY && jail_v2_only_self(ownd)) {
		/* cgroup v2's "no internal processes" rule: moat alone in a
		 * delegated cgroup (systemd-run --scope -p Delegate=yes) moves
		 * itself into a leaf below it, staying in its own subtree; its
		 * sandboxes' cgroups are the leaf's siblings. The leaf goes with
		 * sweep_stale once moat has ended. */
		_cleanup_free_ char *leaf = moat_strdupf("%s/moat-%d-self", ownd, (int)getpid());
		char pid[32];
		snprintf(pid, sizeof pid, "%d", (int)getpid());
		*e = (struct moat_err){0};
		if ((mkdir(leaf, 0755) < 0 && errno != EEXIST) ||
		    set_value(leaf, "cgroup.procs", pid, e) < 0)
			return e->kind ? moat_err_prefix(e, "move moat into %s", leaf)
				       : moat_err_set(e, MOAT_E_SYSTEM, errno, "cgroup %s", leaf);
		rc = set_value(ownd, "cgroup.subtree_control", ctl, e);
	}
	if (rc < 0) {
		/* a cgroup that holds other processes (a login session) cannot
		 * delegate controllers */
		if (e->errnum == EBUSY)
			return moat_err_set(e, MOAT_E_SYSTEM, EBUSY,
					    "cannot enable controllers below %s, which holds "
					    "other processes; start moat alone in a delegated cgroup, "
					    "e.g. systemd-run --user --scope -p Delegate=yes moat run ...",
					    ownd);
		return moat_err_prefix(e, "enable controllers in %s", ownd);
	}
	if (make_dir("/sys/fs/cgroup", own, name, &cg->dir[0], e) < 0)
		return -1;
	_cleanup_free_ char *fz = moat_strdupf("%s/cgroup.freeze", cg->dir[0]);
	if (p->freezer && access(fz, F_OK) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno,
				    "freezer: %s is missing (cgroup v2 freezes from Linux 5.2)", fz);
	char v[64];
	if (p->memory) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)p->memory);
		if (set_value(cg->dir[0], "memory.max", v, e) < 0 ||
		    set_value(cg->dir[0], "memory.swap.max", "0", e) < 0)
			return -1;
	}
	if (p->pids) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)p->pids);
		if (set_value(cg->dir[0], "pids.max", v, e) < 0)
			return -1;
	}
	if (p->cpu_milli) {
		snprintf(v, sizeof v, "%llu 100000", (unsigned long long)p->cpu_milli * 100);
		if (set_value(cg->dir[0], "cpu.max", v, e) < 0)
			return -1;
	}
	return 0;
}

static bool v2_oom(struct jail_cgroup *cg)
{
	unsigned long long n = 0;
	return read_key(cg->dir[0], "memory.events", "oom_kill", &n) && n > 0;
}

static const struct cg_ops v1_ops = {v1_create, v1_oom};
static const struct cg_ops v2_ops = {v2_create, v2_oom};

/* ---- public (engine-internal) ------------------------------------------------ */

int jail_cgroup_prepare(const struct moat_policy *p, struct jail_cgroup **out,
			struct moat_err *e)
{
	*out = NULL;
	if (!p->memory && !p->pids && !p->cpu_milli && !p->freezer)
		return 0;
	struct jail_cgroup *cg = calloc(1, sizeof *cg);
	if (!cg)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "cgroup");
	cg->ops = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 ? &v2_ops : &v1_ops;
	/* first the check doctor and serve make: a refusal that says why and
	 * how to fix it, before anything is made */
	unsigned mask = (p->memory ? MOAT_LIMIT_MEMORY : 0) | (p->pids ? MOAT_LIMIT_PIDS : 0) |
			(p->cpu_milli ? MOAT_LIMIT_CPU : 0), failed = 0;
	if (moat_limits_check(mask, &failed, e) < 0) {
		jail_cgroup_destroy(cg);
		return moat_err_prefix(e, "%s limit: cannot be enforced",
				       moat_limit_controller(failed));
	}
	int fver;
	if (p->freezer && moat_freezer_check(&fver, e) < 0) {
		jail_cgroup_destroy(cg);
		return moat_err_prefix(e, "freezer (pause) cannot be made");
	}
	if (cg->ops->create(cg, p, e) < 0) {
		jail_cgroup_destroy(cg);
		return moat_err_prefix(e, mask ? "resource limits" : "freezer (pause)");
	}
	*out = cg;
	return 0;
}

int jail_cgroup_parent(struct jail_cgroup *cg, pid_t pid, struct moat_err *e)
{
	char v[32];
	snprintf(v, sizeof v, "%d", (int)pid);
	for (int i = 0; cg && i < CG_N; i++)
		if (cg->dir[i] && set_value(cg->dir[i], "cgroup.procs", v, e) < 0)
			return -1;
	return 0;
}

bool jail_cgroup_oom(struct jail_cgroup *cg)
{
	return cg && cg->ops->oom(cg);
}

static void remove_dir(const char *dir)
{
	/* Tasks of a just-killed sandbox may take a moment to leave. */
	for (int tries = 0; rmdir(dir) < 0 && errno == EBUSY && tries < 200; tries++) {
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

void jail_cgroup_destroy(struct jail_cgroup *cg)
{
	if (!cg)
		return;
	for (int i = 0; i < CG_N; i++) {
		if (!cg->dir[i])
			continue;
		remove_dir(cg->dir[i]);
		free(cg->dir[i]);
	}
	free(cg);
}

void jail_cgroup_release(struct jail_cgroup *cg, struct moat_strv *out)
{
	if (!cg)
		return;
	for (int i = 0; i < CG_N; i++)
		if (cg->dir[i])
			moat_strv_take(out, cg->dir[i]);
	free(cg);
}

void jail_cgroup_list(const struct jail_cgroup *cg, struct moat_strv *out)
{
	for (int i = 0; cg && i < CG_N; i++)
		if (cg->dir[i])
			moat_strv_add(out, cg->dir[i]);
}

void moat_cgroup_remove(const struct moat_strv *dirs)
{
	/* Only directories named like ours: the list may come from a store
	 * on disk, and moat never removes a cgroup it did not create. */
	for (size_t i = 0; i < dirs->n; i++) {
		const char *base = strrchr(dirs->v[i], '/');
		if (base && strncmp(base + 1, "moat-", 5) == 0 &&
		    strncmp(dirs->v[i], "/sys/fs/cgroup/", 15) == 0 && !strstr(dirs->v[i], "/../"))
			remove_dir(dirs->v[i]);
	}
}
