/* Terminal mode: the sandbox's own pseudo-terminal (see internal.h).
 *
 * The pty comes from the sandbox's devpts instance (mount.c mounts one,
 * newinstance, on /dev/pts), not the host's: so the slave's name, the one
 * `tty` prints, exists inside, and the host's devpts (every other
 * terminal of the machine) never needs to be visible. The host holds only
 * the master, and it is the only way bytes get from the sandbox to the
 * caller's terminal: the caller's own terminal descriptors are replaced
 * here, before anything of the sandbox runs, so no TIOCSTI or TIOCLINUX
 * inside can reach them (seccomp refuses both anyway). */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/fdpass.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

/* The caller's keys (erase, kill, interrupt, ...) and UTF-8 input mode;
 * every other flag stays the kernel's default (cooked, echo, signals),
 * whatever state the caller's terminal is in. */
static void copy_modes(int slave, const struct termios *from)
{
	struct termios t;
	if (tcgetattr(slave, &t) < 0)
		return;
	for (int i = 0; i < NCCS; i++)
		if (i != VMIN && i != VTIME)
			t.c_cc[i] = from->c_cc[i];
	t.c_iflag = (t.c_iflag & ~(tcflag_t)IUTF8) | (from->c_iflag & IUTF8);
	(void)tcsetattr(slave, TCSANOW, &t);
}

int jail_pty_child(struct jail_ctx *c, struct moat_err *e)
{
	const struct moat_launch *l = c->l;
	if (!l->tty)
		return 0;
	/* pts/ptmx, not the /dev/ptmx symlink: this instance's multiplexer.
	 * O_NOCTTY: the supervisor (a session leader) must not take it. */
	int m = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "terminal: open /dev/pts/ptmx");
	int s = -1;
	if (unlockpt(m) < 0 ||
	    (s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY)) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "terminal: new pty");
		close(m);
		return -1;
	}
	if (l->tty_modes)
		copy_modes(s, l->tty_modes);
	if (l->tty_cols && l->tty_rows) {
		struct winsize ws = {.ws_row = l->tty_rows, .ws_col = l->tty_cols};
		(void)ioctl(s, TIOCSWINSZ, &ws);
	}
	/* the caller's stdio (its terminal) goes now */
	for (int fd = 0; fd < 3; fd++)
		if (dup2(s, fd) < 0) {
			moat_err_set(e, MOAT_E_SYSTEM, errno, "terminal: stdio");
			close(m);
			return -1;
		}
	if (s > 2)
		close(s);
	/* so do its other descriptors of a terminal (a shell's `3<>/dev/tty`,
	 * a test's pass_fds): exec closes them for the command, but pid 1,
	 * which never execs, would keep them for the sandbox's life */
	DIR *d = opendir("/proc/self/fd");
	if (!d) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "terminal: /proc/self/fd");
		close(m);
		return -1;
	}
	for (struct dirent *de; (de = readdir(d));) {
		int fd = atoi(de->d_name);
		if (fd > 2 && fd != m && fd != dirfd(d) && isatty(fd))
			close(fd);
	}
	closedir(d);
	char byte = 't';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	ssize_t n = moat_send_fds(c->sync_rd, &iov, 1, &m, 1);
	int err = errno;
	close(m);
	if (n != 1)
		return moat_err_set(e, MOAT_E_SYSTEM, err, "terminal: hand the pty over");
	return 0;
}

int jail_pty_parent(struct jail_ctx *c, struct moat_err *e)
{
	if (!c->l->tty)
		return 0;
	int fd;
	char byte;
	ssize_t n;
	while ((n = moat_recv_fds(c->sync_wr, &byte, 1, &fd, 1)) < 0 && errno == EINTR)
		;
	if (n != 1 || fd < 0) {
		int err = n < 0 ? errno : EPROTO;
		return moat_err_set(e, MOAT_E_SYSTEM, err, "terminal: receive the pty");
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int err = errno;
		close(fd);
		return moat_err_set(e, MOAT_E_SYSTEM, err, "terminal: pty master");
	}
	c->tty_master = fd;
	return 0;
}
