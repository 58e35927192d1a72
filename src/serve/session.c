/* STUB (issue 14): replaced by sessions. */
#include "session.h"

#include "http.h"

int session_init(const struct session_config *c, struct moat_err *e) { return 0; }
void session_restore(void) {}
void session_shutdown(void) {}
void session_route(struct evhttp_request *req, char **seg, int n)
{
	http_error(req, 501, "internal", "sessions are not built yet");
}
struct session *session_find(const char *id) { return NULL; }
struct session *session_auth(const struct box *b, const char *token) { return NULL; }
const char *session_id(const struct session *s) { return ""; }
struct session *session_of_box(const struct box *b) { return NULL; }
json_t *session_json(const struct session *s) { return NULL; }
struct box *session_box(const struct session *s) { return NULL; }
int session_llm_check(struct session *s, const char *route, const char *model,
		      struct core_err *e)
{
	return -1;
}
void session_account(struct session *s, const struct llm_usage *u, uint64_t bytes_in,
		     uint64_t bytes_out)
{
}
void session_account_bytes(struct session *s, uint64_t bytes_in, uint64_t bytes_out) {}
void session_metrics(FILE *f) {}
