/* STUB (issue 14): replaced by the conversation store. */
#include "conv.h"

int conv_init(struct moat_err *e) { return 0; }
json_t *conv_history(const char *session_id) { return json_array(); }
json_t *conv_turn_find(const char *session_id, const char *turn_id) { return NULL; }
int conv_turn_add(const char *session_id, const char *turn_id, const char *route,
		  enum llm_dialect d, const json_t *new_msgs, const json_t *answer_msgs,
		  const char *answer, size_t answer_len, const struct llm_usage *u,
		  struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, 0, "not built yet");
}
int conv_record(const char *session_id, const char *route, enum llm_dialect d,
		const char *req, size_t req_len, int status, const char *answer,
		size_t answer_len, bool complete, const struct llm_usage *u,
		struct moat_err *e)
{
	return 0;
}
json_t *conv_json(const char *session_id) { return json_object(); }
void conv_purge(const char *session_id) {}
