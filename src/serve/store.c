/* SQLite store: see store.h. WAL with synchronous=NORMAL: a commit is not
 * an fsync, so creating a sandbox does not wait for the disk; a crash
 * loses at most the last transactions, and the reconciliation at start
 * (pid + start time) tells what really runs. */
#include "store.h"
#include "../base/own.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <unistd.h>

static sqlite3 *db;

/* The database file (made here when missing) and its companions: ours,
 * regular, not symlinks, mode 0600. */
static int private_files(const char *path, struct moat_err *e)
{
	int fd = moat_own_file(AT_FDCWD, path, O_RDWR | O_CREAT, 0600, e);
	if (fd < 0)
		return -1;
	close(fd);
	static const char *const side[] = {"-wal", "-shm", "-journal"};
	for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
		char p[PATH_MAX + 16];
		snprintf(p, sizeof p, "%s%s", path, side[i]);
		if (moat_own_tighten(AT_FDCWD, p, 0600, e) < 0)
			return -1;
	}
	return 0;
}

struct sqlite3 *store_db(void)
{
	return db;
}

int store_open(const char *dir, struct moat_err *e)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/moat.db", dir);
	/* The store holds every sandbox's env values: 0600 whatever the
	 * umask, also a 0644 one an older version left. SQLite gives the
	 * -wal, -shm and -journal files the database file's mode. */
	if (private_files(path, e) < 0)
		return -1;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				       SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW,
			    NULL) != SQLITE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "open %s: %s", path,
			     db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		db = NULL;
		return -1;
	}
	char *msg = NULL;
	if (sqlite3_exec(db,
			 "PRAGMA journal_mode=WAL;"
			 "PRAGMA synchronous=NORMAL;"
			 "PRAGMA busy_timeout=2000;"
			 "CREATE TABLE IF NOT EXISTS sandboxes ("
			 " id TEXT PRIMARY KEY, created_at INTEGER NOT NULL,"
			 " spec TEXT NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL,"
			 " cgroups TEXT NOT NULL, state TEXT NOT NULL);",
			 NULL, NULL, &msg) != SQLITE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: %s", path, msg ? msg : "schema");
		sqlite3_free(msg);
		sqlite3_close(db);
		db = NULL;
		return -1;
	}
	/* No second look at the files now: closing any descriptor of them
	 * would drop SQLite's POSIX locks (they are per process and inode),
	 * and another opener (sqlite3 on the host) would then take the WAL
	 * index for unused, reset it, and our mapping of it dies with
	 * SIGBUS. SQLite made -wal and -shm with moat.db's 0600. */
	return 0;
}

void store_close(void)
{
	sqlite3_close(db);
	db = NULL;
}

int store_put(const struct store_row *r, struct moat_err *e)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db,
				    "INSERT OR REPLACE INTO sandboxes VALUES (?,?,?,?,?,?,?)", -1,
				    &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, r->created_at);
		sqlite3_bind_text(st, 3, r->spec, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, r->pid);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)r->pid_start);
		sqlite3_bind_text(st, 6, r->cgroups, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 7, r->state, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "store: %s", sqlite3_errmsg(db));
	return 0;
}

static int exec1(const char *sql, const char *a, const char *b)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
		if (b)
			sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int store_set_state(const char *id, const char *state)
{
	return exec1("UPDATE sandboxes SET state = ?1 WHERE id = ?2", state, id);
}

int store_del(const char *id)
{
	return exec1("DELETE FROM sandboxes WHERE id = ?1", id, NULL);
}

int store_load(void (*fn)(void *arg, const struct store_row *r), void *arg)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
			       "SELECT id, created_at, spec, pid, pid_start, cgroups, state "
			       "FROM sandboxes ORDER BY created_at",
			       -1, &st, NULL) != SQLITE_OK)
		return -1;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_row r = {
			.id = (const char *)sqlite3_column_text(st, 0),
			.created_at = sqlite3_column_int64(st, 1),
			.spec = (const char *)sqlite3_column_text(st, 2),
			.pid = (pid_t)sqlite3_column_int64(st, 3),
			.pid_start = (uint64_t)sqlite3_column_int64(st, 4),
			.cgroups = (const char *)sqlite3_column_text(st, 5),
			.state = (const char *)sqlite3_column_text(st, 6),
		};
		/* a row with a NULL field too: fn reports it (and keeps its
		 * sandbox's directory), never skipped silently */
		fn(arg, &r);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}
