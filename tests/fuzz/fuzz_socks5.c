/* libFuzzer target: the SOCKS5 greeting and request parsers and the reply
 * encoder. Checks bounds, and that every prefix says NEED_MORE until the
 * answer is decided and the same answer afterwards. */
#include "gate/socks5.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request(const uint8_t *data, size_t size)
{
	struct gate_socks5_request r, p;
	size_t used = 0, pused = 0;
	enum gate_socks5_status st = gate_socks5_parse_request(data, size, &used, &r);
	if (st == GATE_SOCKS5_DONE) {
		if (used > size || used > 262 || used < 8)
			abort();
		size_t hl = strnlen(r.host, sizeof r.host);
		if (hl == 0 || hl >= sizeof r.host)
			abort();
		if (r.atyp != 1 && r.atyp != 3 && r.atyp != 4)
			abort();
	} else if (st == GATE_SOCKS5_ERROR) {
		if (!r.err || r.rep == 0 || r.rep > 8)
			abort();
	}
	bool decided = false;
	for (size_t i = 0; i <= size && i <= 300; i++) {
		enum gate_socks5_status s = gate_socks5_parse_request(data, i, &pused, &p);
		if (decided || s != GATE_SOCKS5_NEED_MORE) {
			decided = true;
			if (s != st)
				abort();
			if (s == GATE_SOCKS5_DONE &&
			    (pused != used || strcmp(p.host, r.host) != 0 || p.port != r.port))
				abort();
			if (s == GATE_SOCKS5_ERROR && p.rep != r.rep)
				abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t used = 0;
	uint8_t method = 0x42;
	const char *err = NULL;
	enum gate_socks5_status st =
		gate_socks5_parse_greeting(data, size, &used, &method, &err);
	if (st == GATE_SOCKS5_DONE) {
		if (used > size || used < 2 ||
		    (method != GATE_SOCKS5_NOAUTH && method != GATE_SOCKS5_NO_METHOD))
			abort();
		request(data + used, size - used);
	} else if (st == GATE_SOCKS5_ERROR && !err) {
		abort();
	}
	request(data, size);

	/* replies with a bound address taken from the input */
	uint8_t out[GATE_SOCKS5_REPLY_MAX];
	struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
	struct sockaddr_in in = {.sin_family = AF_INET};
	if (size >= 18) {
		memcpy(&in6.sin6_addr, data, 16);
		memcpy(&in6.sin6_port, data + 16, 2);
		memcpy(&in.sin_addr, data, 4);
		memcpy(&in.sin_port, data + 4, 2);
		if (gate_socks5_reply(out, data[17], (struct sockaddr *)&in6) != 22 ||
		    memcmp(out + 4, data, 18) != 0)
			abort();
		if (gate_socks5_reply(out, data[17], (struct sockaddr *)&in) != 10 ||
		    memcmp(out + 4, data, 6) != 0)
			abort();
	}
	if (gate_socks5_method_reply(out, size ? data[0] : 0) != 2)
		abort();
	return 0;
}
