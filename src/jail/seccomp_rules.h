/* The seccomp deny list: one table, read by tools/gen_seccomp.c, which
 * compiles it with libseccomp into a BPF program at build time (so a run
 * pays no compile cost and loads the program with one prctl). */
#ifndef MOAT_SECCOMP_RULES_H
#define MOAT_SECCOMP_RULES_H

/* Refused with EPERM. */
static const char *const moat_seccomp_denied[] = {
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

#endif
