/* The host's terminal for an interactive sandbox (moat run on a tty, moat
 * exec -it): raw mode entered once and restored on every exit path, and the
 * window size. One terminal per process, so the saved state is static: a
 * signal handler or atexit can restore it without a pointer. */
#ifndef MOAT_TERM_H
#define MOAT_TERM_H

#include <moat/err.h>

#include <stdbool.h>

/* Put fd's terminal in raw mode (no echo, no line editing, no signals
 * from keys, no output processing: the sandbox's own pty does all that)
 * after saving its state. Also registers an atexit restore. */
int moat_term_raw(int fd, struct moat_err *e);

/* Put the saved state back (idempotent; async-signal-safe: only
 * tcsetattr). No-op when moat_term_raw was not called or failed. */
void moat_term_restore(void);

/* fd's window size; false when fd is not a terminal (or reports 0x0). */
bool moat_term_size(int fd, unsigned short *cols, unsigned short *rows);

/* Set fd's window size (a pty master), best effort. */
void moat_term_set_size(int fd, unsigned short cols, unsigned short rows);

#endif
