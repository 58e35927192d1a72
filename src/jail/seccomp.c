/* seccomp: the filter is compiled with libseccomp at build time from the
 * table in seccomp_rules.h (tools/gen_seccomp.c) and loaded here with one
 * prctl, after no_new_privs, as the last step before the supervisor runs.
 * Refusals are EPERM (clone3: ENOSYS) so programs see ordinary errors. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>

#include "seccomp_bpf.h" /* generated: moat_seccomp_bpf[] */

int jail_seccomp_prepare(struct jail_ctx *c, struct moat_err *e)
{
	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 && errno == EINVAL) {
		moat_err_set(e, MOAT_E_SYSTEM, 0,
			     "seccomp is not available (CONFIG_SECCOMP_FILTER)");
		return jail_degrade(c, e);
	}
	c->use_seccomp = true;
	return 0;
}

int jail_seccomp_child(struct jail_ctx *c, struct moat_err *e)
{
	if (!c->use_seccomp)
		return 0;
	struct sock_fprog prog = {
		.len = sizeof moat_seccomp_bpf / sizeof moat_seccomp_bpf[0],
		.filter = (struct sock_filter *)moat_seccomp_bpf,
	};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_NO_NEW_PRIVS");
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "load seccomp filter");
	return 0;
}
