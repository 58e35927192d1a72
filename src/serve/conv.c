/* The control plane's record of model calls: see conv.h. Three tables of
 * the daemon's database (store_db()):
 *   conv_turns     one row per stored turn of conversation mode: its
 *                  turn_id (unique in its session, when given), the answer
 *                  as the agent was sent it (a retry gets it again), the
 *                  answer's messages and usage;
 *   conv_messages  the conversation, message by message (seq orders them
 *                  in their session), each naming its turn;
 *   conv_calls     every pass-through call, request and answer bounded.
 * A turn's rows are written in one transaction, so a conversation never
 * holds half a turn. */
#define _GNU_SOURCE
#include "conv.h"

#include "jfield.h"
#include "store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What a pass-through record keeps of a request and of an answer (the
 * full lengths are kept beside them). */
#define RECORD_MAX ((size_t)1 << 20)

static const char *dialect_name(enum llm_dialect d)
{
	switch (d) {
	case LLM_CHAT:
		return "chat";
	case LLM_RESPONSES:
		return "responses";
	case LLM_MESSAGES:
		return "messages";
	}
	return "?";
}

static int sql(const char *q)
{
	char *msg = NULL;
	int rc = sqlite3_exec(store_db(), q, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		fprintf(stderr, "moat serve: conversations: %s: %s\n", q, msg ? msg : "?");
	sqlite3_free(msg);
	return rc == SQLITE_OK ? 0 : -1;
}

static sqlite3_stmt *prep(const char *q)
{
	sqlite3_stmt *st = NULL;
	if (!store_db() || sqlite3_prepare_v2(store_db(), q, -1, &st, NULL) != SQLITE_OK) {
		sqlite3_finalize(st);
		return NULL;
	}
	return st;
}

static void stmt_free(sqlite3_stmt **st)
{
	sqlite3_finalize(*st);
}
#define _cleanup_stmt_ __attribute__((cleanup(stmt_free)))

int conv_init(struct moat_err *e)
{
	if (sql("CREATE TABLE IF NOT EXISTS conv_turns (id INTEGER PRIMARY KEY,"
		" session_id TEXT NOT NULL, turn_id TEXT, created_at INTEGER NOT NULL,"
		" route TEXT NOT NULL, dialect TEXT NOT NULL, answer BLOB NOT NULL,"
		" msgs TEXT NOT NULL, tokens_in INTEGER NOT NULL, tokens_out INTEGER NOT NULL,"
		" UNIQUE (session_id, turn_id));"
		"CREATE TABLE IF NOT EXISTS conv_messages (session_id TEXT NOT NULL,"
		" seq INTEGER NOT NULL, turn INTEGER NOT NULL, turn_id TEXT, role TEXT NOT NULL,"
		" msg TEXT NOT NULL, PRIMARY KEY (session_id, seq));"
		"CREATE TABLE IF NOT EXISTS conv_calls (id INTEGER PRIMARY KEY,"
		" session_id TEXT NOT NULL, at INTEGER NOT NULL, route TEXT NOT NULL,"
		" dialect TEXT NOT NULL, request TEXT NOT NULL, request_len INTEGER NOT NULL,"
		" status INTEGER NOT NULL, answer BLOB NOT NULL, answer_len INTEGER NOT NULL,"
		" complete INTEGER NOT NULL, tokens_in INTEGER NOT NULL,"
		" tokens_out INTEGER NOT NULL);"
		"CREATE INDEX IF NOT EXISTS conv_calls_session ON conv_calls(session_id);") < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "conversation tables: %s",
				    store_db() ? sqlite3_errmsg(store_db()) : "no database");
	return 0;
}

json_t *conv_history(const char *session_id)
{
	json_t *a = json_array();
	_cleanup_stmt_ sqlite3_stmt *st =
		prep("SELECT msg FROM conv_messages WHERE session_id = ?1 ORDER BY seq");
	if (!a || !st || sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC) != SQLITE_OK)
		return a;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *m = (const char *)sqlite3_column_text(st, 0);
		json_t *j = m ? json_loads(m, 0, NULL) : NULL;
		if (j && json_array_append_new(a, j) < 0)
			break;
		/* a row that no longer parses was written by no one here:
		 * skipped rather than sent up as something else */
	}
	return a;
}

