/* pid-1 supervisor: see init.h. */
#define _GNU_SOURCE
#include "init.h"

#include "../jail/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1,
				SIGUSR2, SIGWINCH, SIGCONT, SIGALRM, 0};

static const char *env_path(char *const *envp)
{
	for (size_t i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], "PATH=", 5) == 0)
			return envp[i] + 5;
	return "/usr/local/bin:/usr/bin:/bin";
}

/* execvpe() that searches the sandbox's PATH (glibc's uses the caller's).
 * Returns only on failure with errno set: EACCES/ENOEXEC -> 126, else 127. */
static void exec_search(char *const *argv, char *const *envp)
{
	const char *file = argv[0];
	if (strchr(file, '/')) {
		execve(file, argv, envp);
		return;
	}
	const char *path = env_path(envp);
	int saw_eacces = 0;
	char buf[PATH_MAX];
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dl = (size_t)(end - p);
		if (dl == 0) {
			buf[0] = '.';
			dl = 1;
		} else if (dl < sizeof buf) {
			memcpy(buf, p, dl);
		}
		if (dl + 1 + strlen(file) + 1 <= sizeof buf) {
			buf[dl] = '/';
			strcpy(buf + dl + 1, file);
			execve(buf, argv, envp);
			if (errno == EACCES || errno == ENOEXEC || errno == EPERM)
				saw_eacces = errno;
		}
		if (!*end)
			break;
		p = end;
	}
	errno = saw_eacces ? saw_eacces : ENOENT;
}

static void report(int fd, int kind, int errnum, const char *fmt, const char *arg)
	__attribute__((format(printf, 4, 0)));
static void report(int fd, int kind, int errnum, const char *fmt, const char *arg)
{
	struct jail_msg m = {.kind = kind, .errnum = errnum};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(m.msg, sizeof m.msg, fmt, arg);
#pragma GCC diagnostic pop
	if (errnum) {
		size_t l = strlen(m.msg);
		snprintf(m.msg + l, sizeof m.msg - l, ": %s", strerror(errnum));
	}
	ssize_t w = write(fd, &m, sizeof m);
	(void)w;
}

static __attribute__((noreturn)) void run_command(const struct moat_init_args *a)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* A new session: the caller's terminal is not its controlling
	 * terminal, so no TIOCSTI into it and no job-control signals from it.
	 * In terminal mode the session's terminal is the sandbox's own pty
	 * (on 0, 1 and 2 already), with the command's group in the
	 * foreground: job control works, and only on that pty. */
	if (setsid() < 0) {
		report(a->err_fd, MOAT_E_SYSTEM, errno, "%s", "setsid");
		_exit(125);
	}
	if (a->ctty && (ioctl(0, TIOCSCTTY, 0) < 0 || tcsetpgrp(0, getpid()) < 0)) {
		report(a->err_fd, MOAT_E_SYSTEM, errno, "%s", "controlling terminal");
		_exit(125);
	}
	if (a->cwd && chdir(a->cwd) < 0) {
		report(a->err_fd, MOAT_E_USAGE, errno, "working directory %s", a->cwd);
		_exit(125);
	}
	/* No descriptor of the caller's other than stdio enters the sandbox
	 * (a directory fd would be a way out of the mount view). */
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		report(a->err_fd, MOAT_E_SYSTEM, errno, "%s", "close_range");
		_exit(125);
	}
	exec_search(a->argv, a->envp);
	int err = errno;
	if (err == ENOENT || err == ENOTDIR) {
		report(a->err_fd, MOAT_E_NOTFOUND, 0, "%s: command not found", a->argv[0]);
		_exit(127);
	}
	report(a->err_fd, MOAT_E_NOEXEC, err, "cannot execute %s", a->argv[0]);
	_exit(126);
}

void moat_init_main(const struct moat_init_args *a)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; forwarded[i]; i++)
		sigaddset(&set, forwarded[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);

	/* vfork: the child borrows our memory until it execs, so it starts at
	 * once on this CPU (no page-table copy, no cross-CPU wakeup). It only
	 * calls async-signal-safe functions and never returns. */
	pid_t cmd = vfork();
	if (cmd < 0) {
		report(a->err_fd, MOAT_E_SYSTEM, errno, "%s", "fork");
		_exit(125);
	}
	if (cmd == 0)
		run_command(a);

	/* EOF on err_fd tells the host the command has been exec'd. */
	close(a->err_fd);
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int fd = 0; fd < 3; fd++) {
		if (devnull >= 0)
			dup2(devnull, fd);
		else
			close(fd);
	}

	int code = 0;
	bool done = false;
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&set, &si);
		if (sig < 0)
			continue;
		if (sig != SIGCHLD) {
			if (!done && kill(-cmd, sig) < 0)
				kill(cmd, sig);
			continue;
		}
		for (;;) {
			int status;
			pid_t r = waitpid(-1, &status, WNOHANG);
			if (r < 0 && errno == ECHILD) {
				/* Nothing is left: tell the host now, so it can clean
				 * up while the kernel tears the namespaces down. */
				ssize_t w = write(a->status_fd, &code, sizeof code);
				(void)w;
				_exit(code);
			}
			if (r <= 0)
				break;
			if (r == cmd && !done) {
				done = true;
				code = WIFEXITED(status) ? WEXITSTATUS(status)
							 : 128 + WTERMSIG(status);
				/* No orphan outlives the command, even after
				 * setsid or a double fork. */
				kill(-1, SIGKILL);
			}
		}
	}
}
