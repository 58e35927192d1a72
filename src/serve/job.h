/* Slow synchronous work (a manifest's git clone) in a forked child, so
 * that the daemon's event loop keeps serving meanwhile. The child runs
 * fn(fd, arg) and writes its result to fd; the parent collects the bytes
 * and, once the child has exited, hands them to done(). */
#ifndef MOAT_SERVE_JOB_H
#define MOAT_SERVE_JOB_H

#include <event2/event.h>
#include <stddef.h>

struct job;

/* status: the child's wait status; out/len: everything it wrote. */
typedef void (*job_done_cb)(void *arg, int status, const char *out, size_t len);

/* fn runs in the child (its own process group, killed if the daemon dies,
 * with no descriptor of the daemon's but 0-2 and fd; return 0 for success)
 * and must not touch the event loop. NULL when it cannot be started. */
struct job *job_start(struct event_base *base, int (*fn)(int fd, void *arg), void *fnarg,
		      job_done_cb done, void *arg);
/* Kill the child and its process group; done() is not called. */
void job_cancel(struct job *j);
/* At daemon exit: cancel every job still running. */
void job_cancel_all(void);

#endif
