/* Scope-bound cleanup helpers (bubblewrap/crun style). Ownership is moved
 * out explicitly with steal_fd()/steal_ptr(). Close helpers keep errno. */
#ifndef MOAT_CLEANUP_H
#define MOAT_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void moat_freep(void *p)
{
	free(*(void **)p);
}
static inline void moat_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
static inline void moat_fclosep(FILE **f)
{
	if (*f) {
		int saved = errno;
		fclose(*f);
		errno = saved;
	}
}

#define _cleanup_free_ __attribute__((cleanup(moat_freep)))
#define _cleanup_close_ __attribute__((cleanup(moat_closep)))
#define _cleanup_fclose_ __attribute__((cleanup(moat_fclosep)))

static inline int steal_fd(int *fd)
{
	int r = *fd;
	*fd = -1;
	return r;
}
static inline void *steal_ptr(void *pp)
{
	void **p = pp;
	void *r = *p;
	*p = NULL;
	return r;
}

#endif
