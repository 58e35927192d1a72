/* The sandbox's way out when its network is an allowlist: inside its own
 * network namespace (loopback only) the child brings `lo` up and opens
 * two listening sockets, 127.0.0.1:3128 (HTTP proxy) and 127.0.0.1:1080
 * (SOCKS5), and hands them to the host over a socketpair. The host's
 * gateway accepts on them directly: a connection from inside arrives in
 * the gateway without any relay, and there is no other route out, so a
 * program that ignores the proxy variables simply cannot connect.
 * Landlock then allows TCP connect to exactly these two ports.
 *
 * Every sandbox with its own network (gateway or not) also gets a
 * resolver: the child binds UDP and TCP 127.0.0.1:53 and hands both to
 * the host, which answers every query with a refusal and records the
 * name (src/base/dnsd.h); /etc/resolv.conf inside says so. A lookup
 * fails at once, and moat can say which names were tried. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/fdpass.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int jail_net_prepare(struct jail_ctx *c, struct moat_err *e)
{
	c->gate_sp[0] = c->gate_sp[1] = -1;
	c->gate_fds[0] = c->gate_fds[1] = -1;
	c->dns_fds[0] = c->dns_fds[1] = -1;
	c->control_fd = c->control_child = -1;
	/* the control listener lives in the sandbox's own network: with the
	 * host's, it would be reachable by anything on the machine */
	if (c->p->control && c->p->net != MOAT_NET_NONE)
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "a control listener needs the sandbox's own network "
				    "(not the host's)");
	if (c->p->net != MOAT_NET_NONE)
		return 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, c->gate_sp) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "gateway socketpair");
	return 0;
}

static int listener(int type, uint16_t port, struct moat_err *e)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "socket for 127.0.0.1:%u", port);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1;
	/* TCP only: on UDP it would let a second socket share the port */
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 128) < 0)) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "%s listener 127.0.0.1:%u",
			     type == SOCK_STREAM ? "TCP" : "UDP", port);
		close(fd);
		return -1;
	}
	return fd;
}

/* Two listeners in fds (neither left open on failure). */
static int listener_pair(int type0, uint16_t port0, int type1, uint16_t port1, int fds[2],
			 struct moat_err *e)
{
	if ((fds[0] = listener(type0, port0, e)) < 0)
		return -1;
	if ((fds[1] = listener(type1, port1, e)) < 0) {
		close(fds[0]);
		return -1;
	}
	return 0;
}

static int send_fds(int sock, char tag, int *fds, size_t n, struct moat_err *e)
{
	struct iovec iov = {.iov_base = &tag, .iov_len = 1};
	if (moat_send_fds(sock, &iov, 1, fds, n) != 1) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "hand the %s sockets over",
				    tag == 'g' ? "gateway" : tag == 'c' ? "control" : "resolver");
	}
	return 0;
}

static int send_pair(int sock, char tag, int fds[2], struct moat_err *e)
{
	return send_fds(sock, tag, fds, 2, e);
}

/* n descriptors tagged tag (each one there, or none kept). */
static int recv_fds(int sock, char tag, int *fds, size_t n, const char *what,
		    struct moat_err *e)
{
	char byte = 0;
	ssize_t got;
	for (size_t i = 0; i < n; i++)
		fds[i] = -1;
	while ((got = moat_recv_fds(sock, &byte, 1, fds, n)) < 0 && errno == EINTR)
		;
	bool all = got == 1 && byte == tag;
	for (size_t i = 0; i < n; i++)
		all = all && fds[i] >= 0;
	if (!all) {
		int err = got < 0 ? errno : EPROTO;
		for (size_t i = 0; i < n; i++)
			if (fds[i] >= 0) {
				close(fds[i]);
				fds[i] = -1;
			}
		return moat_err_set(e, MOAT_E_SYSTEM, err, "receive the %s sockets", what);
	}
	return 0;
}

static int recv_pair(int sock, int fds[2], const char *what, struct moat_err *e)
{
	return recv_fds(sock, what[0] == 'g' ? 'g' : 'd', fds, 2, what, e);
}

int jail_net_child(struct jail_ctx *c, int fds_out[2], struct moat_err *e)
{
	fds_out[0] = fds_out[1] = -1;
	if (c->p->net != MOAT_NET_NONE)
		return 0;
	close(c->gate_sp[0]);
	/* a new network namespace starts with lo down */
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		if (s >= 0)
			close(s);
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "loopback interface");
	}
	ifr.ifr_flags |= IFF_UP;
	int rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	close(s);
	if (rc < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "bring up loopback");
	int fds[2];
	if (c->p->gateway) {
		if (listener_pair(SOCK_STREAM, MOAT_GATE_HTTP_PORT, SOCK_STREAM,
				  MOAT_GATE_SOCKS_PORT, fds, e) < 0 ||
		    send_pair(c->gate_sp[1], 'g', fds, e) < 0)
			return -1;
		fds_out[0] = fds[0];
		fds_out[1] = fds[1];
	}
	if (c->p->control) {
		int cfd = listener(SOCK_STREAM, MOAT_CONTROL_PORT, e);
		if (cfd < 0 || send_fds(c->gate_sp[1], 'c', &cfd, 1, e) < 0)
			return -1;
		c->control_child = cfd;
	}
	/* the resolver's: the host's alone (an agent does not keep them) */
	int dns[2];
	if (listener_pair(SOCK_DGRAM, MOAT_DNS_PORT, SOCK_STREAM, MOAT_DNS_PORT, dns, e) < 0 ||
	    send_pair(c->gate_sp[1], 'd', dns, e) < 0)
		return -1;
	close(dns[0]);
	close(dns[1]);
	close(c->gate_sp[1]);
	return 0;
}

int jail_net_parent(struct jail_ctx *c, struct moat_err *e)
{
	if (c->p->net != MOAT_NET_NONE)
		return 0;
	close(c->gate_sp[1]);
	c->gate_sp[1] = -1;
	if (c->p->gateway && recv_pair(c->gate_sp[0], c->gate_fds, "gateway", e) < 0)
		return -1;
	if (c->p->control && recv_fds(c->gate_sp[0], 'c', &c->control_fd, 1, "control", e) < 0)
		return -1;
	if (recv_pair(c->gate_sp[0], c->dns_fds, "resolver", e) < 0)
		return -1;
	close(c->gate_sp[0]);
	c->gate_sp[0] = -1;
	return 0;
}

/* shown at /etc/resolv.conf by the mount plan (a MOP_GEN_FILE, mount.c) */
const char jail_net_resolv_conf[] =
	"# moat: this sandbox has no network; its resolver refuses every name\n"
	"# (the names tried are reported when the command ends)\n"
	"nameserver 127.0.0.1\n";
