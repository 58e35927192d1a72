/* Pause and resume (life.h): box.c freezes (or, for a release, stops)
 * and records; this maps its errors onto the core's. */
#define _GNU_SOURCE
#include "life.h"

#include "box.h"
#include "jfield.h"

#include <errno.h>
#include <string.h>

static int mapped(struct core_err *e, struct moat_err *me)
{
	/* the errno classifies (box.h); its text is not the message's */
	const char *tail = strerror(me->errnum);
	size_t n = strlen(me->msg), k = strlen(tail);
	if (me->errnum && n > k + 2 && !strcmp(me->msg + n - k, tail) &&
	    !strncmp(me->msg + n - k - 2, ": ", 2))
		me->msg[n - k - 2] = '\0';
	if (me->errnum == EALREADY || me->errnum == EINVAL)
		cerr(e, 409, "conflict", "%s", me->msg);
	else if (me->errnum == ENOTSUP)
		cerr(e, 422, "pause_unavailable", "%s", me->msg);
	else
		cerr(e, 500, "internal", "%s", me->msg);
	return -1;
}

int core_pause(struct box *b, bool release, struct core_err *e)
{
	struct moat_err me = {0};
	/* release: no freezer needed (nothing runs to be frozen); the
	 * hibernated state is its fs/ itself (box_hibernate), not a row of
	 * GET /v1/snapshots: no copy to make, none to clean up */
	if (release)
		return box_hibernate(b, &me) < 0 ? mapped(e, &me) : 0;
	return box_pause(b, &me) < 0 ? mapped(e, &me) : 0;
}

int core_resume(struct box *b, struct core_err *e)
{
	struct moat_err me = {0};
	bool restart = box_hibernated(b);
	if (box_resume(b, &me) == 0)
		return 0;
	if (restart) {
		/* a start that failed (its errno is the engine's, not a state
		 * conflict): it stays hibernated */
		cerr(e, 500, "internal", "%s (it stays hibernated)", me.msg);
		return -1;
	}
	return mapped(e, &me);
}