json_t *conv_turn_find(const char *session_id, const char *turn_id)
{
	if (!session_id || !turn_id)
		return NULL;
	_cleanup_stmt_ sqlite3_stmt *st =
		prep("SELECT answer, msgs FROM conv_turns WHERE session_id = ?1 AND turn_id = ?2");
	if (!st || sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(st, 2, turn_id, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW)
		return NULL;
	const char *ans = sqlite3_column_blob(st, 0);
	size_t alen = (size_t)sqlite3_column_bytes(st, 0);
	const char *m = (const char *)sqlite3_column_text(st, 1);
	json_t *msgs = m ? json_loads(m, 0, NULL) : NULL;
	/* the answer is the upstream's JSON or SSE text: UTF-8 */
	return json_pack("{s:o,s:o}", "answer", jf_text(ans, alen), "msgs",
			 msgs ? msgs : json_array());
}

static int64_t seq_next(const char *session_id)
{
	_cleanup_stmt_ sqlite3_stmt *st =
		prep("SELECT COALESCE(MAX(seq), 0) FROM conv_messages WHERE session_id = ?1");
	if (!st || sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW)
		return -1;
	return sqlite3_column_int64(st, 0) + 1;
}

/* A message's role for the table: chat and messages have "role";
 * Responses items have a "type" (function_call ...) and maybe a role. */
static const char *role_of(const json_t *m)
{
	const char *r = json_string_value(json_object_get(m, "role"));
	if (!r)
		r = json_string_value(json_object_get(m, "type"));
	return r ? r : "?";
}

static int put_msgs(const char *session_id, int64_t turn, const char *turn_id,
		    const json_t *msgs, int64_t *seq, struct moat_err *e)
{
	_cleanup_stmt_ sqlite3_stmt *st =
		prep("INSERT INTO conv_messages (session_id, seq, turn, turn_id, role, msg)"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
	if (!st)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "conversation store: %s",
				    sqlite3_errmsg(store_db()));
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m)
	{
		if (!json_is_object(m))
			return moat_err_set(e, MOAT_E_USAGE, 0, "message %zu is not an object", i);
		char *s = json_dumps(m, JSON_COMPACT);
		if (!s)
			return moat_err_set(e, MOAT_E_SYSTEM, 0, "message %zu does not dump", i);
		sqlite3_reset(st);
		int rc = sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC) != SQLITE_OK ||
				 sqlite3_bind_int64(st, 2, (*seq)++) != SQLITE_OK ||
				 sqlite3_bind_int64(st, 3, turn) != SQLITE_OK ||
				 (turn_id ? sqlite3_bind_text(st, 4, turn_id, -1, SQLITE_STATIC)
					  : sqlite3_bind_null(st, 4)) != SQLITE_OK ||
				 sqlite3_bind_text(st, 5, role_of(m), -1, SQLITE_TRANSIENT) != SQLITE_OK ||
				 sqlite3_bind_text(st, 6, s, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
				 sqlite3_step(st) != SQLITE_DONE
			 ? -1
			 : 0;
		free(s);
		if (rc < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, 0, "conversation store: %s",
					    sqlite3_errmsg(store_db()));
	}
	return 0;
}

static int turn_rows(const char *session_id, const char *turn_id, const char *route,
		     enum llm_dialect d, const json_t *new_msgs, const json_t *answer_msgs,
		     const char *answer, size_t answer_len, const struct llm_usage *u,
		     struct moat_err *e)
{
	char *ms = json_dumps(answer_msgs, JSON_COMPACT);
	if (!ms)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "the answer's messages do not dump");
	_cleanup_stmt_ sqlite3_stmt *st =
		prep("INSERT INTO conv_turns (session_id, turn_id, created_at, route, dialect,"
		     " answer, msgs, tokens_in, tokens_out) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
	int rc = !st || sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC) != SQLITE_OK ||
			 (turn_id ? sqlite3_bind_text(st, 2, turn_id, -1, SQLITE_STATIC)
				  : sqlite3_bind_null(st, 2)) != SQLITE_OK ||
			 sqlite3_bind_int64(st, 3, (int64_t)time(NULL)) != SQLITE_OK ||
			 sqlite3_bind_text(st, 4, route ? route : "", -1, SQLITE_STATIC) != SQLITE_OK ||
			 sqlite3_bind_text(st, 5, dialect_name(d), -1, SQLITE_STATIC) != SQLITE_OK ||
			 sqlite3_bind_blob64(st, 6, answer ? answer : "", answer ? answer_len : 0,
					     SQLITE_STATIC) != SQLITE_OK ||
			 sqlite3_bind_text(st, 7, ms, -1, SQLITE_STATIC) != SQLITE_OK ||
			 sqlite3_bind_int64(st, 8, u ? u->in : -1) != SQLITE_OK ||
			 sqlite3_bind_int64(st, 9, u ? u->out : -1) != SQLITE_OK
		 ? -1
		 : 0;
	if (rc == 0) {
		int s = sqlite3_step(st);
		if (s == SQLITE_CONSTRAINT)
			rc = moat_err_set(e, MOAT_E_USAGE, 0, "turn %s is already stored", turn_id);
		else if (s != SQLITE_DONE)
			rc = -1;
	}
	free(ms);
	if (rc < 0)
		return e && e->msg[0] ? -1
				      : moat_err_set(e, MOAT_E_SYSTEM, 0, "conversation store: %s",
						     sqlite3_errmsg(store_db()));
	int64_t turn = sqlite3_last_insert_rowid(store_db());
	int64_t seq = seq_next(session_id);
	if (seq < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "conversation store: %s",
				    sqlite3_errmsg(store_db()));
	if (put_msgs(session_id, turn, turn_id, new_msgs, &seq, e) < 0 ||
	    put_msgs(session_id, turn, turn_id, answer_msgs, &seq, e) < 0)
		return -1;
	return 0;
}

