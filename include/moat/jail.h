/* The isolation engine: policy in, confined process out.
 *
 *   moat_jail_spawn()   builds the sandbox and starts the command in it
 *   moat_jail_signal()  forwards a signal to the command
 *   moat_jail_wait()    waits (with an optional deadline) for it to end
 *   moat_jail_destroy() kills what is left and removes everything the
 *                       sandbox owned (cgroups, placeholder files)
 *
 * Every sandbox gets its own user, mount, pid, net, ipc, uts and cgroup
 * namespaces, a pid-1 supervisor, Landlock, seccomp, no capabilities and
 * never host uid 0. A layer that cannot be set up is an error unless the
 * policy says allow_degraded. No global state: a jail is one struct. */
#ifndef MOAT_JAIL_H
#define MOAT_JAIL_H

#include <moat/err.h>
#include <moat/policy.h>
#include <moat/strv.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct moat_jail;
struct termios;

struct moat_launch {
	char *const *argv;     /* argv[0] is looked up in the sandbox's PATH */
	char *const *envp;     /* the complete environment (see policy_build_env) */
	const char *home;      /* HOME inside; an empty private directory */
	const char *cwd;       /* NULL = the workspace */
	bool die_with_parent;  /* SIGKILL the sandbox if the caller dies */
	/* Agent mode (moat serve): instead of the supervisor running argv,
	 * pid 1 execs agent_exe (an O_PATH fd of a static binary, allowed to
	 * run by a Landlock rule on that file alone) with argv, and with
	 * agent_fds[0..n) as descriptors 3, 4, ... The sandbox then lives
	 * until it is killed; see moat_jail_detach. */
	bool agent;
	int agent_exe;
	const int *agent_fds;
	size_t agent_nfds;
	/* Called once the child is cloned, in its namespaces and cgroups,
	 * and before it is told to go (it runs nothing of its own yet);
	 * -1 aborts the spawn. May be NULL. */
	int (*before_go)(void *arg, struct moat_jail *j, struct moat_err *e);
	void *before_go_arg;
	/* Called for each layer skipped under allow_degraded, may be NULL. */
	void (*warn)(void *arg, const char *msg);
	void *warn_arg;
	/* A terminal (moat run on a tty; not with agent): the command's
	 * stdin/stdout/stderr and controlling terminal are a new pty of the
	 * sandbox's own devpts, made inside; its master comes out
	 * (moat_jail_tty). The caller's stdio does not enter the sandbox.
	 * tty_cols/rows (0: unset) and tty_modes (NULL: the kernel's
	 * defaults) are the caller's terminal's, copied onto the new one. */
	bool tty;
	unsigned short tty_cols, tty_rows;
	const struct termios *tty_modes;
};

/* Start the command. On success *out owns the sandbox; on failure nothing
 * is left behind and e says why (kind MOAT_E_NOTFOUND / MOAT_E_NOEXEC when
 * the command itself could not be executed). */
int moat_jail_spawn(const struct moat_policy *p, const struct moat_launch *l,
		    struct moat_jail **out, struct moat_err *e);

/* The same in two halves, for an event loop: start returns once the
 * child is cloned and told to go; when moat_jail_spawn_fd(j) (the error
 * pipe) is readable, finish reads the outcome: 0, or -1 with e set and
 * j destroyed (nothing left behind). p and l must stay valid until
 * finish (or moat_jail_destroy, which abandons a started spawn). */
int moat_jail_spawn_start(const struct moat_policy *p, const struct moat_launch *l,
			  struct moat_jail **out, struct moat_err *e);
int moat_jail_spawn_fd(const struct moat_jail *j);
int moat_jail_spawn_finish(struct moat_jail *j, struct moat_err *e);

/* Append the sandbox's cgroup directories to *out (copies). */
void moat_jail_cgroups(const struct moat_jail *j, struct moat_strv *out);

/* Host pid of the sandbox's pid 1 (for /proc inspection, not for kill). */
pid_t moat_jail_pid(const struct moat_jail *j);

/* Deliver sig to the command's process group through pid 1. */
int moat_jail_signal(struct moat_jail *j, int sig);

