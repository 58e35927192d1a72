/* Capabilities, securebits, rlimits. After this the process holds no
 * capability in any set and can never regain one: the bounding set is
 * empty, ambient cleared, and securebits locked so that even uid 0 inside
 * a namespace gains nothing on execve. Core dumps are off. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static int no_new_privs(struct moat_err *e);

int jail_caps_child(struct jail_ctx *c, struct moat_err *e)
{
	struct rlimit core = {0, 0};
	if (setrlimit(RLIMIT_CORE, &core) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "RLIMIT_CORE");
	if (c->users)
		return jail_users_caps(c, e) < 0 ? -1 : no_new_privs(e);
	unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
			     SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
			     SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
			     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_SECUREBITS");
	for (int cap = 0; cap <= 63; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break; /* past the kernel's last capability */
			return moat_err_set(e, MOAT_E_SYSTEM, errno,
					    "drop capability %d from bounding set", cap);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "clear ambient capabilities");
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {{0, 0, 0}, {0, 0, 0}};
	if (syscall(SYS_capset, &h, d) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "drop capabilities");
	return no_new_privs(e);
}

static int no_new_privs(struct moat_err *e)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_NO_NEW_PRIVS");
	/* Non-dumpable: the sandboxed command (same uid) may not ptrace or
	 * read /proc/1/mem of the supervisor. execve resets it for the command. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_DUMPABLE");
	return 0;
}
