/* moat_jail_spawn and friends: the one flow from a policy to a confined
 * command. The order inside the child is the security argument:
 *
 *   wait for the host to write our id maps and cgroup
 *   ids (setgroups, setresuid)  -- before touching any file
 *   cgroup namespace            -- after the host moved us into our cgroup
 *   mount tree + pivot_root     -- needs capabilities over our namespaces
 *   capabilities, securebits, rlimits, no_new_privs -- nothing needs them now
 *   Landlock                    -- rules opened in the final view
 *   seccomp last                -- it forbids mount/unshare used above
 *   pid-1 supervisor forks the command, which inherits all of the above
 *
 * Child setup errors travel to the host as one struct jail_msg on a
 * close-on-exec pipe; EOF on it means the command was exec'd. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/util.h"
#include "../init/init.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct moat_jail {
	struct jail_ctx c;
	pid_t pid;
	bool reaped;
	struct jail_cgroup *cg;
	bool released; /* placeholders cleaned up */
	void (*warn)(void *arg, const char *msg);
	void *warn_arg;
};

int64_t moat_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int jail_degrade(struct jail_ctx *c, struct moat_err *e)
{
	if (!c->p->allow_degraded) {
		size_t l = strlen(e->msg);
		snprintf(e->msg + l, sizeof e->msg - l,
			 " (refusing to run without it; --allow-degraded overrides)");
		return -1;
	}
	if (c->l->warn) {
		char buf[MOAT_ERR_MSG + 64];
		snprintf(buf, sizeof buf, "%s; continuing without it (--allow-degraded)",
			 e->msg);
		c->l->warn(c->l->warn_arg, buf);
	}
	e->kind = MOAT_E_NONE;
	return 0;
}

void jail_child_fail(int fd, const struct moat_err *e)
{
	struct jail_msg m = {.kind = e->kind, .errnum = e->errnum};
	snprintf(m.msg, sizeof m.msg, "%s", e->msg);
	ssize_t w = write(fd, &m, sizeof m);
	(void)w;
	_exit(moat_err_exit_code(e));
}

/* Agent mode: become the agent. Its descriptors go to 3, 4, ...; nothing
 * else of the host's survives the exec (a fresh image holds no copy of
 * the caller's memory either: a daemon's tokens stay outside). */
static __attribute__((noreturn)) void exec_agent(struct jail_ctx *c)
{
	struct moat_err e = {0};
	const struct moat_launch *l = c->l;
	/* the launch's descriptors, then the gateway's listeners (kept by
	 * the agent so that a restarted daemon can have them again) */
	int fds[19];
	size_t nfds = 0;
	for (size_t i = 0; i < l->agent_nfds && nfds < 16; i++)
		fds[nfds++] = l->agent_fds[i];
	for (int i = 0; i < 2; i++)
		if (c->gate_child[i] >= 0)
			fds[nfds++] = c->gate_child[i];
	/* the agent tells them apart by their ports */
	if (c->control_child >= 0)
		fds[nfds++] = c->control_child;
	int top = 3 + (int)nfds + 1;
	/* Move everything we need above the range we are about to fill. */
	int exe = fcntl(l->agent_exe, F_DUPFD_CLOEXEC, top + 8);
	int errfd = fcntl(c->err_wr, F_DUPFD_CLOEXEC, top + 8);
	int tmp[19];
	if (exe < 0 || errfd < 0 || l->agent_nfds > 16) {
		moat_err_set(&e, MOAT_E_SYSTEM, errno, "agent descriptors");
		jail_child_fail(c->err_wr, &e);
	}
	for (size_t i = 0; i < nfds; i++)
		if ((tmp[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, top + 8)) < 0) {
			moat_err_set(&e, MOAT_E_SYSTEM, errno, "agent descriptors");
			jail_child_fail(errfd, &e);
		}
	for (size_t i = 0; i < nfds; i++)
		if (dup2(tmp[i], 3 + (int)i) < 0) { /* dup2 clears CLOEXEC */
			moat_err_set(&e, MOAT_E_SYSTEM, errno, "agent descriptors");
			jail_child_fail(errfd, &e);
		}
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int fd = 0; fd < 3 && devnull >= 0; fd++)
		dup2(devnull, fd);
	syscall(SYS_close_range, 3 + nfds, ~0U, CLOSE_RANGE_CLOEXEC);
	/* errfd and exe are close-on-exec like everything else above */
	syscall(SYS_execveat, exe, "", l->argv, l->envp, AT_EMPTY_PATH);
	moat_err_set(&e, MOAT_E_SYSTEM, errno, "exec the sandbox agent");
	jail_child_fail(errfd, &e);
}