/* Kill every process of the sandbox now. */
int moat_jail_kill(struct moat_jail *j);

struct moat_jail_status {
	int exit_code; /* the command's code, or 128+N if signal N killed it */
	int signal;    /* N when the sandbox as a whole was killed (timeout,
			* OOM of pid 1, moat_jail_kill), else 0 */
	bool oom;      /* the memory limit was hit and a process killed */
};

/* Wait for the sandbox to end. deadline_ms < 0 waits forever. Returns 1
 * when it ended (*st filled), 0 when the deadline passed first, -1 on
 * error. Signals in `forward` (0-terminated) arriving meanwhile are
 * forwarded to the command; they must be blocked by the caller. */
int moat_jail_wait(struct moat_jail *j, int64_t deadline_ms,
		   const int *forward, struct moat_jail_status *st,
		   struct moat_err *e);

/* Terminal mode (launch.tty): take the pty's master (non-blocking,
 * close-on-exec); -1 when there is none. */
int moat_jail_tty(struct moat_jail *j);

/* Readable once the sandbox has ended (pid 1 reported that everything is
 * gone, or it died): moat_jail_wait then returns at once. For a caller's
 * own event loop (moat run's terminal relay). */
int moat_jail_wait_fd(const struct moat_jail *j);

/* Gateway mode (policy.gateway): take the listening sockets of the
 * sandbox's 127.0.0.1:3128 (HTTP proxy) and :1080 (SOCKS5); the caller's
 * gateway accepts on them. Returns -1 when there are none. */
int moat_jail_gate_fds(struct moat_jail *j, int fds[2]);
/* Control mode (policy.control): the port of the sandbox's control
 * listener (127.0.0.1 inside), and taking its listening socket; -1 when
 * there is none. moat-agent keeps a copy (fd 6) for a restarted daemon. */
#define MOAT_CONTROL_PORT 7878
int moat_jail_control_fd(struct moat_jail *j);
/* A sandbox with its own network: take its resolver's sockets (UDP and
 * TCP 127.0.0.1:53 inside; serve them with src/base/dnsd.h). Returns -1
 * when there are none. */
int moat_jail_dns_fds(struct moat_jail *j, int fds[2]);

/* Agent mode: let the sandbox live on without us. Frees the handle, keeps
 * the cgroups (their directories are appended to *cgroups, for
 * moat_cgroup_remove) and the placeholders (inside a directory the caller
 * owns and removes). Returns pid 1's host pid; the caller reaps it. */
pid_t moat_jail_detach(struct moat_jail *j, struct moat_strv *cgroups);

/* Remove cgroup directories of a detached sandbox once its processes are
 * gone (waits up to ~1 s for them to leave). */
void moat_cgroup_remove(const struct moat_strv *dirs);
/* Freeze (or thaw) every process of a detached sandbox through the
 * freezer among its cgroup directories (v1 freezer.state, v2
 * cgroup.freeze), returning once the kernel reports it FROZEN / frozen.
 * No freezer among them: ENOTSUP, naming what is missing. */
int moat_cgroup_freeze(const struct moat_strv *dirs, bool frozen, struct moat_err *e);
/* Is it frozen now (read from the same files)? */
bool moat_cgroup_frozen(const struct moat_strv *dirs);
/* SIGKILL every process of the freezer cgroup among dirs, frozen or not
 * (v2 cgroup.kill; v1: frozen first so no pid listed can be recycled,
 * each killed, then thawed, since a v1-frozen task dies only once
 * thawed). ENOTSUP when there is no freezer. */
int moat_cgroup_kill(const struct moat_strv *dirs, struct moat_err *e);

/* Kill anything left, remove cgroups and placeholder files, free. */
void moat_jail_destroy(struct moat_jail *j);

/* The default quotas for this caller (policy quotas of -1): each key's
 * default, at most 1/frac of the caller's own limit (its user namespace's
 * /proc/sys/user/max_*, its soft rlimit). See docs/policy.md "quotas". */
void moat_jail_quota_defaults(int64_t q[MOAT_QUOTAS]);

/* Milliseconds on a monotonic clock, for deadlines. */
int64_t moat_now_ms(void);

#endif
