/* STUB (issue 14): replaced by the dialects' parsing. */
#include "llm_dialect.h"

int llm_dialect_of_path(const char *path) { return -1; }
const char *llm_dialect_path(enum llm_dialect d) { return "/"; }
int llm_req_inspect(enum llm_dialect d, const json_t *body, struct llm_req_info *out,
		    struct core_err *e)
{
	return -1;
}
void llm_req_prepare(enum llm_dialect d, json_t *body) {}
int llm_answer_parse(enum llm_dialect d, const char *body, size_t len, struct llm_usage *u,
		     json_t **msgs)
{
	return -1;
}
struct llm_stream *llm_stream_new(enum llm_dialect d) { return NULL; }
void llm_stream_free(struct llm_stream *s) {}
int llm_stream_feed(struct llm_stream *s, const char *p, size_t n) { return -1; }
bool llm_stream_complete(const struct llm_stream *s) { return false; }
void llm_stream_usage(const struct llm_stream *s, struct llm_usage *u) { u->in = u->out = -1; }
json_t *llm_stream_msgs(struct llm_stream *s) { return NULL; }
json_t *llm_conv_body(enum llm_dialect d, const json_t *turn, const json_t *history,
		      struct core_err *e)
{
	return NULL;
}
const json_t *llm_conv_new(enum llm_dialect d, const json_t *turn) { return NULL; }
