/* Forked jobs: see job.h. The daemon is single-threaded, so a fork here is
 * safe for the child's malloc; the child never returns into libevent. */
#define _GNU_SOURCE
#include "job.h"

#include <errno.h>
#include <event2/buffer.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

/* More than any result we make (manifests are capped well below). */
#define JOB_MAX_OUT ((size_t)2 << 30)

struct job {
	pid_t pid;
	int fd;
	struct event *ev;
	struct evbuffer *out;
	job_done_cb done;
	void *arg;
	struct job *next;
};

static struct job *jobs;

static void unlink_job(struct job *j)
{
	for (struct job **p = &jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
}

static int reap(pid_t pid)
{
	int st = 0;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return st;
}

static void job_free(struct job *j)
{
	unlink_job(j);
	event_free(j->ev);
	close(j->fd);
	evbuffer_free(j->out);
	free(j);
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
	struct job *j = arg;
	for (;;) {
		int n = evbuffer_read(j->out, fd, 1 << 16);
		if (n > 0 && evbuffer_get_length(j->out) > JOB_MAX_OUT) {
			job_done_cb done = j->done;
			void *darg = j->arg;
			job_cancel(j);
			done(darg, -1, NULL, 0);
			return;
		}
		if (n > 0)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n < 0) { /* not EOF: the child may be blocked writing */
			job_done_cb done = j->done;
			void *darg = j->arg;
			job_cancel(j);
			done(darg, -1, NULL, 0);
			return;
		}
		break; /* EOF: the child is done writing */
	}
	/* The child closes its end by exiting (it waited for what it ran) */
	int st = reap(j->pid);
	size_t len = evbuffer_get_length(j->out);
	const char *data = len ? (const char *)evbuffer_pullup(j->out, -1) : "";
	job_done_cb done = j->done;
	void *darg = j->arg;
	/* done() may start or cancel other jobs: leave the list first */
	unlink_job(j);
	done(darg, data ? st : -1, data, data ? len : 0);
	job_free(j);
}

struct job *job_start(struct event_base *base, int (*fn)(int fd, void *arg), void *fnarg,
		      job_done_cb done, void *arg)
{
	struct job *j = calloc(1, sizeof *j);
	int p[2];
	if (!j)
		return NULL;
	if (pipe2(p, O_CLOEXEC) < 0) {
		free(j);
		return NULL;
	}
	j->out = evbuffer_new();
	j->pid = j->out ? fork() : -1;
	if (j->pid == 0) {
		/* none of the daemon's descriptors (its lock, sockets, pidfds)
		 * stay open here, and a daemon that dies takes us along */
		pid_t parent = getppid();
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(1);
		close(p[0]);
		setpgid(0, 0);
		/* fd 3 is the pipe, kept from what fn may exec (git) */
		if ((p[1] != 3 && dup2(p[1], 3) < 0) || fcntl(3, F_SETFD, FD_CLOEXEC) < 0 ||
		    close_range(4, ~0U, 0) < 0)
			_exit(1);
		/* what fn makes (a clone) keeps its usual modes, which go into
		 * the sandbox; the scratch directory around it is 0700 */
		umask(022);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		_exit(fn(3, fnarg) == 0 ? 0 : 1);
	}
	close(p[1]);
	if (j->pid < 0) {
		close(p[0]);
		if (j->out)
			evbuffer_free(j->out);
		free(j);
		return NULL;
	}
	setpgid(j->pid, j->pid); /* either of us may run first */
	j->fd = p[0];
	fcntl(j->fd, F_SETFL, O_NONBLOCK);
	j->done = done;
	j->arg = arg;
	j->ev = event_new(base, j->fd, EV_READ | EV_PERSIST, on_output, j);
	if (!j->ev || event_add(j->ev, NULL) < 0) {
		kill(-j->pid, SIGKILL);
		kill(j->pid, SIGKILL);
		reap(j->pid);
		if (j->ev)
			event_free(j->ev);
		close(j->fd);
		evbuffer_free(j->out);
		free(j);
		return NULL;
	}
	j->next = jobs;
	jobs = j;
	return j;
}

void job_cancel(struct job *j)
{
	if (!j)
		return;
	kill(-j->pid, SIGKILL);
	kill(j->pid, SIGKILL);
	reap(j->pid);
	job_free(j);
}

void job_cancel_all(void)
{
	while (jobs)
		job_cancel(jobs);
}
