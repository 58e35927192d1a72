/* Sessions of the control plane (session.h): the record of each session
 * (in memory and in SQLite's sessions table, every change written before
 * it is reported), its sandboxes and agent process, its token, usage and
 * budget. The HTTP side of /v1/sessions is session_http.c. */
#define _GNU_SOURCE
#include "session_int.h"

#include "artifacts.h"
#include "box.h"
#include "conv.h"
#include "core.h"
#include "cp.h"
#include "jfield.h"
#include "llm.h"
#include "store.h"

#include <errno.h>
#include <event2/event.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define SAMPLE_S 3          /* cpu and memory sampled this often */
#define AUTO_RESTARTS 3     /* sandboxes lost within AUTO_WINDOW_S, then it gives up */
#define AUTO_WINDOW_S 60

struct session **ses_all;
size_t ses_n;
static struct event_base *ev_base;
char *ses_data_dir;
static struct event *sampler;

static void start_agent(struct session *s, struct box *b);
static void restart(struct session *s, const char *why);

/* ---- the table ------------------------------------------------------------------- */

static int db_exec(const char *q, struct moat_err *e)
{
	char *msg = NULL;
	int rc = sqlite3_exec(store_db(), q, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		moat_err_set(e, MOAT_E_SYSTEM, EIO, "sessions table: %s", msg ? msg : "error");
	sqlite3_free(msg);
	return rc == SQLITE_OK ? 0 : -1;
}

int ses_save(struct session *s, struct core_err *e)
{
	static const char q[] =
		"INSERT OR REPLACE INTO sessions (id, state, spec, sandbox_id, token_hash, "
		"created_at, ended_at, ended_reason, restarts, agent_pid, exit_code, tokens_in, "
		"tokens_out, requests, bytes_in, bytes_out, cpu_prev_us, cpu_us, mem_peak_bytes, "
		"budget_exceeded) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,"
		"?17,?18,?19,?20)";
	sqlite3_stmt *st = NULL;
	char *spec = json_dumps(s->spec, JSON_COMPACT);
	int rc = spec ? sqlite3_prepare_v2(store_db(), q, -1, &st, NULL) : SQLITE_NOMEM;
	if (rc == SQLITE_OK) {
		int i = 1;
		sqlite3_bind_text(st, i++, s->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, i++, s->state, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, i++, spec, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, i++, s->sandbox_id, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, i++, s->token_hash, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, i++, s->created_at);
		sqlite3_bind_int64(st, i++, s->ended_at);
		sqlite3_bind_text(st, i++, s->ended_reason, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, i++, s->restarts);
		sqlite3_bind_int64(st, i++, s->pid);
		if (s->has_exit)
			sqlite3_bind_int(st, i++, s->exit_code);
		else
			sqlite3_bind_null(st, i++);
		const int64_t *u[] = {&s->u.tokens_in, &s->u.tokens_out, &s->u.requests,
				      &s->u.bytes_in,  &s->u.bytes_out,  &s->u.cpu_prev_us,
				      &s->u.cpu_us,    &s->u.mem_peak};
		for (size_t k = 0; k < sizeof u / sizeof u[0]; k++)
			sqlite3_bind_int64(st, i++, *u[k]);
		sqlite3_bind_text(st, i++, s->budget_exceeded, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	free(spec);
	if (rc != SQLITE_DONE) {
		cerr(e, 500, "internal", "session %s: cannot store it: %s", s->id,
		     sqlite3_errmsg(store_db()));
		fprintf(stderr, "moat serve: session %s: cannot store it: %s\n", s->id,
			sqlite3_errmsg(store_db()));
		return -1;
	}
	s->stored = true;
	return 0;
}

/* The counters alone (after every model call: the whole row with its
 * spec would cost more than the call's own bookkeeping, docs/benchmarks.md).
 * A session not stored yet gets its whole row. */
int ses_save_usage(struct session *s)
{
	if (!s->stored)
		return ses_save(s, NULL);
	static const char q[] =
		"UPDATE sessions SET tokens_in=?1, tokens_out=?2, requests=?3, bytes_in=?4, "
		"bytes_out=?5, cpu_prev_us=?6, cpu_us=?7, mem_peak_bytes=?8, budget_exceeded=?9 "
		"WHERE id=?10";
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(store_db(), q, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		const int64_t *u[] = {&s->u.tokens_in, &s->u.tokens_out, &s->u.requests,
				      &s->u.bytes_in,  &s->u.bytes_out,  &s->u.cpu_prev_us,
				      &s->u.cpu_us,    &s->u.mem_peak};
		int i = 1;
		for (size_t k = 0; k < sizeof u / sizeof u[0]; k++)
			sqlite3_bind_int64(st, i++, *u[k]);
		sqlite3_bind_text(st, i++, s->budget_exceeded, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, i++, s->id, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		fprintf(stderr, "moat serve: session %s: cannot store its usage: %s\n", s->id,
			sqlite3_errmsg(store_db()));
		return -1;
	}
	return 0;
}

static void ses_unstore(struct session *s)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(store_db(), "DELETE FROM sessions WHERE id = ?1", -1, &st, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_text(st, 1, s->id, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE)
			fprintf(stderr, "moat serve: session %s: cannot remove its row: %s\n", s->id,
				sqlite3_errmsg(store_db()));
	}
	sqlite3_finalize(st);
	s->stored = false;
}

static void copy_col(char *dst, size_t n, sqlite3_stmt *st, int col)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	snprintf(dst, n, "%s", t ? (const char *)t : "");
}

static int ses_add(struct session *s)
{
	struct session **n = realloc(ses_all, (ses_n + 1) * sizeof *n);
	if (!n)
		return -1;
	ses_all = n;
	ses_all[ses_n++] = s;
	return 0;
}

static void ses_free(struct session *s)
{
	if (!s)
		return;
	http_wait_stop(&s->wait);
	json_decref(s->spec);
	OPENSSL_cleanse(s->token, sizeof s->token);
	free(s);
}

static int load(struct moat_err *e)
{
	static const char q[] =
		"SELECT id, state, spec, sandbox_id, token_hash, created_at, ended_at, "
		"ended_reason, restarts, agent_pid, exit_code, tokens_in, tokens_out, requests, "
		"bytes_in, bytes_out, cpu_prev_us, cpu_us, mem_peak_bytes, budget_exceeded "
		"FROM sessions ORDER BY created_at, id";
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(store_db(), q, -1, &st, NULL) != SQLITE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, EIO, "sessions: %s", sqlite3_errmsg(store_db()));
		return -1;
	}
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct session *s = calloc(1, sizeof *s);
		if (!s)
			break;
		copy_col(s->id, sizeof s->id, st, 0);
		copy_col(s->state, sizeof s->state, st, 1);
		const unsigned char *spec = sqlite3_column_text(st, 2);
		s->spec = spec ? json_loads((const char *)spec, 0, NULL) : NULL;
		if (!s->spec) {
			fprintf(stderr, "moat serve: session %s: its stored spec is not JSON: skipped\n",
				s->id);
			free(s);
			continue;
		}
		copy_col(s->sandbox_id, sizeof s->sandbox_id, st, 3);
		copy_col(s->token_hash, sizeof s->token_hash, st, 4);
		s->created_at = sqlite3_column_int64(st, 5);
		s->ended_at = sqlite3_column_int64(st, 6);
		copy_col(s->ended_reason, sizeof s->ended_reason, st, 7);
		s->restarts = sqlite3_column_int64(st, 8);
		s->pid = sqlite3_column_int64(st, 9);
		s->has_exit = sqlite3_column_type(st, 10) != SQLITE_NULL;
		s->exit_code = sqlite3_column_int(st, 10);
		int64_t *u[] = {&s->u.tokens_in, &s->u.tokens_out, &s->u.requests,
				&s->u.bytes_in,  &s->u.bytes_out,  &s->u.cpu_prev_us,
				&s->u.cpu_us,    &s->u.mem_peak};
		for (size_t k = 0; k < sizeof u / sizeof u[0]; k++)
			*u[k] = sqlite3_column_int64(st, 11 + (int)k);
		copy_col(s->budget_exceeded, sizeof s->budget_exceeded, st, 19);
		s->stored = true;
		if (ses_add(s) < 0) {
			ses_free(s);
			break;
		}
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		moat_err_set(e, MOAT_E_SYSTEM, EIO, "sessions: cannot load them: %s",
			     sqlite3_errmsg(store_db()));
		return -1;
	}
	return 0;
}

