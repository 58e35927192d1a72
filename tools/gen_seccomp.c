/* Build-time generator: compiles moat's seccomp policy with libseccomp and
 * prints it as a C array (build/gen/seccomp_bpf.h).
 *
 * Policy: default allow; the table in src/jail/seccomp_rules.h -> EPERM;
 * clone with any CLONE_NEW* flag -> EPERM; clone3 -> ENOSYS (its flags are
 * in memory where BPF cannot look; libc then falls back to clone);
 * ioctl TIOCSTI / TIOCLINUX -> EPERM; setuid/setgid modes -> EPERM;
 * openat2 -> ENOSYS; any non-native ABI (i386 int 0x80,
 * x32) -> EPERM, since a deny list keyed on x86_64 numbers would not
 * cover it; socket/socketpair outside the family allowlist in
 * seccomp_rules.h -> EAFNOSUPPORT. */
#define _GNU_SOURCE
#include "../src/jail/seccomp_rules.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int die(const char *what, int r)
{
	fprintf(stderr, "gen_seccomp: %s: %d\n", what, r);
	return 1;
}

/* Refuse syscall nr with errno err whenever the low 32 bits of argument
 * arg are not in ok[0..n) (sorted, distinct), and, if pre is given, pre
 * matches too. The kernel truncates these int arguments, so the filter
 * looks at the low 32 bits only, like the kernel: the upper half can
 * neither smuggle a refused value past it nor get an allowed one refused.
 * BPF has no "not in set", so the complement of ok is cut into aligned
 * power-of-two blocks, one masked-equality rule each (at most 32 per gap). */
static int deny_outside(scmp_filter_ctx ctx, int err, int nr, unsigned arg,
			const uint32_t *ok, size_t n, const struct scmp_arg_cmp *pre)
{
	uint64_t lo = 0; /* the next value not yet covered */
	for (size_t i = 0; i <= n; i++) {
		uint64_t end = i < n ? ok[i] : UINT64_C(1) << 32; /* gap [lo, end) */
		while (lo < end) {
			uint64_t size = lo ? lo & -lo : UINT64_C(1) << 32;
			while (lo + size > end)
				size >>= 1;
			struct scmp_arg_cmp c[2] = {
				{arg, SCMP_CMP_MASKED_EQ, 0xffffffffu & ~(size - 1), lo}, {0}};
			if (pre)
				c[1] = *pre;
			int r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(err), nr, pre ? 2 : 1, c);
			if (r < 0)
				return r;
			lo += size;
		}
		lo = i < n ? (uint64_t)ok[i] + 1 : lo;
	}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* socket(2) only for the families of moat_socket_allowed (and, where the
 * table names one, only with that protocol); socketpair(2) only for those
 * marked pair. Everything else: EAFNOSUPPORT, what a kernel built without
 * the family answers, so programs take their ordinary fallback. */
static int socket_rules(scmp_filter_ctx ctx)
{
	uint32_t fam[64], pair[64];
	size_t nf = 0, np = 0;
	for (size_t i = 0; moat_socket_allowed[i].name; i++) {
		if (nf == 64)
			return -E2BIG;
		fam[nf++] = moat_socket_allowed[i].family;
		if (moat_socket_allowed[i].pair)
			pair[np++] = moat_socket_allowed[i].family;
	}
	qsort(fam, nf, sizeof fam[0], cmp_u32);
	qsort(pair, np, sizeof pair[0], cmp_u32);
	int r;
	if ((r = deny_outside(ctx, EAFNOSUPPORT, SCMP_SYS(socket), 0, fam, nf, NULL)) < 0 ||
	    (r = deny_outside(ctx, EAFNOSUPPORT, SCMP_SYS(socketpair), 0, pair, np, NULL)) < 0)
		return r;
	/* The kernel still turns the obsolete (AF_INET, SOCK_PACKET) into an
	 * AF_PACKET socket; the type's low 4 bits are the type, the rest flags. */
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 2,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_INET),
				  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xfu, SOCK_PACKET))) < 0)
		return r;
	for (size_t i = 0; moat_socket_allowed[i].name; i++) {
		const struct moat_sock_family *f = &moat_socket_allowed[i];
		if (f->protocol < 0)
			continue;
		uint32_t proto = (uint32_t)f->protocol;
		struct scmp_arg_cmp is_f = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, f->family);
		if ((r = deny_outside(ctx, EAFNOSUPPORT, SCMP_SYS(socket), 2, &proto, 1, &is_f)) < 0)
			return r;
	}
	return 0;
}

