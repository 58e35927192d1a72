/* Feature probes for `moat doctor` (see include/moat/probe.h). */
#define _GNU_SOURCE
#include <moat/probe.h>

#include "../base/cleanup.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static bool try_userns(void)
{
	pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (pid < 0)
		return false;
	if (pid == 0)
		_exit(0);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void cgroups(struct moat_probe *p)
{
	char buf[256];
	if (moat_read_file("/sys/fs/cgroup/cgroup.controllers", buf, sizeof buf, NULL) == 0) {
		p->cgroup_version = 2;
		buf[strcspn(buf, "\n")] = '\0';
		snprintf(p->cgroup_controllers, sizeof p->cgroup_controllers, "%s", buf);
		return;
	}
	static const char *const want[] = {"memory", "pids", "cpu", NULL};
	p->cgroup_controllers[0] = '\0';
	for (size_t i = 0; want[i]; i++) {
		_cleanup_free_ char *d = moat_strdupf("/sys/fs/cgroup/%s/cgroup.procs", want[i]);
		if (access(d, F_OK) == 0) {
			p->cgroup_version = 1;
			size_t l = strlen(p->cgroup_controllers);
			snprintf(p->cgroup_controllers + l, sizeof p->cgroup_controllers - l,
				 "%s%s", l ? " " : "", want[i]);
		}
	}
}

void moat_probe_run(struct moat_probe *p)
{
	memset(p, 0, sizeof *p);
	p->userns = try_userns();
	p->landlock_abi = moat_probe_landlock_abi(&p->landlock_errno);
	p->seccomp = !(prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 && errno == EINVAL);
	cgroups(p);
	char fs[8192];
	if (moat_read_file("/proc/filesystems", fs, sizeof fs, NULL) == 0)
		p->overlayfs = strstr(fs, "\toverlay\n") != NULL;
	struct mount_attr a = {0};
	p->idmap_mounts = !(mount_setattr(-1, "", 0, &a, sizeof a) < 0 && errno == ENOSYS);
	int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	p->pidfd = fd >= 0;
	if (fd >= 0)
		close(fd);
}
