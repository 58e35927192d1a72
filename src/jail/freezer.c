/* The freezer of a detached sandbox (moat serve's pause and resume): v1's
 * freezer.state (FROZEN / THAWED; FREEZING while tasks are still on their
 * way) or v2's cgroup.freeze, confirmed by "frozen 1" in cgroup.events.
 * The directories come from moat's own store: only ones named like
 * moat's cgroups are touched (as moat_cgroup_remove). */
#define _GNU_SOURCE
#include <moat/jail.h>

#include "../base/cleanup.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a freeze may take before it is given up (and undone): tasks
 * normally stop within a millisecond; one in uninterruptible sleep (a
 * hung NFS read) holds FREEZING until it wakes. */
#define FREEZE_DEADLINE_MS 2000

static bool ours(const char *dir)
{
	const char *base = strrchr(dir, '/');
	return base && strncmp(base + 1, "moat-", 5) == 0 &&
	       strncmp(dir, "/sys/fs/cgroup/", 15) == 0 && !strstr(dir, "/../");
}

/* The freezer among dirs: v1 (freezer.state) or v2 (cgroup.freeze); NULL. */
static const char *find(const struct moat_strv *dirs, bool *v2)
{
	for (size_t i = 0; dirs && i < dirs->n; i++) {
		if (!ours(dirs->v[i]))
			continue;
		char p[4096];
		snprintf(p, sizeof p, "%s/freezer.state", dirs->v[i]);
		if (access(p, F_OK) == 0) {
			*v2 = false;
			return dirs->v[i];
		}
		snprintf(p, sizeof p, "%s/cgroup.freeze", dirs->v[i]);
		if (access(p, F_OK) == 0) {
			*v2 = true;
			return dirs->v[i];
		}
	}
	return NULL;
}

/* Is the state the kernel reports the wanted one? -1: unreadable. */
static int reached(const char *dir, bool v2, bool frozen)
{
	char p[4096], buf[512];
	snprintf(p, sizeof p, "%s/%s", dir, v2 ? "cgroup.events" : "freezer.state");
	if (moat_read_file(p, buf, sizeof buf, NULL) < 0)
		return -1;
	if (!v2)
		return !strcmp(buf, frozen ? "FROZEN\n" : "THAWED\n") ||
		       !strcmp(buf, frozen ? "FROZEN" : "THAWED");
	const char *want = frozen ? "frozen 1" : "frozen 0";
	for (char *s = buf; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL)
		if (!strncmp(s, want, 8) && (s[8] == '\n' || s[8] == '\0'))
			return 1;
	return 0;
}

static int set_state(const char *dir, bool v2, bool frozen, struct moat_err *e)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", dir, v2 ? "cgroup.freeze" : "freezer.state");
	if (moat_write_file(p, v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED"), e) < 0)
		return moat_err_prefix(e, "freezer");
	return 0;
}

int moat_cgroup_freeze(const struct moat_strv *dirs, bool frozen, struct moat_err *e)
{
	bool v2 = false;
	const char *dir = find(dirs, &v2);
	if (!dir)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOTSUP,
				    "the sandbox has no freezer cgroup (no freezer.state or "
				    "cgroup.freeze among its %zu cgroup directories)",
				    dirs ? dirs->n : 0);
	if (set_state(dir, v2, frozen, e) < 0)
		return -1;
	/* a short poll: a freeze usually completes within a millisecond,
	 * and a thaw at once */
	int64_t deadline = moat_now_ms() + FREEZE_DEADLINE_MS;
	long ns = 20 * 1000;
	for (;;) {
		int r = reached(dir, v2, frozen);
		if (r == 1)
			return 0;
		if (r < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "freezer: cannot read %s/%s",
					    dir, v2 ? "cgroup.events" : "freezer.state");
		if (moat_now_ms() > deadline)
			break;
		struct timespec ts = {0, ns};
		nanosleep(&ts, NULL);
		if (ns < 1000 * 1000)
			ns *= 2;
	}
	if (frozen) {
		/* all or nothing: not left half-frozen */
		struct moat_err ign = {0};
		set_state(dir, v2, false, &ign);
	}
	return moat_err_set(e, MOAT_E_SYSTEM, ETIMEDOUT,
			    "freezer: %s/%s did not report %s within %d ms%s", dir,
			    v2 ? "cgroup.events" : "freezer.state",
			    frozen ? (v2 ? "frozen 1" : "FROZEN") : (v2 ? "frozen 0" : "THAWED"),
			    FREEZE_DEADLINE_MS,
			    frozen ? " (a task in uninterruptible sleep?); thawed again" : "");
}

bool moat_cgroup_frozen(const struct moat_strv *dirs)
{
	bool v2 = false;
	const char *dir = find(dirs, &v2);
	return dir && reached(dir, v2, true) == 1;
}

int moat_cgroup_kill(const struct moat_strv *dirs, struct moat_err *e)
{
	bool v2 = false;
	const char *dir = find(dirs, &v2);
	if (!dir)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOTSUP, "the sandbox has no freezer cgroup");
	char p[4096];
	snprintf(p, sizeof p, "%s/cgroup.kill", dir);
	if (v2 && access(p, F_OK) == 0) {
		/* v2 kills frozen tasks too */
		if (moat_write_file(p, "1", e) < 0)
			return moat_err_prefix(e, "freezer");
		return moat_cgroup_freeze(dirs, false, e);
	}
	/* Frozen, no task can exit, so no pid listed can be recycled before
	 * it is signalled; a v1 frozen task dies only once thawed. */
	if (moat_cgroup_freeze(dirs, true, e) < 0)
		return -1;
	snprintf(p, sizeof p, "%s/cgroup.procs", dir);
	_cleanup_fclose_ FILE *f = fopen(p, "re");
	if (!f)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "freezer: %s", p);
	char line[64];
	while (fgets(line, sizeof line, f)) {
		char *end;
		long pid = strtol(line, &end, 10);
		if (pid > 1 && (*end == '\n' || *end == '\0'))
			kill((pid_t)pid, SIGKILL);
	}
	return moat_cgroup_freeze(dirs, false, e);
}
