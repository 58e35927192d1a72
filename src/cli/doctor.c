/* moat doctor: what the kernel offers and what moat will use. */
#define _GNU_SOURCE
#include "cli.h"
#include "base/fsclone.h"
#include "jail/seccomp_rules.h"
#include "serve/datadir.h"

#include <moat/probe.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *yesno(bool b)
{
	return b ? "yes" : "NO";
}

/* The resource limits line: which of --memory, --pids, --cpus moat can
 * enforce here, and for the others why not and the fix. */
static bool limits(const struct moat_probe *p)
{
	static const char *const opt[] = {"--memory", "--pids", "--cpus"};
	if (!p->cgroup_version) {
		printf("  resource limits    unavailable: no cgroup controllers on this machine "
		       "(--memory/--pids/--cpus refused; moat run or moat serve --allow-degraded runs without them)\n");
		return false;
	}
	bool all = true;
	for (unsigned i = 0, bit = MOAT_LIMIT_MEMORY; bit <= MOAT_LIMIT_CPU; bit <<= 1, i++) {
		struct moat_err e = {0};
		unsigned failed;
		if (moat_limits_check(bit, &failed, &e) == 0) {
			printf("    %-16s cgroup v%d child of moat's own cgroup\n", opt[i],
			       p->cgroup_version);
			continue;
		}
		all = false;
		printf("    %-16s unavailable: %s (until then %s is refused; moat run or moat "
		       "serve --allow-degraded runs without it)\n", opt[i], e.msg, opt[i]);
	}
	return all;
}

static const char *env_get(const char *name)
{
	return getenv(name);
}

/* moat serve's snapshot storage (docs/API.md "Snapshots"): the backend
 * fsclone's probe finds in the data directory, or in the directory it
 * would be made in (its nearest existing ancestor) when it is not there
 * yet. The probe makes and removes .fsclone-probe-* entries there. */
static void snapshots(const char *data)
{
	char def[PATH_MAX], at[PATH_MAX], why[512] = "";
	struct moat_err e = {0};
	if (!data) {
		if (serve_default_data_dir(geteuid(), env_get, def, sizeof def, &e) < 0) {
			printf("  snapshots          unknown: %s\n", e.msg);
			return;
		}
		data = def;
	}
	snprintf(at, sizeof at, "%s", data);
	int fd;
	while ((fd = open(at, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 && errno == ENOENT) {
		char *sl = strrchr(at, '/');
		if (!sl)
			break;
		if (sl == at)
			sl[1] = '\0';
		else
			*sl = '\0';
	}
	if (fd < 0) {
		printf("  snapshots          unknown: %s: %s\n", at, strerror(errno));
		return;
	}
	enum moat_fsclone b = moat_fsclone_probe(fd, why, sizeof why);
	close(fd);
	printf("  snapshots          %s in %s%s: %s\n", moat_fsclone_name(b), data,
	       strcmp(at, data) ? " (probed in its parent, it does not exist yet)" : "",
	       moat_fsclone_cost(b));
	if (why[0] && b != MOAT_FSCLONE_BTRFS)
		printf("                     (%s)\n", why);
}

static void help(void)
{
	fputs("usage: moat doctor [--data DIR]\n"
	      "\n"
	      "Shows which isolation layers this kernel offers, which moat will use, and\n"
	      "for one that is missing (such as resource limits without a delegated\n"
	      "cgroup) why and how to fix it, and which snapshot storage moat serve gets\n"
	      "in its data directory (--data DIR, default: moat serve's) and what a\n"
	      "snapshot costs there. Exit status: 0 when moat can run (every\n"
	      "protection layer is there, even if resource limits are not), 1 when a\n"
	      "protection layer is missing.\n", stdout);
}

int moat_cmd_doctor(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		help();
		return 0;
	}
	const char *data = NULL;
	if (argc == 3 && !strcmp(argv[1], "--data") && argv[2][0])
		data = argv[2];
	else if (argc == 2 && !strncmp(argv[1], "--data=", 7) && argv[1][7])
		data = argv[1] + 7;
	else if (argc > 1)
		return moat_cli_fail("doctor takes only --data DIR (see moat doctor --help)");
	struct moat_probe p;
	moat_probe_run(&p);
	bool root = geteuid() == 0;
	printf("isolation layers on this machine:\n");
	printf("  user namespaces    %s\n", yesno(p.userns));
	if (p.landlock_abi > 0)
		printf("  Landlock           ABI %d%s%s\n", p.landlock_abi,
		       p.landlock_abi >= 4 ? " (filesystem, TCP" : " (filesystem",
		       p.landlock_abi >= 6 ? ", unix-socket and signal scoping)" : ")");
	else
		printf("  Landlock           NO (%s)\n", strerror(p.landlock_errno));
	printf("  seccomp filters    %s\n", yesno(p.seccomp));
	if (p.cgroup_version)
		printf("  cgroups            v%d (%s)\n", p.cgroup_version,
		       p.cgroup_controllers[0] ? p.cgroup_controllers : "no controllers");
	else
		printf("  cgroups            NO\n");
	printf("  overlayfs          %s\n", yesno(p.overlayfs));
	printf("  id-mapped mounts   %s\n", yesno(p.idmap_mounts));
	printf("  pidfd              %s\n", yesno(p.pidfd));
	printf("\nmoat will use:\n");
	printf("  namespaces         user, mount, pid, net, ipc, uts, cgroup\n");
	printf("  identity           %s\n",
	       root ? "host uid 65534 (never root); writable dirs id-mapped to their owner"
		    : "your own uid (rootless)");
	printf("  Landlock           %s\n", p.landlock_abi > 0 ? "yes" : "NO: moat run needs --allow-degraded");
	printf("  seccomp            %s\n", p.seccomp ? "yes (deny list, EPERM)" : "NO: moat run needs --allow-degraded");
	if (p.seccomp) {
		/* the table the filter is generated from (seccomp_rules.h) */
		printf("  socket families   ");
		for (size_t i = 0; moat_socket_allowed[i].name; i++)
			printf("%s %s%s", i ? "," : "", moat_socket_allowed[i].name,
			       moat_socket_allowed[i].note);
		printf("; socketpair:");
		for (size_t i = 0, n = 0; moat_socket_allowed[i].name; i++)
			if (moat_socket_allowed[i].pair)
				printf("%s %s", n++ ? "," : "", moat_socket_allowed[i].name);
		printf("; any other: EAFNOSUPPORT\n");
	}
	printf("  resource limits\n");
	bool lim = limits(&p);
	{
		/* moat serve's pause and resume (docs/API.md "Pause and resume") */
		struct moat_err e = {0};
		int v = 0;
		if (moat_freezer_check(&v, &e) == 0)
			printf("  pause (freezer)    cgroup v%d %s, child of moat's own cgroup\n", v,
			       v == 1 ? "freezer.state" : "cgroup.freeze");
		else
			printf("  pause (freezer)    unavailable: %s (moat serve answers pause with "
			       "422 pause_unavailable)\n", e.msg);
	}
	snapshots(data);
	bool ok = p.userns && p.landlock_abi > 0 && p.seccomp && (!root || p.idmap_mounts);
	if (ok && lim)
		printf("\nready: every layer is available\n");
	else if (ok)
		printf("\nready, without resource limits: runs that ask for one are refused "
		       "(see above)\n");
	else
		printf("\ndegraded: some layers are missing (see above)\n");
	return ok ? 0 : 1;
}
