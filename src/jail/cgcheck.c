/* Can moat enforce resource limits here? One check behind moat doctor's
 * "resource limits" line, moat run's refusal and a served create's
 * limit_unavailable (docs/policy.md "Limits for a normal user"): for each
 * controller, may this process make a cgroup below its own, the only
 * place moat ever makes one? Reads only. */
#define _GNU_SOURCE
#include "internal.h"

#include <moat/probe.h>

#include "../base/cleanup.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int jail_own_cgroup(const char *controller, char *out, size_t cap, struct moat_err *e)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "/proc/self/cgroup");
	char line[1024];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *ctrls = c1 + 1;
		bool match = false;
		if (!controller) {
			match = strncmp(line, "0:", 2) == 0 && *ctrls == '\0';
		} else {
			_cleanup_free_ char *dup = strdup(ctrls);
			char *save = NULL;
			for (char *t = dup ? strtok_r(dup, ",", &save) : NULL; t;
			     t = strtok_r(NULL, ",", &save))
				if (strcmp(t, controller) == 0)
					match = true;
		}
		if (match) {
			snprintf(out, cap, "%s", c2 + 1);
			return 0;
		}
	}
	return moat_err_set(e, MOAT_E_SYSTEM, ENOENT, "cgroup %s: not in /proc/self/cgroup",
			    controller ? controller : "v2");
}

int jail_v2_base(char *out, size_t cap, struct moat_err *e)
{
	if (jail_own_cgroup(NULL, out, cap, e) < 0)
		return -1;
	char self[64];
	snprintf(self, sizeof self, "/moat-%d-self", (int)getpid());
	size_t n = strlen(out), k = strlen(self);
	if (n > k && !strcmp(out + n - k, self))
		out[n - k] = '\0';
	if (!out[0])
		snprintf(out, cap, "/");
	return 0;
}

bool jail_v2_only_self(const char *dir)
{
	_cleanup_free_ char *p = moat_strdupf("%s/cgroup.procs", dir);
	char buf[256];
	if (moat_read_file(p, buf, sizeof buf, NULL) < 0)
		return false;
	char *end;
	long pid = strtol(buf, &end, 10);
	return pid == (long)getpid() && (*end == '\0' || (*end == '\n' && end[1] == '\0'));
}

const char *moat_limit_controller(unsigned bit)
{
	return bit == MOAT_LIMIT_MEMORY ? "memory" : bit == MOAT_LIMIT_PIDS ? "pids" : "cpu";
}

/* Is word in the space-separated list of file dir/name? */
static bool listed(const char *dir, const char *name, const char *word)
{
	_cleanup_free_ char *p = moat_strdupf("%s/%s", dir, name);
	char buf[1024];
	if (moat_read_file(p, buf, sizeof buf, NULL) < 0)
		return false;
	char *save = NULL;
	for (char *s = strtok_r(buf, " \n", &save); s; s = strtok_r(NULL, " \n", &save))
		if (!strcmp(s, word))
			return true;
	return false;
}

static bool writable(const char *dir, const char *name)
{
	_cleanup_free_ char *p = name ? moat_strdupf("%s/%s", dir, name) : strdup(dir);
	return p && faccessat(AT_FDCWD, p, W_OK | (name ? 0 : X_OK), AT_EACCESS) == 0;
}

/* What to do about a cgroup that is not ours: the advice of every door. */
static const char *fix(int version)
{
	if (version == 1)
		return "to fix: have root make a cgroup for you in each controller's hierarchy "
		       "and chown it (the directory, cgroup.procs and tasks) to you, then start "
		       "moat in it (docs/policy.md); or run moat as root";
	return "to fix: run moat in a delegated cgroup whose subtree_control enables the "
	       "controller (systemd: a unit or scope with Delegate=yes; docs/policy.md), or "
	       "have root chown one to you; or run moat as root";
}

static int not_ours(const char *own, const char *ctl, const char *dir, int version,
		    struct moat_err *e)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "cgroup %s (%s): %s", own, ctl, dir);
	if (faccessat(AT_FDCWD, dir, W_OK, AT_EACCESS) < 0 && errno == EROFS)
		return moat_err_set(e, MOAT_E_SYSTEM, EROFS,
				    "cgroup %s (%s): the cgroup filesystem is read-only here",
				    own, ctl);
	return moat_err_set(e, MOAT_E_SYSTEM, 0,
			    "cgroup %s (%s) is owned by uid %u%s, not delegated to uid %u; %s",
			    own, ctl, (unsigned)st.st_uid, st.st_uid ? "" : " (root)",
			    (unsigned)geteuid(), fix(version));
}