bool jail_host_gone(const struct jail_ctx *c)
{
	struct pollfd pf = {.fd = c->sync_rd, .events = 0};
	return poll(&pf, 1, 0) < 0 || (pf.revents & (POLLHUP | POLLERR));
}

static __attribute__((noreturn)) void child_main(struct jail_ctx *c)
{
	struct moat_err e = {0};
	close(c->sync_wr);
	close(c->err_rd);
	close(c->st_rd);
	/* The root locks are the host's: a copy held open in here would keep
	 * the host from cleaning up early (flock is per open file). */
	for (size_t i = 0; i < c->nlocks; i++)
		close(c->locks[i]);
	/* Out of the caller's process group: a terminal's Ctrl-C (or a kill
	 * of the group) reaches the supervisor only through the host's
	 * forwarding, not a second time directly. Not for moat serve's agent:
	 * it blocks every signal and the daemon forwards none, and as a
	 * session leader its execs measured 0.15-0.2 ms slower. */
	if (!c->l->agent && setsid() < 0) {
		moat_err_set(&e, MOAT_E_SYSTEM, errno, "setsid");
		jail_child_fail(c->err_wr, &e);
	}
	if (c->l->die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
		moat_err_set(&e, MOAT_E_SYSTEM, errno, "PR_SET_PDEATHSIG");
		jail_child_fail(c->err_wr, &e);
	}
	/* Wait for the host to write our id maps. It takes it a few dozen
	 * microseconds; watching a shared flag for a moment saves a sleep and
	 * a cross-CPU wakeup, which costs far more on virtual machines. The
	 * pipe is the fallback and tells us if the host died. */
	int go = 0;
	int64_t until = moat_now_ms() + 2;
	while (!(go = __atomic_load_n(c->go, __ATOMIC_ACQUIRE)) && moat_now_ms() < until)
		__builtin_ia32_pause();
	if (!go) {
		char b;
		ssize_t n;
		while ((n = read(c->sync_rd, &b, 1)) < 0 && errno == EINTR)
			;
		if (n != 1)
			_exit(125); /* the host gave up (and told the user why) */
		go = __atomic_load_n(c->go, __ATOMIC_ACQUIRE);
	}
	if (go != 1)
		_exit(125);

	if (jail_ns_child(c, &e) < 0)
		jail_child_fail(c->err_wr, &e);
	/* Changing credentials cleared the parent-death signal: set it again,
	 * then make sure the host did not die in between (it keeps its end
	 * of the sync pipe open for as long as it owns the sandbox). */
	if (c->l->die_with_parent) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
			moat_err_set(&e, MOAT_E_SYSTEM, errno, "PR_SET_PDEATHSIG");
			jail_child_fail(c->err_wr, &e);
		}
		if (jail_host_gone(c))
			_exit(125);
	}
	if (unshare(CLONE_NEWCGROUP) < 0) {
		moat_err_set(&e, MOAT_E_SYSTEM, errno, "cgroup namespace");
		jail_child_fail(c->err_wr, &e);
	}
	if (jail_mount_child(c, &e) < 0) {
		moat_err_prefix(&e, "filesystem");
		jail_child_fail(c->err_wr, &e);
	}
	if (jail_net_child(c, c->gate_child, &e) < 0)
		jail_child_fail(c->err_wr, &e);
	/* after every namespace set-up makes (the cgroup one above), while
	 * we still hold CAP_SYS_RESOURCE in ours */
	if (jail_quota_child(c, &e) < 0)
		jail_child_fail(c->err_wr, &e);
	/* the pty after caps: in users mode its slave is then user's */
	if (jail_caps_child(c, &e) < 0 || jail_pty_child(c, &e) < 0 ||
	    jail_landlock_child(c, &e) < 0 || jail_seccomp_child(c, &e) < 0)
		jail_child_fail(c->err_wr, &e);
	/* A host (moat serve: no parent-death signal) that died during the
	 * set-up never learnt of this sandbox: nobody would ever stop it. */
	if (jail_host_gone(c))
		_exit(125);
	close(c->sync_rd);

	if (c->l->agent)
		exec_agent(c);
	/* the supervisor has no use for the gateway's listeners */
	for (int i = 0; i < 2; i++)
		if (c->gate_child[i] >= 0)
			close(c->gate_child[i]);
	if (c->control_child >= 0)
		close(c->control_child);

	struct moat_init_args ia = {
		.argv = c->l->argv,
		.envp = c->l->envp,
		.cwd = c->l->cwd ? c->l->cwd : c->p->workspace,
		.err_fd = c->err_wr,
		.status_fd = c->st_wr,
		.ctty = c->l->tty,
	};
	moat_init_main(&ia);
}

