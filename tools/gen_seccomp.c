/* Build-time generator: compiles moat's seccomp policy with libseccomp,
 * puts the socket-family check in front of it and prints the whole as a C
 * array (build/gen/seccomp_bpf.h).
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
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int die(const char *what, int r)
{
	fprintf(stderr, "gen_seccomp: %s: %d\n", what, r);
	return 1;
}

/* The socket-family allowlist, assembled here in front of libseccomp's
 * program. libseccomp compares 64-bit values: "low 32 bits not in a set"
 * takes one masked-equality rule per power-of-two block of the complement
 * (about 100 rules, 320 instructions, half as much again to load per run),
 * where these 22 instructions read the low halves directly, as the
 * kernel, which truncates these int arguments, does. Any other syscall,
 * arch or ABI (x32 numbers differ) falls through to libseccomp's program;
 * a refusal is EAFNOSUPPORT, what a kernel without the family answers. */
#if !defined(__x86_64__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "moat's seccomp filter is written for x86_64"
#endif
#define ARG_LO(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i)))

enum { J_NEXT, J_LIB, J_DENY, J_SOCK, J_PAIR, J_FAM }; /* J_FAM + i: family i */
enum { AS_CAP = 160, FAM_CAP = 32 };

struct as {
	struct sock_filter f[AS_CAP];
	int jt[AS_CAP], jf[AS_CAP]; /* J_* targets, resolved at the end */
	int at[J_FAM + FAM_CAP];    /* where each target is */
	size_t n;
	bool overflow;
};

static void op(struct as *a, uint16_t code, uint32_t k, int jt, int jf)
{
	if (a->n == AS_CAP) {
		a->overflow = true;
		return;
	}
	a->f[a->n] = (struct sock_filter){code, 0, 0, k};
	a->jt[a->n] = jt; /* for BPF_JA: the target */
	a->jf[a->n] = jf;
	a->n++;
}

static void here(struct as *a, int label)
{
	a->at[label] = (int)a->n;
}

/* Offsets from the labels; -1 when one does not fit. */
static int resolve(struct as *a)
{
	for (size_t pc = 0; pc < a->n; pc++) {
		struct sock_filter *f = &a->f[pc];
		if (BPF_CLASS(f->code) != BPF_JMP)
			continue;
		int t = a->at[a->jt[pc]] - (int)pc - 1;
		int e = a->at[a->jf[pc]] - (int)pc - 1;
		if (BPF_OP(f->code) == BPF_JA) {
			f->k = (uint32_t)t;
			continue;
		}
		t = a->jt[pc] == J_NEXT ? 0 : t;
		e = a->jf[pc] == J_NEXT ? 0 : e;
		if (t < 0 || t > 255 || e < 0 || e > 255)
			return -1;
		f->jt = (uint8_t)t;
		f->jf = (uint8_t)e;
	}
	return 0;
}

static int socket_prefix(struct as *a)
{
	size_t nf = 0;
	while (moat_socket_allowed[nf].name)
		nf++;
	if (nf > FAM_CAP)
		return -1;
	op(a, BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch), 0, 0);
	op(a, BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, J_NEXT, J_LIB);
	op(a, BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr), 0, 0);
	op(a, BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, J_SOCK, J_NEXT);
	op(a, BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, J_PAIR, J_LIB);
	here(a, J_SOCK);
	op(a, BPF_LD | BPF_W | BPF_ABS, ARG_LO(0), 0, 0);
	for (size_t i = 0; i < nf; i++)
		op(a, BPF_JMP | BPF_JEQ | BPF_K, moat_socket_allowed[i].family,
		   J_FAM + (int)i, J_NEXT);
	op(a, BPF_JMP | BPF_JA, 0, J_DENY, 0);
	for (size_t i = 0; i < nf; i++) {
		const struct moat_sock_family *f = &moat_socket_allowed[i];
		here(a, J_FAM + (int)i);
		if (f->bad_type >= 0) { /* the type is the low 4 bits, the rest flags */
			op(a, BPF_LD | BPF_W | BPF_ABS, ARG_LO(1), 0, 0);
			op(a, BPF_ALU | BPF_AND | BPF_K, 0xf, 0, 0);
			op(a, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)f->bad_type, J_DENY, J_NEXT);
		}
		if (f->protocol >= 0) {
			op(a, BPF_LD | BPF_W | BPF_ABS, ARG_LO(2), 0, 0);
			op(a, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)f->protocol, J_LIB, J_DENY);
		} else {
			op(a, BPF_JMP | BPF_JA, 0, J_LIB, 0);
		}
	}
	here(a, J_PAIR);
	op(a, BPF_LD | BPF_W | BPF_ABS, ARG_LO(0), 0, 0);
	for (size_t i = 0; i < nf; i++)
		if (moat_socket_allowed[i].pair)
			op(a, BPF_JMP | BPF_JEQ | BPF_K, moat_socket_allowed[i].family, J_LIB,
			   J_NEXT);
	here(a, J_DENY); /* BPF jumps forward only: the refusal comes last */
	op(a, BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EAFNOSUPPORT & SECCOMP_RET_DATA), 0, 0);
	here(a, J_LIB); /* the first instruction of libseccomp's program */
	return a->overflow ? -1 : resolve(a);
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
	int fd = memfd_create("bpf", 0);
	if (fd < 0 || (r = seccomp_export_bpf(ctx, fd)) < 0)
		return die("export", fd < 0 ? -errno : r);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return die("fstat", -errno);
	static struct as pre;
	if (socket_prefix(&pre) < 0)
		return die("socket family prefix", -E2BIG);
	size_t n = (size_t)st.st_size / sizeof(struct sock_filter);
	struct sock_filter *f = malloc((size_t)st.st_size);
	if (!f || pread(fd, f, (size_t)st.st_size, 0) != st.st_size)
		return die("read", -errno);
	if (pre.n + n > BPF_MAXINSNS)
		return die("filter too long", -E2BIG);
	printf("/* generated by tools/gen_seccomp.c from src/jail/seccomp_rules.h */\n");
	printf("static const struct sock_filter moat_seccomp_bpf[%zu] = {\n", pre.n + n);
	for (size_t i = 0; i < pre.n + n; i++) {
		const struct sock_filter *x = i < pre.n ? &pre.f[i] : &f[i - pre.n];
		printf("\t{0x%04x, %u, %u, 0x%08x},\n", x->code, x->jt, x->jf, x->k);
	}
	printf("};\n");
	free(f);
	seccomp_release(ctx);
	return 0;
}
