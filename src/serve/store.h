/* The daemon's state on disk: one SQLite database (<data>/moat.db, WAL)
 * with a row per sandbox, so a restarted daemon knows every sandbox it
 * had. Process state lives in each sandbox's agent, not here. */
#ifndef MOAT_SERVE_STORE_H
#define MOAT_SERVE_STORE_H

#include <moat/err.h>

#include <stdint.h>
#include <sys/types.h>

struct store_row {
	const char *id;
	int64_t created_at; /* unix seconds */
	const char *spec;   /* JSON: the sandbox's settings */
	pid_t pid;          /* host pid of its pid 1 */
	uint64_t pid_start; /* its start time (/proc/PID/stat field 22) */
	const char *cgroups; /* JSON array of cgroup directories */
	const char *state;
};

int store_open(const char *dir, struct moat_err *e);
void store_close(void);
int store_put(const struct store_row *r, struct moat_err *e);
int store_set_state(const char *id, const char *state);
int store_del(const char *id);
/* The open database, for modules that keep tables of their own (images,
 * snapshots): each creates its tables (IF NOT EXISTS) in its init. */
struct sqlite3;
struct sqlite3 *store_db(void);
/* Call fn for each row (strings valid during the call only). */
int store_load(void (*fn)(void *arg, const struct store_row *r), void *arg);

#endif