int conv_turn_add(const char *session_id, const char *turn_id, const char *route,
		  enum llm_dialect d, const json_t *new_msgs, const json_t *answer_msgs,
		  const char *answer, size_t answer_len, const struct llm_usage *u,
		  struct moat_err *e)
{
	if (e)
		e->msg[0] = '\0';
	if (!session_id || !json_is_array(new_msgs) || !json_is_array(answer_msgs))
		return moat_err_set(e, MOAT_E_USAGE, 0, "a turn needs its messages and the answer's");
	if (!store_db())
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "no database");
	if (sql("BEGIN IMMEDIATE") < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "conversation store: %s",
				    sqlite3_errmsg(store_db()));
	if (turn_rows(session_id, turn_id, route, d, new_msgs, answer_msgs, answer, answer_len, u,
		      e) < 0 ||
	    sql("COMMIT") < 0) {
		if (e && !e->msg[0])
			moat_err_set(e, MOAT_E_SYSTEM, 0, "conversation store: %s",
				     sqlite3_errmsg(store_db()));
		sql("ROLLBACK"); /* nothing of the turn stays */
		return -1;
	}
	return 0;
}

int conv_record(const char *session_id, const char *route, enum llm_dialect d,
		const char *req, size_t req_len, int status, const char *answer,
		size_t answer_len, bool complete, const struct llm_usage *u,
		struct moat_err *e)
{
	_cleanup_stmt_ sqlite3_stmt *st =
		prep("INSERT INTO conv_calls (session_id, at, route, dialect, request, request_len,"
		     " status, answer, answer_len, complete, tokens_in, tokens_out)"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
	size_t rk = req && req_len > RECORD_MAX ? RECORD_MAX : (req ? req_len : 0);
	size_t ak = answer && answer_len > RECORD_MAX ? RECORD_MAX : (answer ? answer_len : 0);
	/* the request is the client's JSON, kept as text (cut, it is still
	 * the bytes as sent: a bounded prefix) */
	if (!st || sqlite3_bind_text(st, 1, session_id ? session_id : "", -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(st, 2, (int64_t)time(NULL)) ||
	    sqlite3_bind_text(st, 3, route ? route : "", -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(st, 4, dialect_name(d), -1, SQLITE_STATIC) ||
	    sqlite3_bind_text64(st, 5, req ? req : "", rk, SQLITE_STATIC, SQLITE_UTF8) ||
	    sqlite3_bind_int64(st, 6, (int64_t)req_len) || sqlite3_bind_int(st, 7, status) ||
	    sqlite3_bind_blob64(st, 8, answer ? answer : "", ak, SQLITE_STATIC) ||
	    sqlite3_bind_int64(st, 9, (int64_t)answer_len) || sqlite3_bind_int(st, 10, complete) ||
	    sqlite3_bind_int64(st, 11, u ? u->in : -1) || sqlite3_bind_int64(st, 12, u ? u->out : -1) ||
	    sqlite3_step(st) != SQLITE_DONE)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "call record: %s",
				    store_db() ? sqlite3_errmsg(store_db()) : "no database");
	return 0;
}

static int64_t turn_count(const char *session_id)
{
	_cleanup_stmt_ sqlite3_stmt *st = prep("SELECT COUNT(*) FROM conv_turns WHERE session_id = ?1");
	if (!st || sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW)
		return 0;
	return sqlite3_column_int64(st, 0);
}

json_t *conv_json(const char *session_id)
{
	return json_pack("{s:s,s:o,s:I}", "session", session_id ? session_id : "", "messages",
			 conv_history(session_id ? session_id : ""), "turns",
			 (json_int_t)turn_count(session_id ? session_id : ""));
}

void conv_purge(const char *session_id)
{
	static const char *const q[] = {"DELETE FROM conv_messages WHERE session_id = ?1",
					"DELETE FROM conv_turns WHERE session_id = ?1",
					"DELETE FROM conv_calls WHERE session_id = ?1"};
	if (!session_id || sql("BEGIN IMMEDIATE") < 0)
		return;
	int rc = 0;
	for (size_t i = 0; i < sizeof q / sizeof q[0] && rc == 0; i++) {
		_cleanup_stmt_ sqlite3_stmt *st = prep(q[i]);
		if (!st || sqlite3_bind_text(st, 1, session_id, -1, SQLITE_STATIC) != SQLITE_OK ||
		    sqlite3_step(st) != SQLITE_DONE)
			rc = -1;
	}
	if (rc < 0 || sql("COMMIT") < 0)
		sql("ROLLBACK");
}
