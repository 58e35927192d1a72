/* Unit tests for src/base/fdpass.c: descriptors over a unix socket, the
 * exact count (moat_recv_fds) and 1 to n (moat_recv_some_fds: the agent's
 * "netfds" reply carries the gateway's two, the control listener, or all
 * three; a restarted daemon once got none back for a control-only one). */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "base/fdpass.h"

#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Send n fresh pipe read ends over sp[0]; the originals are closed. */
static void send_n(int sock, size_t n)
{
	int fds[MOAT_FDPASS_MAX];
	for (size_t i = 0; i < n; i++) {
		int p[2];
		cr_assert_eq(pipe(p), 0);
		close(p[1]);
		fds[i] = p[0];
	}
	char b = 'x';
	struct iovec iov = {.iov_base = &b, .iov_len = 1};
	cr_assert_eq(moat_send_fds(sock, &iov, 1, fds, n), 1);
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
}

static bool is_open(int fd)
{
	return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}

Test(fdpass, some_takes_fewer_than_asked)
{
	int sp[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	send_n(sp[0], 1);
	int fds[3];
	char b;
	size_t got = 9;
	cr_assert_eq(moat_recv_some_fds(sp[1], &b, 1, fds, 3, &got), 1);
	cr_assert_eq(got, 1);
	cr_assert(is_open(fds[0]), "the one descriptor that came is kept");
	cr_assert(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
	cr_assert_eq(fds[1], -1);
	cr_assert_eq(fds[2], -1);
	close(fds[0]);
	close(sp[0]);
	close(sp[1]);
}

Test(fdpass, some_takes_all_asked_and_refuses_more)
{
	int sp[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	send_n(sp[0], 3);
	int fds[3];
	char b;
	size_t got = 0;
	cr_assert_eq(moat_recv_some_fds(sp[1], &b, 1, fds, 3, &got), 1);
	cr_assert_eq(got, 3);
	for (int i = 0; i < 3; i++) {
		cr_assert(is_open(fds[i]));
		close(fds[i]);
	}
	send_n(sp[0], 4);
	cr_assert_eq(moat_recv_some_fds(sp[1], &b, 1, fds, 3, &got), 1);
	cr_assert_eq(got, 0);
	cr_assert_eq(fds[0], -1, "more than asked: none taken (and those closed)");
	close(sp[0]);
	close(sp[1]);
}

Test(fdpass, exact_wants_exactly_n)
{
	int sp[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	send_n(sp[0], 1);
	int fds[2];
	char b;
	cr_assert_eq(moat_recv_fds(sp[1], &b, 1, fds, 2), 1);
	cr_assert_eq(fds[0], -1);
	cr_assert_eq(fds[1], -1);
	send_n(sp[0], 2);
	cr_assert_eq(moat_recv_fds(sp[1], &b, 1, fds, 2), 1);
	cr_assert(is_open(fds[0]) && is_open(fds[1]));
	close(fds[0]);
	close(fds[1]);
	close(sp[0]);
	close(sp[1]);
}
