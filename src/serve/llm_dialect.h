/* What the proxy must understand of the three dialects it speaks: OpenAI
 * Chat Completions (/v1/chat/completions), OpenAI Responses
 * (/v1/responses) and Anthropic Messages (/v1/messages). Pure functions
 * over JSON and SSE bytes (no I/O), so that a hostile client's request and
 * a hostile upstream's answer are fuzzed (tests/fuzz/fuzz_llm.c). */
#ifndef MOAT_SERVE_LLM_DIALECT_H
#define MOAT_SERVE_LLM_DIALECT_H

#include "core.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum llm_dialect { LLM_CHAT, LLM_RESPONSES, LLM_MESSAGES };

/* "/v1/chat/completions" -> LLM_CHAT, ...; -1 for any other path. */
int llm_dialect_of_path(const char *path);
/* The request path of a dialect ("/v1/messages"). */
const char *llm_dialect_path(enum llm_dialect d);

struct llm_req_info {
	char model[256];
	bool stream;
};
/* A client's request: an object with a string "model" (and the dialect's
 * message field: "messages", or "input" for Responses). Errors (400
 * invalid_request) name the field. */
int llm_req_inspect(enum llm_dialect d, const json_t *body, struct llm_req_info *out,
		    struct core_err *e);
/* Rewrite a request before it goes up: an OpenAI chat stream asks for
 * usage in its last chunk (stream_options.include_usage), so that tokens
 * are counted from the upstream's own fields. */
void llm_req_prepare(enum llm_dialect d, json_t *body);

struct llm_usage {
	int64_t in, out; /* tokens; -1 when the answer did not say */
};

/* A complete (not streamed) answer: its usage and, for the conversation,
 * the assistant's message(s) as the dialect will want them back in a
 * later request (chat: choices[0].message; messages: {"role":"assistant",
 * "content":[...]}; responses: the output items). *msgs is an array (new
 * reference). -1 when the body is not such an answer. */
int llm_answer_parse(enum llm_dialect d, const char *body, size_t len, struct llm_usage *u,
		     json_t **msgs);

/* A streamed answer, fed as it arrives (SSE; events split anywhere). */
struct llm_stream;
struct llm_stream *llm_stream_new(enum llm_dialect d);
void llm_stream_free(struct llm_stream *s);
/* -1 when the bytes are not SSE or an event is over 4 MiB (the proxy
 * still relays them; it just cannot store the turn). */
int llm_stream_feed(struct llm_stream *s, const char *p, size_t n);
/* The dialect's last event was seen ("data: [DONE]", message_stop,
 * response.completed or .incomplete) and no error event: the answer is
 * whole. */
bool llm_stream_complete(const struct llm_stream *s);
void llm_stream_usage(const struct llm_stream *s, struct llm_usage *u);
/* The assistant's message(s) assembled from the deltas (text and tool
 * calls), as llm_answer_parse gives them; NULL until complete. New ref. */
json_t *llm_stream_msgs(struct llm_stream *s);

/* Conversation mode: the upstream request of a turn. turn: the agent's
 * body (model, its new messages under the dialect's field, other
 * parameters: tools, system, max_tokens, stream ...), borrowed; history:
 * the stored messages (array), borrowed. Returns a new body with history
 * followed by the new messages. 400 naming the field when turn is bad. */
json_t *llm_conv_body(enum llm_dialect d, const json_t *turn, const json_t *history,
		      struct core_err *e);
/* The new messages of a turn (borrowed from turn), for storing. */
const json_t *llm_conv_new(enum llm_dialect d, const json_t *turn);

#endif
