/* Front-end commands. Each returns the process exit status. */
#ifndef MOAT_CLI_H
#define MOAT_CLI_H

int moat_cmd_run(int argc, char **argv);
int moat_cmd_doctor(int argc, char **argv);
/* token.c: moat token [--write FILE] */
int moat_cmd_token(int argc, char **argv);

/* gate.c: moat run's egress gateway (a moat-gate process). */
#include <moat/err.h>
#include <moat/policy.h>
struct run_gate;
int run_gate_start(struct moat_policy *p, struct moat_strv *env, const char *net_log,
		   const char *upstream_ca, const struct moat_strv *ceiling,
		   struct run_gate **out, struct moat_err *e);
/* Hand over the sandbox's listening sockets (closed here). */
int run_gate_attach(struct run_gate *g, int fds[2], struct moat_err *e);
/* Stop it, print each refused destination, clean up. NULL is fine. */
void run_gate_finish(struct run_gate *g);

/* tty.c: moat run on a terminal. The relay between the caller's terminal
 * (in, out; put in raw mode by the caller) and the sandbox's pty master:
 * bytes both ways, the window size on SIGWINCH, a hang-up (SIGHUP, or the
 * caller's terminal gone) passed on by closing the master. Otherwise as
 * moat_jail_wait: 1 ended (*st filled; the master drained), 0 deadline
 * passed, -1 error; the other signals in forward go to the command. */
#include <moat/jail.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
struct run_tty {
	int master; /* owned; -1 once hung up */
	int in, out;
	bool in_done, out_done;
	int64_t out_retry_ms; /* no slave open: the master is looked at again
			       * then (the sandbox may reopen its terminal) */
	size_t ilen, ioff;
	char ibuf[4096]; /* caller -> master, not yet written */
};
int run_tty_wait(struct run_tty *t, struct moat_jail *j, int64_t deadline_ms,
		 const int *forward, struct moat_jail_status *st, struct moat_err *e);

/* dns.c: the sandbox's resolver, served from a thread (fds taken). */
struct run_dns;
struct run_dns *run_dns_start(int fds[2], struct moat_err *e);
/* Stop it; with p, print the names it refused and the option that would
 * let them through. NULL is fine. */
void run_dns_finish(struct run_dns *r, const struct moat_policy *p);

/* "moat: msg" on stderr; always returns 125 (moat's own errors). */
int moat_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