static int check_v1(const char *ctl, struct moat_err *e)
{
	_cleanup_free_ char *mnt = moat_strdupf("/sys/fs/cgroup/%s", ctl);
	if (!writable(mnt, NULL) && access(mnt, F_OK) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, 0,
				    "no %s controller is mounted (%s): this machine offers no "
				    "such limit", ctl, mnt);
	char own[PATH_MAX];
	if (jail_own_cgroup(ctl, own, sizeof own, e) < 0)
		return -1;
	_cleanup_free_ char *dir = moat_strdupf("%s%s", mnt, strcmp(own, "/") ? own : "");
	if (!writable(dir, NULL))
		return not_ours(own, ctl, dir, 1, e);
	return 0;
}

static int check_v2(const char *ctl, struct moat_err *e)
{
	char own[PATH_MAX];
	if (jail_v2_base(own, sizeof own, e) < 0)
		return -1;
	_cleanup_free_ char *dir = moat_strdupf("/sys/fs/cgroup%s", strcmp(own, "/") ? own : "");
	if (!listed(dir, "cgroup.controllers", ctl))
		return moat_err_set(e, MOAT_E_SYSTEM, 0,
				    "cgroup %s: the %s controller is not available to it (not in "
				    "its cgroup.controllers); %s", own, ctl, fix(2));
	if (!writable(dir, NULL) || !writable(dir, "cgroup.subtree_control") ||
	    !writable(dir, "cgroup.procs"))
		return not_ours(own, ctl, dir, 2, e);
	/* cgroup v2's "no internal processes" rule: a cgroup holding
	 * processes cannot enable a controller for children. moat alone in
	 * it moves itself into a leaf below (cgroup.c); others it leaves. */
	char procs[64];
	_cleanup_free_ char *pp = moat_strdupf("%s/cgroup.procs", dir);
	if (strcmp(own, "/") && !listed(dir, "cgroup.subtree_control", ctl) &&
	    moat_read_file(pp, procs, sizeof procs, NULL) == 0 && procs[0] &&
	    !jail_v2_only_self(dir))
		return moat_err_set(e, MOAT_E_SYSTEM, EBUSY,
				    "cgroup %s holds other processes than moat, so the %s "
				    "controller cannot be enabled for cgroups below it; start moat "
				    "alone in a delegated cgroup (systemd-run --user --scope -p "
				    "Delegate=yes moat ...; docs/policy.md)", own, ctl);
	return 0;
}

int moat_limits_check(unsigned mask, unsigned *failed, struct moat_err *e)
{
	bool v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	*failed = 0;
	for (unsigned bit = 1; bit <= MOAT_LIMIT_CPU; bit <<= 1) {
		if (!(mask & bit))
			continue;
		const char *ctl = moat_limit_controller(bit);
		if ((v2 ? check_v2(ctl, e) : check_v1(ctl, e)) < 0) {
			*failed = bit;
			return -1;
		}
	}
	return 0;
}

int moat_freezer_check(int *version, struct moat_err *e)
{
	bool v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	*version = v2 ? 2 : 1;
	if (!v2)
		return check_v1("freezer", e);
	char own[PATH_MAX];
	if (jail_v2_base(own, sizeof own, e) < 0)
		return -1;
	_cleanup_free_ char *dir = moat_strdupf("/sys/fs/cgroup%s", strcmp(own, "/") ? own : "");
	if (!writable(dir, NULL))
		return not_ours(own, "freezer", dir, 2, e);
	/* cgroup.freeze is in every non-root cgroup from Linux 5.2 */
	_cleanup_free_ char *fz = moat_strdupf("%s/cgroup.freeze", dir);
	if (strcmp(own, "/") && access(fz, F_OK) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOTSUP,
				    "cgroup v2 without cgroup.freeze (%s): this kernel cannot "
				    "freeze a cgroup (Linux 5.2 can)", fz);
	return 0;
}
