/* moat doctor: what the kernel offers and what moat will use. */
#define _GNU_SOURCE
#include "cli.h"
#include "jail/seccomp_rules.h"

#include <moat/probe.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *yesno(bool b)
{
	return b ? "yes" : "NO";
}

int moat_cmd_doctor(int argc, char **argv)
{
	(void)argv;
	if (argc > 1)
		return moat_cli_fail("doctor takes no arguments");
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
	printf("  Landlock           %s\n", p.landlock_abi > 0 ? "yes" : "NO: runs need --allow-degraded");
	printf("  seccomp            %s\n", p.seccomp ? "yes (deny list, EPERM)" : "NO: runs need --allow-degraded");
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
	printf("  resource limits    %s\n",
	       p.cgroup_version ? (p.cgroup_version == 1 ? "cgroup v1 child of moat's own cgroup"
							  : "cgroup v2 child of moat's own cgroup")
				: "unavailable: --memory/--pids/--cpus need --allow-degraded");
	bool ok = p.userns && p.landlock_abi > 0 && p.seccomp && (!root || p.idmap_mounts);
	printf("\n%s\n", ok ? "ready: every layer is available"
			    : "degraded: some layers are missing (see above)");
	return ok ? 0 : 1;
}
