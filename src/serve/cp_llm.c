/* STUB (issue 14): replaced by the proxy's pass-through handler. */
#include "cp.h"

#include "http.h"

void cp_llm_route(struct evhttp_request *req, struct session *s, const char *path)
{
	http_error(req, 501, "internal", "the LLM proxy is not built yet");
}