static void ctx_free(struct jail_ctx *c)
{
	jail_mount_free(c);
	jail_ns_free(c);
	jail_users_free(c);
	moat_strv_free(&c->protect_roots);
	if (c->go) {
		munmap((void *)c->go, JAIL_SHARED_SIZE);
		c->go = NULL;
	}
	int *fds[] = {&c->sync_rd, &c->sync_wr, &c->err_rd, &c->err_wr,
		      &c->st_rd, &c->st_wr, &c->ws_fd, &c->gate_sp[0], &c->gate_sp[1],
		      &c->gate_fds[0], &c->gate_fds[1], &c->tty_master, &c->dns_fds[0],
		      &c->dns_fds[1], &c->upper_lock, &c->control_fd};
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}

/* Shared locks on the writable roots: the last sandbox to leave a root
 * removes its placeholders (see protect.c). */
static int lock_roots(struct moat_jail *j, struct moat_err *e)
{
	j->c.locks = calloc(j->c.protect_roots.n + 2, sizeof *j->c.locks);
	if (!j->c.locks)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "locks");
	/* an image's upper (taken by jail_mount_prepare): held like the
	 * roots', released when everything inside is gone */
	if (j->c.upper_lock >= 0) {
		j->c.locks[j->c.nlocks++] = j->c.upper_lock;
		j->c.upper_lock = -1;
	}
	for (size_t i = 0; i < j->c.protect_roots.n; i++) {
		int fd = open(j->c.protect_roots.v[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return moat_err_set(e, MOAT_E_USAGE, errno, "%s", j->c.protect_roots.v[i]);
		j->c.locks[j->c.nlocks++] = fd;
		if (flock(fd, LOCK_SH) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "lock %s",
					    j->c.protect_roots.v[i]);
	}
	return 0;
}

static void reap(struct moat_jail *j, int *status)
{
	int st = 0;
	while (waitpid(j->pid, &st, 0) < 0 && errno == EINTR)
		;
	j->reaped = true;
	if (status)
		*status = st;
}

/* A start or finish that failed: the child is killed and reaped, and
 * everything of the jail goes. */
static void abandon(struct moat_jail *j)
{
	if (j->pid > 0) {
		kill(j->pid, SIGKILL);
		reap(j, NULL);
	}
	j->c.p = NULL; /* no further use of the caller's structs */
	moat_jail_destroy(j);
}

int moat_jail_spawn_start(const struct moat_policy *p, const struct moat_launch *l,
			  struct moat_jail **out, struct moat_err *e)
{
	*out = NULL;
	if (!p->finalized)
		return moat_err_set(e, MOAT_E_USAGE, 0, "policy was not finalized");
	if (!l->argv || !l->argv[0])
		return moat_err_set(e, MOAT_E_USAGE, 0, "no command given");
	if (l->tty && l->agent)
		return moat_err_set(e, MOAT_E_USAGE, 0, "a terminal is for moat run, not an agent");
	struct moat_jail *j = calloc(1, sizeof *j);
	if (!j)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "jail");
	struct jail_ctx *c = &j->c;
	c->p = p;
	c->l = l;
	c->ws_fd = c->sync_rd = c->sync_wr = c->err_rd = c->err_wr = -1;
	c->st_rd = c->st_wr = -1;
	c->gate_sp[0] = c->gate_sp[1] = c->gate_fds[0] = c->gate_fds[1] = -1;
	c->gate_child[0] = c->gate_child[1] = -1;
	c->control_fd = c->control_child = -1;
	c->tty_master = -1;
	c->dns_fds[0] = c->dns_fds[1] = -1;
	c->users_lock = c->users_range_ns = -1;
	c->upper_lock = -1;
	j->pid = -1;
	int sp[2] = {-1, -1}, ep[2] = {-1, -1}, stp[2] = {-1, -1};

	if (jail_net_prepare(c, e) < 0 || jail_ns_prepare(c, e) < 0 ||
	    jail_landlock_prepare(c, e) < 0 ||
	    jail_seccomp_prepare(c, e) < 0 || jail_mount_prepare(c, e) < 0 ||
	    jail_quota_prepare(c, e) < 0)
		goto fail;
	if (jail_cgroup_prepare(p, &j->cg, e) < 0 && jail_degrade(c, e) < 0)
		goto fail;
	if (lock_roots(j, e) < 0)
		goto fail;
	/* The go-ahead travels on a socket so that sending it never raises
	 * SIGPIPE in a caller that did not ignore it (see below). */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 ||
	    pipe2(ep, O_CLOEXEC) < 0 || pipe2(stp, O_CLOEXEC) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "pipe");
		for (int i = 0; i < 2; i++) {
			int *fds[] = {&sp[i], &ep[i], &stp[i]};
			for (int k = 0; k < 3; k++)
				if (*fds[k] >= 0)
					close(*fds[k]);
		}
		goto fail;
	}
	c->st_rd = stp[0];
	c->st_wr = stp[1];
	c->go = mmap(NULL, JAIL_SHARED_SIZE, PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c->go == MAP_FAILED) {
		c->go = NULL;
		moat_err_set(e, MOAT_E_SYSTEM, errno, "mmap");
		goto fail;
	}
	c->sync_rd = sp[0];
	c->sync_wr = sp[1];
	c->err_rd = ep[0];
	c->err_wr = ep[1];

	fflush(NULL);
	j->pid = jail_ns_clone(c, e);
	if (j->pid < 0)
		goto fail;
	if (j->pid == 0)
		child_main(c);

	close(c->sync_rd);
	close(c->err_wr);
	close(c->st_wr);
	c->sync_rd = c->err_wr = c->st_wr = -1;
	if (jail_ns_parent(c, j->pid, e) < 0 || jail_cgroup_parent(j->cg, j->pid, e) < 0)
		goto fail;
	/* the caller's last word before the child may run (moat serve
	 * records the sandbox here, so that no daemon death orphans it) */
	if (l->before_go && l->before_go(l->before_go_arg, j, e) < 0)
		goto fail;
	__atomic_store_n(c->go, 1, __ATOMIC_RELEASE);
	/* EPIPE is no failure: a child that saw the flag may already be past
	 * the point where it reads the socket and have closed its end, or it
	 * failed and its error message is waiting on err_rd. */
	if (send(c->sync_wr, "g", 1, MSG_NOSIGNAL) != 1 && errno != EPIPE) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "start sandbox");
		goto fail;
	}
	/* While the child builds its first mounts, create the placeholders it
	 * will protect (file system work the two of us need not do in turn). */
	for (size_t i = 0; i < c->nops; i++)
		if (c->ops[i].kind == MOP_PROTECT && c->ops[i].host)
			jail_protect_parent(&c->ops[i]);
	__atomic_store_n(&c->go[JAIL_GO_PROTECT], 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &c->go[JAIL_GO_PROTECT], FUTEX_WAKE, 1, NULL, NULL, 0);
	/* sync_wr stays open: its closing tells the child we died. */
	j->warn = l->warn;
	j->warn_arg = l->warn_arg;
	*out = j;
	return 0;

