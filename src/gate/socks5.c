/* SOCKS5 handshake, server side: see socks5.h. */
#include "gate/socks5.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

enum gate_socks5_status gate_socks5_parse_greeting(const uint8_t *buf,
						   size_t len, size_t *used,
						   uint8_t *method,
						   const char **err)
{
	if (len < 1)
		return GATE_SOCKS5_NEED_MORE;
	if (buf[0] != 5) {
		if (err)
			*err = buf[0] == 4 ? "SOCKS4 is not supported"
					   : "not a SOCKS5 greeting";
		return GATE_SOCKS5_ERROR;
	}
	if (len < 2 || len < 2 + (size_t)buf[1])
		return GATE_SOCKS5_NEED_MORE;
	*method = GATE_SOCKS5_NO_METHOD;
	for (size_t i = 0; i < buf[1]; i++)
		if (buf[2 + i] == GATE_SOCKS5_NOAUTH)
			*method = GATE_SOCKS5_NOAUTH;
	*used = 2 + (size_t)buf[1];
	return GATE_SOCKS5_DONE;
}

static enum gate_socks5_status req_fail(struct gate_socks5_request *req,
					uint8_t rep, const char *msg)
{
	req->rep = rep;
	req->err = msg;
	return GATE_SOCKS5_ERROR;
}

enum gate_socks5_status gate_socks5_parse_request(
	const uint8_t *buf, size_t len, size_t *used,
	struct gate_socks5_request *req)
{
	memset(req, 0, sizeof *req);
	/* Checked in byte order, each as soon as its byte is there. */
	if (len < 1)
		return GATE_SOCKS5_NEED_MORE;
	if (buf[0] != 5)
		return req_fail(req, GATE_SOCKS5_GENERAL_FAILURE,
				"not a SOCKS5 request");
	if (len < 2)
		return GATE_SOCKS5_NEED_MORE;
	if (buf[1] != 1)
		return req_fail(req, GATE_SOCKS5_CMD_UNSUPPORTED,
				buf[1] == 2 ? "BIND is not supported"
				: buf[1] == 3 ? "UDP ASSOCIATE is not supported"
					      : "unknown command");
	if (len < 3)
		return GATE_SOCKS5_NEED_MORE;
	if (buf[2] != 0)
		return req_fail(req, GATE_SOCKS5_GENERAL_FAILURE,
				"reserved byte not zero");
	if (len < 4)
		return GATE_SOCKS5_NEED_MORE;
	size_t alen;
	switch (buf[3]) {
	case 1:
		alen = 4;
		break;
	case 4:
		alen = 16;
		break;
	case 3:
		if (len < 5)
			return GATE_SOCKS5_NEED_MORE;
		if (buf[4] == 0)
			return req_fail(req, GATE_SOCKS5_GENERAL_FAILURE,
					"empty domain name");
		alen = 1 + (size_t)buf[4];
		break;
	default:
		return req_fail(req, GATE_SOCKS5_ATYP_UNSUPPORTED,
				"unknown address type");
	}
	size_t total = 4 + alen + 2;
	if (len < total)
		return GATE_SOCKS5_NEED_MORE;
	const uint8_t *a = buf + 4;
	req->atyp = buf[3];
	if (buf[3] == 1) {
		inet_ntop(AF_INET, a, req->host, sizeof req->host);
	} else if (buf[3] == 4) {
		inet_ntop(AF_INET6, a, req->host, sizeof req->host);
	} else {
		size_t n = a[0];
		if (memchr(a + 1, '\0', n))
			return req_fail(req, GATE_SOCKS5_GENERAL_FAILURE,
					"NUL in domain name");
		memcpy(req->host, a + 1, n);
		req->host[n] = '\0';
	}
	req->port = (uint16_t)((buf[total - 2] << 8) | buf[total - 1]);
	*used = total;
	return GATE_SOCKS5_DONE;
}

size_t gate_socks5_method_reply(uint8_t out[2], uint8_t method)
{
	out[0] = 5;
	out[1] = method;
	return 2;
}

size_t gate_socks5_reply(uint8_t out[GATE_SOCKS5_REPLY_MAX], uint8_t rep,
			 const struct sockaddr *bound)
{
	out[0] = 5;
	out[1] = rep;
	out[2] = 0;
	if (bound && bound->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)bound;
		out[3] = 4;
		memcpy(out + 4, &in6->sin6_addr, 16);
		memcpy(out + 20, &in6->sin6_port, 2); /* both network order */
		return 22;
	}
	out[3] = 1;
	if (bound && bound->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)bound;
		memcpy(out + 4, &in->sin_addr, 4);
		memcpy(out + 8, &in->sin_port, 2);
	} else {
		memset(out + 4, 0, 6);
	}
	return 10;
}
