/* The client's side of the attach door (docs/API.md, "Attach"): one
 * WebSocket to a process of a sandbox, the handshake written by hand over
 * libcurl's connection (CURLOPT_CONNECT_ONLY: any libcurl, http or https),
 * the local terminal in raw mode for a tty process, its size sent at the
 * start and on SIGWINCH, detach keys. Used by moat exec -i/-t and moat
 * attach. */
#ifndef MOAT_CLIENT_ATTACH_H
#define MOAT_CLIENT_ATTACH_H

#include "http.h"

#include <stdbool.h>
#include <stddef.h>

#define ATTACH_DEFAULT_KEYS "ctrl-p,ctrl-q"
#define ATTACH_MAX_KEYS 8

struct attach_opts {
	bool send_stdin;     /* forward stdin (a terminal, or a pipe then EOF) */
	bool raw;            /* the caller put stdin's terminal in raw mode already */
	unsigned char keys[ATTACH_MAX_KEYS]; /* the detach sequence (nkeys 0: none) */
	size_t nkeys;
};

/* Parse a --detach-keys value ("ctrl-p,ctrl-q", "ctrl-a,d"; "" for none)
 * into o; -1 with e naming the bad key. */
int attach_parse_keys(struct attach_opts *o, const char *spec, struct moat_err *e);

/* Attach to process pid of sandbox id until it ends (returns its exit
 * status), the user detaches (0), or it fails (CLIENT_FAIL, said on
 * stderr as "moat CMD: ..."). The terminal is restored on every path. */
int attach_run(const char *cmd, struct moat_http *h, const char *id, long long pid,
	       const struct attach_opts *o);

#endif