fail:
	abandon(j);
	return -1;
}

int moat_jail_spawn_fd(const struct moat_jail *j)
{
	return j->c.err_rd;
}

int moat_jail_spawn_finish(struct moat_jail *j, struct moat_err *e)
{
	struct jail_ctx *c = &j->c;
	struct jail_msg m;
	ssize_t n;
	while ((n = read(c->err_rd, &m, sizeof m)) < 0 && errno == EINTR)
		;
	if (n != 0) {
		if (n == (ssize_t)sizeof m) {
			m.msg[sizeof m.msg - 1] = '\0';
			e->kind = (enum moat_err_kind)m.kind;
			e->errnum = m.errnum;
			snprintf(e->msg, sizeof e->msg, "%s", m.msg);
		} else {
			moat_err_set(e, MOAT_E_SYSTEM, n < 0 ? errno : EPROTO,
				     "sandbox setup failed");
		}
		goto fail;
	}
	close(c->err_rd);
	c->err_rd = -1;
	if (jail_pty_parent(c, e) < 0 || jail_net_parent(c, e) < 0)
		goto fail;
	/* The policy and launch are the caller's; we keep no pointer into them. */
	c->p = NULL;
	c->l = NULL;
	return 0;

fail:
	abandon(j);
	return -1;
}

