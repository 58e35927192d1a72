/* Error objects: see include/moat/err.h. */
#include <moat/err.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int moat_err_set(struct moat_err *e, enum moat_err_kind kind, int errnum,
		 const char *fmt, ...)
{
	if (!e)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		e->msg[0] = '\0';
	if (errnum) {
		size_t len = strlen(e->msg);
		snprintf(e->msg + len, sizeof e->msg - len, ": %s",
			 strerror(errnum));
	}
	e->kind = kind;
	e->errnum = errnum;
	return -1;
}

int moat_err_prefix(struct moat_err *e, const char *fmt, ...)
{
	if (!e)
		return -1;
	char ctx[MOAT_ERR_MSG];
	char old[MOAT_ERR_MSG];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(ctx, sizeof ctx, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	memcpy(old, e->msg, sizeof old);
	size_t cl = strlen(ctx);
	if (cl > sizeof e->msg - 3)
		cl = sizeof e->msg - 3;
	memcpy(e->msg, ctx, cl);
	memcpy(e->msg + cl, ": ", 2);
	size_t room = sizeof e->msg - cl - 3;
	size_t ol = strnlen(old, room);
	memcpy(e->msg + cl + 2, old, ol);
	e->msg[cl + 2 + ol] = '\0';
	return -1;
}

int moat_err_exit_code(const struct moat_err *e)
{
	switch (e->kind) {
	case MOAT_E_NOEXEC:
		return 126;
	case MOAT_E_NOTFOUND:
		return 127;
	case MOAT_E_NONE:
	case MOAT_E_USAGE:
	case MOAT_E_SYSTEM:
		break;
	}
	return 125;
}
