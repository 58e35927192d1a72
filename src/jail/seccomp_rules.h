/* The seccomp deny list: one table, read by tools/gen_seccomp.c, which
 * compiles it with libseccomp into a BPF program at build time (so a run
 * pays no compile cost and loads the program with one prctl). */
#ifndef MOAT_SECCOMP_RULES_H
#define MOAT_SECCOMP_RULES_H

#include <stdbool.h>
#include <sys/socket.h>

/* Refused with EPERM. */
__attribute__((unused)) static const char *const moat_seccomp_denied[] = {
	/* kernel keyring, BPF, perf, userfaultfd, io_uring (its async ops
	 * bypass per-syscall filters) */
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	/* the machine itself */
	"kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
	"quotactl_fd", "syslog", "iopl", "ioperm", "uselib", "lookup_dcookie",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	/* the filesystem view and namespaces (legacy and new mount API) */
	"mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
	"open_tree", "mount_setattr", "pivot_root", "chroot", "setns", "unshare",
	/* file handles can reach outside a bind mount */
	"open_by_handle_at", "name_to_handle_at",
	0,
};

/* Socket address families: an allowlist. socket(2) works only for these,
 * socketpair(2) only for AF_UNIX; every other family (AF_VSOCK, which no
 * network namespace confines, AF_PACKET, AF_ALG, AF_XDP, ...) and every
 * other NETLINK protocol fails with EAFNOSUPPORT, as if the kernel lacked
 * it. NETLINK_ROUTE stays because getifaddrs(3), if_nameindex(3), `ip`
 * and node's os.networkInterfaces() read the (sandbox's own) interfaces
 * through it; see docs/SECURITY.md. `moat doctor` prints this table. */
struct moat_sock_family {
	unsigned int family;
	const char *name;
	bool pair;           /* also allowed for socketpair(2) */
	int protocol;        /* the only protocol allowed, or -1: any */
	int bad_type;        /* a type refused (low 4 bits of the type), or -1 */
	const char *note;    /* shown by moat doctor */
};

#define MOAT_NETLINK_ROUTE 0 /* NETLINK_ROUTE, <linux/netlink.h> */

__attribute__((unused)) static const struct moat_sock_family moat_socket_allowed[] = {
	{AF_UNIX, "AF_UNIX", true, -1, -1, ""},
	/* the kernel turns (AF_INET, SOCK_PACKET) into an AF_PACKET socket */
	{AF_INET, "AF_INET", false, -1, SOCK_PACKET, " (not SOCK_PACKET)"},
	{AF_INET6, "AF_INET6", false, -1, -1, ""},
	{AF_NETLINK, "AF_NETLINK", false, MOAT_NETLINK_ROUTE, -1, " (NETLINK_ROUTE only)"},
	{0, 0, false, 0, 0, 0},
};

#endif
