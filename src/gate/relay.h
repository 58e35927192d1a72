/* The gateway's byte pump between a sandbox's connection and its upstream
 * once a destination is allowed: splice(2) through a pipe each way (no
 * copy through user space, 1 MiB at a time), back-pressure by the pipe's
 * size, half-closes passed on (a client's shutdown reaches the server and
 * the reply still comes back), an idle timeout, and byte counting with a
 * limit. Internal to src/gate/. */
#ifndef MOAT_GATE_RELAY_H
#define MOAT_GATE_RELAY_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

struct gate_relay;

struct gate_relay_cb {
	/* n more bytes went from a to b (a_to_b) or back; false stops the relay
	 * (a byte limit). */
	bool (*count)(void *arg, bool a_to_b, size_t n);
	/* Before the first byte from a goes to b: look at what a sent so far
	 * (not consumed). Return 1 to go on, 0 to wait for more, -1 to stop.
	 * NULL = no look. */
	int (*first)(void *arg, const void *buf, size_t len);
	/* The relay ended (both ways closed, an error, the idle timeout, a
	 * limit, or `first` said no); the sockets are closed already. */
	void (*done)(void *arg, const char *why);
	void *arg;
};

/* a, b: connected non-blocking sockets, taken over. to_b / to_a: bytes to
 * deliver before the relayed stream (a queued reply, early data). */
struct gate_relay *gate_relay_new(struct event_base *base, int a, int b, const void *to_b,
				  size_t to_b_len, const void *to_a, size_t to_a_len,
				  unsigned idle_s, const struct gate_relay_cb *cb);
void gate_relay_free(struct gate_relay *r);

#endif
