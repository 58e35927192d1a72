/* Sessions inside: the record (session.c keeps it, in memory and in
 * SQLite) and what the HTTP side (session_http.c) needs of it. */
#ifndef MOAT_SERVE_SESSION_INT_H
#define MOAT_SERVE_SESSION_INT_H

#include "session.h"

#include "http.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct session_usage {
	int64_t tokens_in, tokens_out, requests, bytes_in, bytes_out;
	int64_t cpu_prev_us; /* the sandboxes it had before the current one */
	int64_t cpu_us;      /* the current sandbox's, last sampled */
	int64_t mem_peak;
};

/* What runs for the session right now. */
enum ses_op { SES_IDLE, SES_CREATING, SES_AGENT };

struct session {
	char id[24];
	char state[12];        /* "starting", "running", "exited", "ended" */
	json_t *spec;          /* the validated body: sandbox, agent, llm, budget, metadata */
	char sandbox_id[64];   /* "" before its first sandbox */
	char token_hash[65];   /* sha256 hex; "" when revoked */
	int64_t created_at, ended_at; /* unix seconds; ended_at 0 while live */
	char ended_reason[256];
	int64_t restarts;
	int64_t pid;           /* the agent's process (the sandbox agent's id), 0 none */
	bool has_exit;
	int exit_code;
	struct session_usage u;
	char budget_exceeded[16];
	bool stored;           /* it has a row */
	bool first;            /* its first start: a failure leaves nothing */
	/* not persisted */
	enum ses_op opk;
	struct core_op *op;
	char token[80];        /* the plain token, only while its agent is being started */
	struct evhttp_request *req; /* a create or restart waiting for the agent's start */
	int reply_status;
	struct http_wait wait;
	int64_t auto_t0;       /* automatic restarts (a sandbox lost): the window's start */
	int auto_n;
};

extern struct session **ses_all;
extern size_t ses_n;
extern char *ses_data_dir;

/* Starting or running: its token is valid. */
bool ses_live(const struct session *s);
/* Sample the current sandbox's cpu and memory into s (true: changed);
 * ses_sandbox_done before it goes (its cpu joins the earlier ones'). */
bool ses_sample(struct session *s);
void ses_sandbox_done(struct session *s);

/* The session object (new reference). */
json_t *ses_json(struct session *s);
/* {"usage","budget","budget_left"}-parts (new references). */
json_t *ses_usage_json(struct session *s);
json_t *ses_budget_left(struct session *s);
/* Write its row. */
int ses_save(struct session *s, struct core_err *e);
/* Only the usage counters and budget_exceeded (the hot path). */
int ses_save_usage(struct session *s);

/* POST /v1/sessions after validation: spec stolen. Answers req. */
void ses_create(struct evhttp_request *req, json_t *spec);
/* DELETE: answers req. */
void ses_delete(struct evhttp_request *req, struct session *s, bool purge);
/* POST restart: answers req (when the new agent runs). */
void ses_restart_req(struct evhttp_request *req, struct session *s);

/* Validate a POST /v1/sessions body into a spec (new reference) or NULL
 * with e set (the culprit named). */
json_t *ses_parse(json_t *body, struct core_err *e);

#endif