int moat_jail_spawn(const struct moat_policy *p, const struct moat_launch *l,
		    struct moat_jail **out, struct moat_err *e)
{
	if (moat_jail_spawn_start(p, l, out, e) < 0)
		return -1;
	if (moat_jail_spawn_finish(*out, e) < 0) {
		*out = NULL;
		return -1;
	}
	return 0;
}

void moat_jail_cgroups(const struct moat_jail *j, struct moat_strv *out)
{
	jail_cgroup_list(j->cg, out);
}

pid_t moat_jail_pid(const struct moat_jail *j)
{
	return j->pid;
}

int moat_jail_signal(struct moat_jail *j, int sig)
{
	if (j->reaped)
		return 0;
	return kill(j->pid, sig);
}

int moat_jail_kill(struct moat_jail *j)
{
	if (j->reaped)
		return 0;
	return kill(j->pid, SIGKILL);
}

static void fill_status(struct moat_jail *j, int status, struct moat_jail_status *st)
{
	memset(st, 0, sizeof *st);
	if (WIFEXITED(status)) {
		st->exit_code = WEXITSTATUS(status);
	} else {
		st->signal = WTERMSIG(status);
		st->exit_code = 128 + st->signal;
	}
	st->oom = jail_cgroup_oom(j->cg);
}

/* Remove placeholders once no process of ours can use them: called when
 * pid 1 reported that everything else is gone, or after it was reaped. */
static void release_roots(struct moat_jail *j)
{
	if (j->released)
		return;
	j->released = true;
	for (size_t i = 0; i < j->c.nlocks; i++)
		close(j->c.locks[i]);
	j->c.nlocks = 0;
	/* nested repositories the child found without a .git/commondir */
	const char *rep = j->c.go ? JAIL_REPORT(j->c.go) : "";
	for (size_t used = 0; j->c.go && used < JAIL_REPORT_CAP && rep[used];
	     used += strlen(rep + used) + 1) {
		char *end = NULL;
		unsigned long idx = strtoul(rep + used, &end, 10);
		if (end && *end == ':' && idx < j->c.nops && j->c.ops[idx].kind == MOP_PROTECT &&
		    strnlen(end + 1, PATH_MAX) < PATH_MAX)
			moat_strv_add(&j->c.ops[idx].watch, end + 1);
	}
	for (size_t i = 0; i < j->c.nops; i++) {
		const struct mop *op = &j->c.ops[i];
		if (op->kind != MOP_PROTECT || !op->host)
			continue;
		jail_protect_cleanup(op);
		jail_protect_sweep(op->host, &op->watch, j->warn, j->warn_arg);
	}
}