/* ---- tokens ------------------------------------------------------------------------ */

static int sha256_hex(const char *s, char out[65])
{
	unsigned char md[32];
	unsigned int n = 0;
	if (EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL) != 1 || n != 32)
		return -1;
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static int random_bytes(unsigned char *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom(p + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* A new token for s: the plain one in s->token (until its agent has it),
 * only its hash kept. */
static int new_token(struct session *s)
{
	unsigned char r[32];
	if (random_bytes(r, sizeof r) < 0)
		return -1;
	int o = snprintf(s->token, sizeof s->token, "moat_st_");
	for (size_t i = 0; i < sizeof r; i++)
		o += snprintf(s->token + o, sizeof s->token - (size_t)o, "%02x", r[i]);
	OPENSSL_cleanse(r, sizeof r);
	return sha256_hex(s->token, s->token_hash);
}

bool ses_live(const struct session *s)
{
	return !strcmp(s->state, "starting") || !strcmp(s->state, "running");
}

struct session *session_find(const char *id)
{
	for (size_t i = 0; id && i < ses_n; i++)
		if (!strcmp(ses_all[i]->id, id))
			return ses_all[i];
	return NULL;
}

struct session *session_auth(const struct box *b, const char *token)
{
	if (!b || !token || strncmp(token, "moat_st_", 8) || strlen(token) != 72)
		return NULL;
	char h[65];
	if (sha256_hex(token, h) < 0)
		return NULL;
	const char *bid = box_id(b);
	for (size_t i = 0; i < ses_n; i++) {
		struct session *s = ses_all[i];
		/* one session per sandbox: its hash is the only one to compare */
		if (!s->sandbox_id[0] || strcmp(s->sandbox_id, bid))
			continue;
		if (ses_live(s) && s->opk != SES_CREATING && strlen(s->token_hash) == 64 &&
		    CRYPTO_memcmp(h, s->token_hash, 64) == 0)
			return s;
		return NULL;
	}
	return NULL;
}

struct session *session_of_box(const struct box *b)
{
	const char *bid = b ? box_id(b) : NULL;
	for (size_t i = 0; bid && i < ses_n; i++)
		if (ses_live(ses_all[i]) && ses_all[i]->opk != SES_CREATING &&
		    !strcmp(ses_all[i]->sandbox_id, bid))
			return ses_all[i];
	return NULL;
}

const char *session_id(const struct session *s)
{
	return s ? s->id : "";
}

struct box *session_box(const struct session *s)
{
	if (!s || !s->sandbox_id[0] || s->opk == SES_CREATING)
		return NULL;
	return box_find(s->sandbox_id);
}

/* ---- replies of a create or restart -------------------------------------------------- */

static void on_client_gone(void *arg)
{
	struct session *s = arg;
	s->req = NULL;
	if (!s->stored) {
		/* a create nobody will learn of: its sandbox is undone */
		core_op_cancel(s->op);
		s->op = NULL;
		ses_free(s);
	}
	/* a restart goes on: the session is the daemon's, not the request's */
}

static void wait_for(struct session *s, struct evhttp_request *req, int status)
{
	s->req = req;
	s->reply_status = status;
	http_wait_start(&s->wait, ev_base, req, on_client_gone, s);
}

/* Answer a waiting create or restart: the session, or e. */
static void answer(struct session *s, const struct core_err *e)
{
	struct evhttp_request *req = s->req;
	if (!req)
		return;
	s->req = NULL;
	http_wait_stop(&s->wait);
	if (e)
		http_error(req, e->status ? e->status : 500, e->code[0] ? e->code : "internal", "%s",
			   e->msg);
	else
		http_json(req, s->reply_status, ses_json(s));
}

/* A first create that failed: nothing of it stays. */
static void create_failed(struct session *s, const struct core_err *e)
{
	struct box *b = s->sandbox_id[0] ? box_find(s->sandbox_id) : NULL;
	if (b)
		core_delete(b);
	if (s->stored)
		ses_unstore(s);
	for (size_t i = 0; i < ses_n; i++)
		if (ses_all[i] == s) {
			ses_all[i] = ses_all[--ses_n];
			break;
		}
	answer(s, e);
	ses_free(s);
}

/* A later start (restart, restore) that failed: the session stays, exited. */
static void start_failed(struct session *s, const struct core_err *e)
{
	s->opk = SES_IDLE;
	s->op = NULL;
	OPENSSL_cleanse(s->token, sizeof s->token);
	s->token_hash[0] = 0;
	snprintf(s->state, sizeof s->state, "exited");
	s->ended_at = (int64_t)time(NULL);
	snprintf(s->ended_reason, sizeof s->ended_reason, "its sandbox could not start: %s",
		 e->msg);
	fprintf(stderr, "moat serve: session %s: %s\n", s->id, s->ended_reason);
	ses_save(s, NULL);
	answer(s, e);
}

static void start_error(struct session *s, const struct core_err *e)
{
	if (s->first)
		create_failed(s, e);
	else
		start_failed(s, e);
}

/* ---- the agent process ---------------------------------------------------------------- */

static void a_started(void *arg, int64_t pid)
{
	struct session *s = arg;
	s->first = false;
	s->pid = pid;
	snprintf(s->state, sizeof s->state, "running");
	struct core_err e = {0};
	if (ses_save(s, &e) < 0) {
		answer(s, &e);
		return;
	}
	answer(s, NULL);
}

static void a_output(void *arg, const char *out, size_t olen, const char *err, size_t elen)
{
	/* the agent's output is its own (it reports through the control
	 * plane); reading it keeps its pipes from filling */
}

static void a_yielded(void *arg, const struct core_exit *x)
{
	/* not asked for (it is streamed): follow it again */
	struct session *s = arg;
	s->op = NULL;
	s->opk = SES_IDLE;
	start_agent(s, NULL);
}

static void a_ended(void *arg, const struct core_exit *x)
{
	struct session *s = arg;
	s->op = NULL;
	s->opk = SES_IDLE;
	s->first = false;
	OPENSSL_cleanse(s->token, sizeof s->token);
	s->token_hash[0] = 0; /* revoked */
	s->has_exit = true;
	s->exit_code = x->exit_code;
	s->ended_at = (int64_t)time(NULL);
	snprintf(s->state, sizeof s->state, "exited");
	snprintf(s->ended_reason, sizeof s->ended_reason, "agent_exited");
	ses_sample(s);
	ses_save(s, NULL);
	answer(s, NULL); /* it ended before its start was told: the create is still answered */
}

static void auto_restart(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	if (ses_live(s) && s->opk == SES_IDLE)
		restart(s, "its sandbox was lost");
}

static void a_failed(void *arg, const struct core_err *e)
{
	struct session *s = arg;
	s->op = NULL;
	s->opk = SES_IDLE;
	if (!strcmp(s->state, "starting")) { /* it never started */
		start_error(s, e);
		return;
	}
	struct box *b = box_find(s->sandbox_id);
	if (b && box_running(b)) {
		/* the sandbox lives, the agent cannot be followed: it is over */
		a_ended(s, &(struct core_exit){.exit_code = -1});
		snprintf(s->ended_reason, sizeof s->ended_reason, "agent_lost: %s", e->msg);
		ses_save(s, NULL);
		return;
	}
	/* its sandbox went away under it: a fresh one (stateless by design),
	 * a few times a minute at most; from the loop, not from inside the
	 * delete that told us */
	int64_t now = (int64_t)time(NULL);
	if (now - s->auto_t0 > AUTO_WINDOW_S) {
		s->auto_t0 = now;
		s->auto_n = 0;
	}
	if (++s->auto_n > AUTO_RESTARTS) {
		struct core_err ge;
		cerr(&ge, 503, "unavailable", "its sandbox was lost %d times within %d s",
		     AUTO_RESTARTS + 1, AUTO_WINDOW_S);
		start_failed(s, &ge);
		return;
	}
	struct timeval tv = {0, 0};
	if (event_base_once(ev_base, -1, EV_TIMEOUT, auto_restart, s, &tv) < 0)
		restart(s, "its sandbox was lost");
}

static const struct core_exec_cbs agent_cbs = {.started = a_started, .output = a_output,
					       .yielded = a_yielded, .ended = a_ended,
					       .failed = a_failed};

/* The variables the agent is given (object, new reference). */
static json_t *agent_vars(struct session *s)
{
	json_t *v = json_pack("{s:s,s:s,s:s}", "MOAT_SESSION_ID", s->id, "MOAT_CONTROL_PLANE_URL",
			      cp_url(), "MOAT_SESSION_TOKEN", s->token);
	json_t *agent = json_object_get(s->spec, "agent");
	if (!v || !json_is_true(json_object_get(agent, "sdk_env")))
		return v;
	bool oa = false, an = false;
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(json_object_get(s->spec, "llm"), "routes"), i, r)
	{
		const char *name = json_string_value(json_object_get(r, "route"));
		const struct llm_route *lr = llm_route_find(name);
		if (!lr)
			continue;
		char url[512];
		if (lr->family == LLM_FAMILY_OPENAI && !oa) {
			snprintf(url, sizeof url, "%s/llm/%s/v1", cp_url(), name);
			json_object_set_new(v, "OPENAI_BASE_URL", json_string(url));
			json_object_set_new(v, "OPENAI_API_KEY", json_string(s->token));
			oa = true;
		} else if (lr->family == LLM_FAMILY_ANTHROPIC && !an) {
			snprintf(url, sizeof url, "%s/llm/%s", cp_url(), name);
			json_object_set_new(v, "ANTHROPIC_BASE_URL", json_string(url));
			json_object_set_new(v, "ANTHROPIC_API_KEY", json_string(s->token));
			an = true;
		}
	}
	return v;
}

/* Start (pid 0) or follow again (pid set) the agent in b. */
static void start_agent(struct session *s, struct box *b)
{
	struct core_err e = {0};
	if (!b)
		b = box_find(s->sandbox_id);
	if (!b) {
		cerr(&e, 409, "conflict", "sandbox %s is gone", s->sandbox_id);
		a_failed(s, &e);
		return;
	}
	if (s->pid > 0) {
		s->opk = SES_AGENT;
		s->op = core_attach(b, s->pid, true, -1, &agent_cbs, s, &e);
		if (!s->op)
			a_failed(s, &e);
		return;
	}
	json_t *agent = json_object_get(s->spec, "agent");
	json_t *vars = agent_vars(s);
	json_t *env = json_deep_copy(json_object_get(agent, "env"));
	if (!env)
		env = json_object();
	char *fdtext = NULL;
	size_t fdlen = 0;
	if (json_is_true(json_object_get(agent, "env_fd"))) {
		/* the secret goes through a pipe, not into /proc/<pid>/environ */
		FILE *m = open_memstream(&fdtext, &fdlen);
		const char *k;
		json_t *val;
		json_object_foreach(vars, k, val) if (m) fprintf(m, "%s=%s\n", k, json_string_value(val));
		if (m)
			fclose(m);
		json_object_set_new(env, "MOAT_SESSION_FD", json_string("0"));
	} else {
		json_object_update(env, vars);
	}
	struct core_exec_req r = {
		.argv = json_object_get(agent, "cmd"),
		.env = env,
		.cwd = json_string_value(json_object_get(agent, "cwd")),
		.stdin_mode = fdtext ? CORE_STDIN_CLOSED : CORE_STDIN_NULL,
		.stdin_data = fdtext ? fdtext : "",
		.stdin_len = fdtext ? fdlen : 0,
		.tag = "moat-session-agent",
		.stream = true, /* its pid at once; its output read as it comes */
		.yield_ms = -1,
		.detached = true,
	};
	s->opk = SES_AGENT;
	s->op = core_exec(b, &r, &agent_cbs, s, &e);
	/* the agent's request holds the token now; our copies go */
	OPENSSL_cleanse(s->token, sizeof s->token);
	if (fdtext) {
		OPENSSL_cleanse(fdtext, fdlen);
		free(fdtext);
	}
	const char *k;
	json_t *val;
	json_object_foreach(env, k, val) if (!strcmp(k, "MOAT_SESSION_TOKEN") ||
					      !strcmp(k, "OPENAI_API_KEY") ||
					      !strcmp(k, "ANTHROPIC_API_KEY"))
		OPENSSL_cleanse((char *)json_string_value(val), json_string_length(val));
	json_object_foreach(vars, k, val) if (!strcmp(k, "MOAT_SESSION_TOKEN") ||
					       !strcmp(k, "OPENAI_API_KEY") ||
					       !strcmp(k, "ANTHROPIC_API_KEY"))
		OPENSSL_cleanse((char *)json_string_value(val), json_string_length(val));
	json_decref(env);
	json_decref(vars);
	if (!s->op) {
		s->opk = SES_IDLE;
		/* the command was refused (agent.cmd, agent.cwd): name it as the body's */
		if (e.status == 400 && !strncmp(e.msg, "cmd", 3)) {
			char m[sizeof e.msg];
			snprintf(m, sizeof m, "%s", e.msg);
			snprintf(e.msg, sizeof e.msg, "agent.%s", m);
		}
		start_error(s, &e);
	}
}

/* ---- sandboxes ------------------------------------------------------------------------ */

static void on_box(void *arg, struct box *b, const struct core_err *ce)
{
	struct session *s = arg;
	s->op = NULL;
	s->opk = SES_IDLE;
	if (!b) {
		start_error(s, ce);
		return;
	}
	struct core_err e = {0};
	snprintf(s->sandbox_id, sizeof s->sandbox_id, "%s", box_id(b));
	s->u.cpu_us = 0;
	if (new_token(s) < 0) {
		cerr(&e, 500, "internal", "cannot make a token: %s", strerror(errno));
		start_error(s, &e);
		return;
	}
	bool first = !s->stored;
	if (ses_save(s, &e) < 0) {
		start_error(s, &e);
		return;
	}
	if (first && ses_add(s) < 0) {
		cerr(&e, 500, "internal", "out of memory");
		start_error(s, &e);
		return;
	}
	start_agent(s, b);
}

/* A fresh sandbox for s, then its agent (answering s->req when it runs). */
static int start_sandbox(struct session *s, struct core_err *e)
{
	json_t *body = json_deep_copy(json_object_get(s->spec, "sandbox"));
	if (!body)
		body = json_object();
	/* the session's life is the sandbox's: no idle reaping of a sandbox
	 * whose agent talks only to the control plane */
	if (!json_object_get(body, "idle_timeout_s"))
		json_object_set_new(body, "idle_timeout_s", json_integer(0));
	struct core_create_opts o = {.control = true};
	s->opk = SES_CREATING;
	s->op = core_create(body, &o, on_box, s, e);
	json_decref(body);
	if (!s->op) {
		s->opk = SES_IDLE;
		return -1;
	}
	return 0;
}

void ses_create(struct evhttp_request *req, json_t *spec)
{
	struct core_err e = {0};
	struct session *s = calloc(1, sizeof *s);
	unsigned char r[16];
	if (!s || random_bytes(r, sizeof r) < 0) {
		free(s);
		json_decref(spec);
		http_error(req, 500, "internal", "cannot make a session");
		return;
	}
	static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	memcpy(s->id, "ses_", 4);
	for (int i = 0; i < 16; i++)
		s->id[4 + i] = al[r[i] % 36];
	s->spec = spec;
	s->first = true;
	snprintf(s->state, sizeof s->state, "starting");
	s->created_at = (int64_t)time(NULL);
	wait_for(s, req, 201);
	if (start_sandbox(s, &e) < 0) {
		answer(s, &e);
		ses_free(s);
	}
}

/* Stop what runs for s and remove its current sandbox. */
static void drop_sandbox(struct session *s)
{
	struct core_op *op = s->op;
	s->op = NULL;
	s->opk = SES_IDLE;
	core_op_cancel(op); /* a create is undone; the agent's exec just forgotten */
	ses_sandbox_done(s);
	struct box *b = s->sandbox_id[0] ? box_find(s->sandbox_id) : NULL;
	if (b)
		core_delete(b);
}

static void restart(struct session *s, const char *why)
{
	drop_sandbox(s);
	OPENSSL_cleanse(s->token, sizeof s->token);
	s->token_hash[0] = 0;
	s->pid = 0;
	s->has_exit = false;
	s->exit_code = 0;
	s->ended_at = 0;
	s->ended_reason[0] = 0;
	s->restarts++;
	snprintf(s->state, sizeof s->state, "starting");
	struct core_err e = {0};
	if (ses_save(s, &e) < 0 || start_sandbox(s, &e) < 0) {
		start_failed(s, &e);
		return;
	}
	if (why)
		fprintf(stderr, "moat serve: session %s: %s: a fresh sandbox\n", s->id, why);
}

void ses_restart_req(struct evhttp_request *req, struct session *s)
{
	if (!strcmp(s->state, "ended")) {
		http_error(req, 409, "conflict", "session %s has ended (deleted)", s->id);
		return;
	}
	if (s->req || s->opk == SES_CREATING) {
		http_error(req, 409, "conflict", "session %s is being started already", s->id);
		return;
	}
	wait_for(s, req, 200);
	restart(s, NULL);
}

void ses_delete(struct evhttp_request *req, struct session *s, bool purge)
{
	if (s->req) {
		struct core_err e;
		cerr(&e, 409, "conflict", "session %s was deleted while it started", s->id);
		answer(s, &e);
	}
	if (strcmp(s->state, "ended")) {
		drop_sandbox(s);
		OPENSSL_cleanse(s->token, sizeof s->token);
		s->token_hash[0] = 0;
		if (!s->ended_at)
			s->ended_at = (int64_t)time(NULL);
		snprintf(s->state, sizeof s->state, "ended");
		snprintf(s->ended_reason, sizeof s->ended_reason, "deleted");
		struct core_err e = {0};
		if (ses_save(s, &e) < 0) {
			http_error(req, 500, "internal", "%s", e.msg);
			return;
		}
	}
	if (purge)
		conv_purge(s->id);
	artifacts_session_ended(s->id, purge);
	http_json(req, 200, ses_json(s));
}

/* ---- life of the module ----------------------------------------------------------------- */

static void on_sample(evutil_socket_t fd, short what, void *arg)
{
	for (size_t i = 0; i < ses_n; i++)
		if (ses_live(ses_all[i]) && ses_sample(ses_all[i]))
			ses_save(ses_all[i], NULL);
}

int session_init(const struct session_config *c, struct moat_err *e)
{
	ev_base = c->base;
	free(ses_data_dir);
	ses_data_dir = strdup(c->data_dir ? c->data_dir : ".");
	if (!ses_data_dir)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "out of memory");
	if (db_exec("CREATE TABLE IF NOT EXISTS sessions ("
		    "id TEXT PRIMARY KEY, state TEXT NOT NULL, spec TEXT NOT NULL, "
		    "sandbox_id TEXT NOT NULL DEFAULT '', token_hash TEXT NOT NULL DEFAULT '', "
		    "created_at INTEGER NOT NULL, ended_at INTEGER NOT NULL DEFAULT 0, "
		    "ended_reason TEXT NOT NULL DEFAULT '', restarts INTEGER NOT NULL DEFAULT 0, "
		    "agent_pid INTEGER NOT NULL DEFAULT 0, exit_code INTEGER, "
		    "tokens_in INTEGER NOT NULL DEFAULT 0, tokens_out INTEGER NOT NULL DEFAULT 0, "
		    "requests INTEGER NOT NULL DEFAULT 0, bytes_in INTEGER NOT NULL DEFAULT 0, "
		    "bytes_out INTEGER NOT NULL DEFAULT 0, cpu_prev_us INTEGER NOT NULL DEFAULT 0, "
		    "cpu_us INTEGER NOT NULL DEFAULT 0, mem_peak_bytes INTEGER NOT NULL DEFAULT 0, "
		    "budget_exceeded TEXT NOT NULL DEFAULT '')",
		    e) < 0)
		return -1;
	if (load(e) < 0)
		return -1;
	if (ev_base) {
		sampler = event_new(ev_base, -1, EV_PERSIST, on_sample, NULL);
		struct timeval tv = {SAMPLE_S, 0};
		if (!sampler || event_add(sampler, &tv) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sessions: cannot start the sampler");
	}
	return 0;
}

void session_restore(void)
{
	for (size_t i = 0; i < ses_n; i++) {
		struct session *s = ses_all[i];
		if (!ses_live(s))
			continue; /* exited and ended ones stay as they are */
		struct box *b = s->sandbox_id[0] ? box_find(s->sandbox_id) : NULL;
		if (b && box_paused(b))
			continue; /* frozen: its agent is followed once it is resumed (restart) */
		if (b && box_running(b) && s->pid > 0 && !strcmp(s->state, "running")) {
			start_agent(s, b); /* followed again (core_attach) */
			continue;
		}
		restart(s, b ? "its sandbox is stopped" : "its sandbox is gone");
	}
}

void session_shutdown(void)
{
	if (sampler)
		event_free(sampler);
	sampler = NULL;
	for (size_t i = 0; i < ses_n; i++) {
		struct session *s = ses_all[i];
		/* the agent and its sandbox run on; a restarted daemon follows them */
		core_op_cancel(s->op);
		s->op = NULL;
		ses_free(s);
	}
	free(ses_all);
	ses_all = NULL;
	ses_n = 0;
	free(ses_data_dir);
	ses_data_dir = NULL;
}
