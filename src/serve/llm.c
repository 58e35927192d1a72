/* STUB (issue 14): replaced by the LLM proxy's upstream side. */
#include "llm.h"

#include <errno.h>
#include <stdio.h>

int llm_route_parse(const char *arg, struct llm_route *r, struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_USAGE, 0, "--llm-route %s: not built yet", arg);
}
void llm_route_free(struct llm_route *r) {}
int llm_init(struct event_base *base, const struct llm_route *routes, size_t n, json_t *secrets,
	     struct moat_err *e)
{
	return 0;
}
void llm_shutdown(void) {}
const struct llm_route *llm_route_find(const char *name) { return NULL; }
size_t llm_route_count(void) { return 0; }
const struct llm_route *llm_route_at(size_t i) { return NULL; }
struct llm_call *llm_call_start(const struct llm_route *r, const char *path, const char *body,
				size_t len, const char *const *headers, const struct llm_cbs *cbs,
				void *arg, struct core_err *e)
{
	e->status = 501;
	snprintf(e->code, sizeof e->code, "internal");
	snprintf(e->msg, sizeof e->msg, "the LLM proxy is not built yet");
	return NULL;
}
void llm_call_cancel(struct llm_call *c) {}
void llm_call_resume(struct llm_call *c) {}