int moat_jail_wait(struct moat_jail *j, int64_t deadline_ms, const int *forward,
		   struct moat_jail_status *st, struct moat_err *e)
{
	if (j->reaped)
		return moat_err_set(e, MOAT_E_USAGE, ECHILD, "sandbox already ended");
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; forward && forward[i]; i++)
		sigaddset(&set, forward[i]);
	_cleanup_close_ int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "signalfd");
	for (;;) {
		int status;
		pid_t r = waitpid(j->pid, &status, WNOHANG);
		if (r < 0 && errno != EINTR)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "waitpid");
		if (r == j->pid) {
			j->reaped = true;
			fill_status(j, status, st);
			release_roots(j);
			return 1;
		}
		int timeout = -1;
		if (deadline_ms >= 0) {
			int64_t left = deadline_ms - moat_now_ms();
			if (left <= 0)
				return 0;
			timeout = left > 1000000 ? 1000000 : (int)left;
		}
		struct pollfd pfd[2] = {{.fd = sfd, .events = POLLIN},
					{.fd = j->c.st_rd, .events = POLLIN}};
		int n = poll(pfd, j->c.st_rd >= 0 ? 2 : 1, timeout);
		if (n < 0 && errno != EINTR)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "poll");
		if (n > 0 && (pfd[0].revents & POLLIN)) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
				if ((int)si.ssi_signo != SIGCHLD)
					kill(j->pid, (int)si.ssi_signo);
		}
		if (n > 0 && j->c.st_rd >= 0 && (pfd[1].revents & (POLLIN | POLLHUP))) {
			int code;
			ssize_t got = read(j->c.st_rd, &code, sizeof code);
			close(j->c.st_rd);
			j->c.st_rd = -1;
			if (got == (ssize_t)sizeof code) {
				/* Everything but pid 1 is gone: clean up while the
				 * kernel tears the namespaces down, then reap. */
				release_roots(j);
				/* pid 1 exits right after writing: poll briefly
				 * rather than sleep, a wakeup costs more. */
				int64_t until = moat_now_ms() + 3;
				pid_t w;
				while ((w = waitpid(j->pid, &status, WNOHANG)) == 0 &&
				       moat_now_ms() < until)
					__builtin_ia32_pause();
				if (w == j->pid)
					j->reaped = true;
				else
					reap(j, &status);
				fill_status(j, status, st);
				return 1;
			}
		}
	}
}

int moat_jail_tty(struct moat_jail *j)
{
	int fd = j->c.tty_master;
	j->c.tty_master = -1;
	return fd;
}

int moat_jail_wait_fd(const struct moat_jail *j)
{
	return j->c.st_rd;
}

int moat_jail_control_fd(struct moat_jail *j)
{
	int fd = j->c.control_fd;
	j->c.control_fd = -1;
	return fd;
}

int moat_jail_gate_fds(struct moat_jail *j, int fds[2])
{
	fds[0] = j->c.gate_fds[0];
	fds[1] = j->c.gate_fds[1];
	j->c.gate_fds[0] = j->c.gate_fds[1] = -1;
	return fds[0] >= 0 && fds[1] >= 0 ? 0 : -1;
}

int moat_jail_dns_fds(struct moat_jail *j, int fds[2])
{
	fds[0] = j->c.dns_fds[0];
	fds[1] = j->c.dns_fds[1];
	j->c.dns_fds[0] = j->c.dns_fds[1] = -1;
	return fds[0] >= 0 && fds[1] >= 0 ? 0 : -1;
}

pid_t moat_jail_detach(struct moat_jail *j, struct moat_strv *cgroups)
{
	pid_t pid = j->pid;
	jail_cgroup_release(j->cg, cgroups);
	j->cg = NULL;
	for (size_t i = 0; i < j->c.nlocks; i++)
		close(j->c.locks[i]);
	j->c.nlocks = 0;
	j->released = true;
	j->reaped = true; /* the caller's to reap now */
	free(j->c.locks);
	ctx_free(&j->c);
	free(j);
	return pid;
}

void moat_jail_destroy(struct moat_jail *j)
{
	if (!j)
		return;
	if (j->pid > 0 && !j->reaped) {
		kill(j->pid, SIGKILL);
		reap(j, NULL);
	}
	jail_cgroup_destroy(j->cg);
	release_roots(j);
	free(j->c.locks);
	ctx_free(&j->c);
	free(j);
}
