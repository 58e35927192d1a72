/* SCM_RIGHTS in one place: see fdpass.h. */
#define _GNU_SOURCE
#include "fdpass.h"

#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t moat_send_fds(int sock, const struct iovec *iov, size_t niov, const int *fds,
		      size_t nfds)
{
	char cbuf[CMSG_SPACE(MOAT_FDPASS_MAX * sizeof(int))] = {0};
	struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = niov};
	if (nfds > MOAT_FDPASS_MAX)
		return -1;
	if (nfds) {
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

/* Both receivers: the descriptors of the first SCM_RIGHTS message that
 * fits (exactly nfds of them when exact, else 0 to nfds) go to fds[0..*got);
 * every other one that came is closed. */
static ssize_t recv_fds(int sock, void *buf, size_t len, int *fds, size_t nfds, bool exact,
			size_t *got_out)
{
	char cbuf[CMSG_SPACE(MOAT_FDPASS_MAX * sizeof(int))] = {0};
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof cbuf};
	*got_out = 0;
	for (size_t i = 0; i < nfds; i++)
		fds[i] = -1;
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t got = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int in[MOAT_FDPASS_MAX];
		size_t keep = got < MOAT_FDPASS_MAX ? got : MOAT_FDPASS_MAX;
		memcpy(in, CMSG_DATA(cm), keep * sizeof(int));
		bool fits = exact ? nfds && got == nfds : got <= nfds;
		if (fits && *got_out == 0) {
			memcpy(fds, in, got * sizeof(int));
			*got_out = got;
			continue;
		}
		for (size_t i = 0; i < keep; i++)
			close(in[i]);
	}
	return n;
}

ssize_t moat_recv_some_fds(int sock, void *buf, size_t len, int *fds, size_t nfds,
			   size_t *got_out)
{
	return recv_fds(sock, buf, len, fds, nfds, false, got_out);
}

ssize_t moat_recv_fds(int sock, void *buf, size_t len, int *fds, size_t nfds)
{
	size_t got;
	return recv_fds(sock, buf, len, fds, nfds, true, &got);
}
