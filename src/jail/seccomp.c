/* seccomp: a deny list compiled with libseccomp on the host (prepare) and
 * loaded in the sandbox with one prctl (child: no allocation, no library
 * call after fork). Refusals return EPERM so programs see an ordinary
 * error; clone3 returns ENOSYS so libc falls back to clone(2), whose flags
 * we can inspect. Only the native x86_64 ABI is allowed: i386 (int 0x80)
 * and x32 system calls are refused as a whole, since a deny list keyed on
 * x86_64 numbers would not cover them. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const denied[] = {
	/* kernel keyring, BPF, perf, userfaultfd, io_uring (bypasses other
	 * filters by doing syscalls' work asynchronously) */
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
	NULL,
};

static const unsigned long ns_flags[] = {
	CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET,
	CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP,
};

static void release(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

static int build(struct jail_ctx *c, struct moat_err *e)
{
	__attribute__((cleanup(release))) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "seccomp_init");
	int r;
	/* Foreign ABIs get EPERM for everything. */
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM))) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, -r, "seccomp bad-arch action");
	for (size_t i = 0; denied[i]; i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, -r, "seccomp rule %s", denied[i]);
	}
	for (size_t i = 0; i < sizeof ns_flags / sizeof ns_flags[0]; i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
		if (r < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, -r, "seccomp rule clone");
	}
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, -r, "seccomp rule clone3");
	/* TIOCSTI pushes input into a terminal; TIOCLINUX can too. The kernel
	 * compares only the low 32 bits of the request. */
	static const unsigned long ioctls[] = {TIOCSTI, TIOCLINUX};
	for (size_t i = 0; i < 2; i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
				     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, ioctls[i]));
		if (r < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, -r, "seccomp rule ioctl");
	}
	/* Export the BPF program once, here, into memory for the child. */
	_cleanup_close_ int fd = memfd_create("moat-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "memfd_create");
	if ((r = seccomp_export_bpf(ctx, fd)) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, -r, "seccomp_export_bpf");
	struct stat st;
	if (fstat(fd, &st) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "fstat");
	size_t n = (size_t)st.st_size / sizeof(struct sock_filter);
	if (n == 0 || n > BPF_MAXINSNS)
		return moat_err_set(e, MOAT_E_SYSTEM, EINVAL, "seccomp program size %zu", n);
	c->bpf = malloc(n * sizeof *c->bpf);
	if (!c->bpf)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "seccomp program");
	if (pread(fd, c->bpf, n * sizeof *c->bpf, 0) != (ssize_t)(n * sizeof *c->bpf))
		return moat_err_set(e, MOAT_E_SYSTEM, EIO, "read seccomp program");
	c->bpf_len = (unsigned short)n;
	return 0;
}

int jail_seccomp_prepare(struct jail_ctx *c, struct moat_err *e)
{
	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 && errno == EINVAL) {
		moat_err_set(e, MOAT_E_SYSTEM, 0,
			     "seccomp is not available (CONFIG_SECCOMP_FILTER)");
		return jail_degrade(c, e);
	}
	if (build(c, e) < 0)
		return -1;
	c->use_seccomp = true;
	return 0;
}

int jail_seccomp_child(struct jail_ctx *c, struct moat_err *e)
{
	if (!c->use_seccomp)
		return 0;
	struct sock_fprog prog = {.len = c->bpf_len, .filter = c->bpf};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_NO_NEW_PRIVS");
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "load seccomp filter");
	return 0;
}
