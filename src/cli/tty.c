/* moat run on a terminal: the relay between the caller's terminal (raw)
 * and the sandbox's pty master, see cli.h. */
#define _GNU_SOURCE
#include "cli.h"

#include "../base/cleanup.h"
#include "../base/term.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* Blocking write of all of buf to the caller's terminal (its descriptor is
 * the caller's shell's too: we do not make it non-blocking). */
static void write_out(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* the terminal is gone: nothing to show it on */
		buf += w;
		n -= (size_t)w;
	}
}

/* Master -> caller: one read, or (all) as much as there is now. false once
 * no slave is left open (EIO) or the master is gone. One read at a time in
 * the loop, so that a flood of output does not starve input and signals. */
static bool pump_out(struct run_tty *t, bool all)
{
	char buf[16384];
	for (;;) {
		ssize_t n = read(t->master, buf, sizeof buf);
		if (n > 0) {
			write_out(t->out, buf, (size_t)n);
			if (!all)
				return true;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
	}
}

/* Hang the sandbox's terminal up, as a modem line dropping would: the
 * kernel sends SIGHUP to its session, and the command reads EOF. */
static void hang_up(struct run_tty *t, struct moat_jail *j)
{
	if (t->master >= 0) {
		close(t->master);
		t->master = -1;
	}
	t->in_done = true;
	moat_jail_signal(j, SIGHUP);
}

int run_tty_wait(struct run_tty *t, struct moat_jail *j, int64_t deadline_ms,
		 const int *forward, struct moat_jail_status *st, struct moat_err *e)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; forward[i]; i++)
		sigaddset(&set, forward[i]);
	int end = moat_jail_wait_fd(j);
	{
		_cleanup_close_ int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
		if (sfd < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "signalfd");
		while (end >= 0) {
			int timeout = -1;
			int64_t now = moat_now_ms();
			if (deadline_ms >= 0) {
				int64_t left = deadline_ms - now;
				if (left <= 0)
					return 0;
				timeout = left > 1000000 ? 1000000 : (int)left;
			}
			/* While no slave is open the master polls as hung up
			 * at once: look again a little later instead of
			 * spinning, and never give up while the sandbox runs. */
			bool resting = t->out_retry_ms > now;
			if (resting && (timeout < 0 || t->out_retry_ms - now < timeout))
				timeout = (int)(t->out_retry_ms - now);
			bool pending = t->ioff < t->ilen;
			struct pollfd pf[4] = {
				{.fd = sfd, .events = POLLIN},
				{.fd = end, .events = POLLIN},
				{.fd = t->out_done || resting ? -1 : t->master,
				 .events = POLLIN | (pending ? POLLOUT : 0)},
				{.fd = t->in_done || pending || t->master < 0 ? -1 : t->in,
				 .events = POLLIN},
			};
			if (poll(pf, 4, timeout) < 0) {
				if (errno == EINTR)
					continue;
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "poll");
			}
			if (pf[0].revents & POLLIN) {
				struct signalfd_siginfo si;
				while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
					int sig = (int)si.ssi_signo;
					unsigned short cols, rows;
					if (sig == SIGWINCH) {
						/* the kernel tells the sandbox's
						 * foreground group (SIGWINCH) */
						if (t->master >= 0 &&
						    moat_term_size(t->in, &cols, &rows))
							moat_term_set_size(t->master, cols, rows);
					} else if (sig == SIGHUP) {
						hang_up(t, j);
					} else if (sig != SIGCHLD) {
						moat_jail_signal(j, sig);
					}
				}
			}
			if (t->master >= 0 && !t->out_done && !resting &&
			    (pf[2].revents & (POLLIN | POLLHUP | POLLERR)) && !pump_out(t, false))
				t->out_retry_ms = moat_now_ms() + 50;
			if (t->master >= 0 && pending && (pf[2].revents & POLLOUT)) {
				ssize_t w = write(t->master, t->ibuf + t->ioff, t->ilen - t->ioff);
				if (w > 0)
					t->ioff += (size_t)w;
				else if (w < 0 && errno != EAGAIN && errno != EINTR)
					t->ioff = t->ilen; /* the pty is gone */
			}
			if (pf[3].revents & (POLLIN | POLLHUP | POLLERR)) {
				ssize_t n = read(t->in, t->ibuf, sizeof t->ibuf);
				if (n > 0) {
					t->ilen = (size_t)n;
					t->ioff = 0;
				} else if (n == 0 || errno != EINTR) {
					/* the caller's terminal went away */
					hang_up(t, j);
				}
			}
			if (pf[1].revents & (POLLIN | POLLHUP | POLLERR))
				break; /* the sandbox ended */
		}
	}
	/* every process is gone: what they wrote is all in the master now */
	if (t->master >= 0 && !t->out_done)
		t->out_done = !pump_out(t, true);
	return moat_jail_wait(j, deadline_ms, forward, st, e);
}
