/* The control plane's record of model calls (SQLite, store_db()): the
 * conversation of each session in conversation mode, and every request
 * and answer of pass-through calls (audit, billing). A turn is stored in
 * one transaction once its answer is complete, so a call cut short
 * leaves nothing, and a retried turn (same turn_id) is not stored twice. */
#ifndef MOAT_SERVE_CONV_H
#define MOAT_SERVE_CONV_H

#include "llm_dialect.h"

#include <moat/err.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int conv_init(struct moat_err *e);

/* The conversation so far: an array of stored messages in order (new
 * reference; [] when none). */
json_t *conv_history(const char *session_id);
/* The answer stored for turn_id (new reference: {"answer": <body as sent
 * to the agent>, "msgs": [...]}) or NULL. */
json_t *conv_turn_find(const char *session_id, const char *turn_id);
/* Append a turn: the agent's new messages, then the answer's; answer is
 * what the agent was sent (for a retry of turn_id, which may be NULL).
 * One transaction. */
int conv_turn_add(const char *session_id, const char *turn_id, const char *route,
		  enum llm_dialect d, const json_t *new_msgs, const json_t *answer_msgs,
		  const char *answer, size_t answer_len, const struct llm_usage *u,
		  struct moat_err *e);
/* A pass-through call, once it is over: status the upstream's (0 when it
 * never answered), complete false when cut short. */
int conv_record(const char *session_id, const char *route, enum llm_dialect d,
		const char *req, size_t req_len, int status, const char *answer,
		size_t answer_len, bool complete, const struct llm_usage *u,
		struct moat_err *e);
/* GET /v1/sessions/{id}/conversation and the agent's GET: {"session",
 * "messages":[...], "turns": N} (new reference). */
json_t *conv_json(const char *session_id);
/* The session was deleted with purge: its records go. */
void conv_purge(const char *session_id);

#endif
