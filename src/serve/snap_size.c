/* A snapshot's size off the request path: see snap_size.h. */
#define _GNU_SOURCE
#include "snap_size.h"

#include "store.h"
#include "../base/fsclone.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QCAP 256

struct measured {
	char id[32];
	int64_t size; /* -1: the walk failed (errno in err) */
	int err;
};

static int fds[2] = {-1, -1}; /* worker -> loop; one struct per write (< PIPE_BUF: atomic) */
static struct event *ev;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static char q[QCAP][32];
static unsigned qhead, qlen;
static bool started;
/* MOAT_TEST_SIZE_GATE=<path>: the worker waits until path exists (tests
 * hold a measurement to see that the answer did not wait for it) */
static const char *gate;

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		struct measured m = {0};
		pthread_mutex_lock(&mu);
		while (qlen == 0)
			pthread_cond_wait(&cv, &mu);
		memcpy(m.id, q[qhead], sizeof m.id);
		qhead = (qhead + 1) % QCAP;
		qlen--;
		pthread_mutex_unlock(&mu);
		while (gate && access(gate, F_OK) < 0)
			nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
		char p[64];
		snprintf(p, sizeof p, "snapshots/%s/fs", m.id);
		m.size = moat_fsclone_size(AT_FDCWD, p);
		m.err = m.size < 0 ? errno : 0;
		/* blocking write: the loop drains it; a full pipe only slows us */
		while (write(fds[1], &m, sizeof m) < 0 && errno == EINTR)
			;
	}
	return NULL;
}

static void on_measured(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	(void)arg;
	struct measured m;
	ssize_t n;
	while ((n = read(fd, &m, sizeof m)) == (ssize_t)sizeof m) {
		m.id[sizeof m.id - 1] = '\0';
		sqlite3_stmt *st = NULL;
		int rc = sqlite3_prepare_v2(store_db(),
					    "UPDATE snapshots SET size = ?2 WHERE id = ?1 AND size IS NULL",
					    -1, &st, NULL);
		if (rc == SQLITE_OK) {
			sqlite3_bind_text(st, 1, m.id, -1, SQLITE_STATIC);
			if (m.size >= 0)
				sqlite3_bind_int64(st, 2, m.size);
			else
				sqlite3_bind_null(st, 2);
			rc = sqlite3_step(st);
		}
		sqlite3_finalize(st);
		bool row = rc == SQLITE_DONE && sqlite3_changes(store_db()) > 0;
		/* a snapshot deleted while it was walked: no row, nothing to say */
		if (m.size < 0 && (row || m.err != ENOENT))
			fprintf(stderr, "moat serve: size of snapshot %s: %s (measured again at the "
				"next start)\n", m.id, strerror(m.err));
		else if (rc != SQLITE_DONE)
			fprintf(stderr, "moat serve: size of snapshot %s: %s\n", m.id,
				sqlite3_errmsg(store_db()));
	}
}

int snap_size_init(struct event_base *base, struct moat_err *e)
{
	gate = getenv("MOAT_TEST_SIZE_GATE");
	if (pipe2(fds, O_CLOEXEC) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "snapshot sizes: pipe");
	int fl = fcntl(fds[0], F_GETFL);
	if (fl < 0 || fcntl(fds[0], F_SETFL, fl | O_NONBLOCK) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "snapshot sizes: pipe");
	ev = event_new(base, fds[0], EV_READ | EV_PERSIST, on_measured, NULL);
	if (!ev || event_add(ev, NULL) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "snapshot sizes: cannot watch the worker");
	return 0;
}

bool snap_size_later(const char *id)
{
	if (!ev || strlen(id) >= sizeof q[0])
		return false;
	bool ok = false;
	pthread_mutex_lock(&mu);
	if (!started) {
		pthread_t t;
		pthread_attr_t a;
		if (pthread_attr_init(&a) == 0) {
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			started = pthread_create(&t, &a, worker, NULL) == 0;
			pthread_attr_destroy(&a);
		}
	}
	if (started && qlen < QCAP) {
		snprintf(q[(qhead + qlen) % QCAP], sizeof q[0], "%s", id);
		qlen++;
		pthread_cond_signal(&cv);
		ok = true;
	}
	pthread_mutex_unlock(&mu);
	return ok;
}