int main(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return die("seccomp_init", 0);
	int r;
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM))) < 0)
		return die("badarch", r);
	for (size_t i = 0; moat_seccomp_denied[i]; i++) {
		int nr = seccomp_syscall_resolve_name(moat_seccomp_denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
			return die(moat_seccomp_denied[i], r);
	}
	static const unsigned long ns[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,
					   CLONE_NEWNET,  CLONE_NEWIPC, CLONE_NEWUTS,
					   CLONE_NEWCGROUP};
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
					  SCMP_A0(SCMP_CMP_MASKED_EQ, ns[i], ns[i]))) < 0)
			return die("clone", r);
	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
		return die("clone3", r);
	/* The kernel compares only the low 32 bits of an ioctl request. */
	static const unsigned long io[] = {TIOCSTI, TIOCLINUX};
	for (size_t i = 0; i < 2; i++)
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
					  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, io[i]))) < 0)
			return die("ioctl", r);
	/* No setuid/setgid files: a file the sandbox writes into a workspace
	 * belongs on the host to the workspace's owner (possibly root), so a
	 * set-id bit would hand that identity to anyone on the host. chmod
	 * family by mode argument, creation by mode when O_CREAT/O_TMPFILE. */
	static const unsigned long setid[] = {S_ISUID, S_ISGID};
	int fchmodat2 = seccomp_syscall_resolve_name("fchmodat2");
	if (fchmodat2 == __NR_SCMP_ERROR)
		fchmodat2 = 452; /* x86_64; newer than this libseccomp */
	for (size_t i = 0; i < 2; i++) {
		unsigned long b = setid[i];
		struct scmp_arg_cmp m1 = SCMP_A1(SCMP_CMP_MASKED_EQ, b, b);
		struct scmp_arg_cmp m2 = SCMP_A2(SCMP_CMP_MASKED_EQ, b, b);
		struct scmp_arg_cmp m3 = SCMP_A3(SCMP_CMP_MASKED_EQ, b, b);
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(chmod), 1, m1)) < 0 ||
		    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fchmod), 1, m1)) < 0 ||
		    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fchmodat), 1, m2)) < 0 ||
		    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), fchmodat2, 1, m2)) < 0 ||
		    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(creat), 1, m1)) < 0 ||
		    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mknod), 1, m1)) < 0 ||
		    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mknodat), 1, m2)) < 0)
			return die("set-id mode", r);
		static const unsigned long creating[] = {O_CREAT, __O_TMPFILE};
		for (size_t k = 0; k < 2; k++) {
			unsigned long f = creating[k];
			if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(open), 2,
						  SCMP_A1(SCMP_CMP_MASKED_EQ, f, f), m2)) < 0 ||
			    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(openat), 2,
						  SCMP_A2(SCMP_CMP_MASKED_EQ, f, f), m3)) < 0)
				return die("set-id open", r);
		}
	}
	/* openat2 keeps its mode in memory, out of the filter's reach: ENOSYS
	 * makes callers fall back to openat. */
	int openat2 = seccomp_syscall_resolve_name("openat2");
	if (openat2 != __NR_SCMP_ERROR &&
	    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), openat2, 0)) < 0)
		return die("openat2", r);
	if ((r = socket_rules(ctx)) < 0)
		return die("socket families", r);
	int fd = memfd_create("bpf", 0);
	if (fd < 0 || (r = seccomp_export_bpf(ctx, fd)) < 0)
		return die("export", fd < 0 ? -errno : r);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return die("fstat", -errno);
	size_t n = (size_t)st.st_size / sizeof(struct sock_filter);
	struct sock_filter *f = malloc((size_t)st.st_size);
	if (!f || pread(fd, f, (size_t)st.st_size, 0) != st.st_size)
		return die("read", -errno);
	printf("/* generated by tools/gen_seccomp.c from src/jail/seccomp_rules.h */\n");
	printf("static const struct sock_filter moat_seccomp_bpf[%zu] = {\n", n);
	for (size_t i = 0; i < n; i++)
		printf("\t{0x%04x, %u, %u, 0x%08x},\n", f[i].code, f[i].jt, f[i].jf, f[i].k);
	printf("};\n");
	free(f);
	seccomp_release(ctx);
	return 0;
}
