/* moat error objects: errno + a message that names the culprit, with outer
 * context prepended as the error travels up (crun-style). Fixed size so it
 * can be filled in a forked child without allocating. */
#ifndef MOAT_ERR_H
#define MOAT_ERR_H

#include <stddef.h>

#define MOAT_ERR_MSG 1024

/* Exit-code class of an error, so front-ends can map it (125/126/127). */
enum moat_err_kind {
	MOAT_E_NONE = 0,
	MOAT_E_USAGE,    /* bad option / bad policy: 125 */
	MOAT_E_SYSTEM,   /* a kernel feature or system call failed: 125 */
	MOAT_E_NOEXEC,   /* command found but not executable: 126 */
	MOAT_E_NOTFOUND, /* command not found: 127 */
};

struct moat_err {
	enum moat_err_kind kind;
	int errnum;             /* 0 when not an errno error */
	char msg[MOAT_ERR_MSG]; /* one line, no trailing newline */
};

/* Set *e (when e != NULL). Always returns -1 so callers can
 * `return moat_err_set(...)`. When errnum != 0, ": strerror" is appended. */
int moat_err_set(struct moat_err *e, enum moat_err_kind kind, int errnum,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Prepend "context: " to an existing message. Returns -1. */
int moat_err_prefix(struct moat_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Process exit status a front-end should use for this error. */
int moat_err_exit_code(const struct moat_err *e);

#endif
