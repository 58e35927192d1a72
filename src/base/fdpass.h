/* Descriptors over a unix socket (SCM_RIGHTS): the gateway's listeners
 * travel from the sandbox to moat run or the daemon, and from the agent
 * to a restarted daemon. */
#ifndef MOAT_FDPASS_H
#define MOAT_FDPASS_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#define MOAT_FDPASS_MAX 4

/* sendmsg(2) of iov with nfds (<= MOAT_FDPASS_MAX, 0 for none) attached;
 * returns what sendmsg returns. */
ssize_t moat_send_fds(int sock, const struct iovec *iov, size_t niov, const int *fds,
		      size_t nfds);
/* recvmsg(2) of up to len bytes into buf. fds[0..nfds) are filled only
 * when exactly nfds descriptors came along (close-on-exec); otherwise they
 * are -1 and whatever came is closed. Returns what recvmsg returns. */
ssize_t moat_recv_fds(int sock, void *buf, size_t len, int *fds, size_t nfds);
/* The same for a message with any number of descriptors up to nfds: the
 * ones that came are fds[0..*got), the rest -1 (more than nfds: all of
 * them closed, *got 0). */
ssize_t moat_recv_some_fds(int sock, void *buf, size_t len, int *fds, size_t nfds,
			   size_t *got);

#endif
