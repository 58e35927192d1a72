/* STUB (issue 14): replaced by the artifact store. */
#include "artifacts.h"

#include "http.h"

int artifacts_init(const struct artifacts_config *c, struct moat_err *e) { return 0; }
void artifacts_shutdown(void) {}
int artifacts_name_check(const char *name, struct core_err *e) { return -1; }
void artifacts_cp_route(struct evhttp_request *req, struct session *s, const char *path)
{
	http_error(req, 501, "internal", "artifacts are not built yet");
}
void artifacts_host_route(struct evhttp_request *req, const char *session_id, char **seg,
			  int n)
{
	http_error(req, 501, "internal", "artifacts are not built yet");
}
void artifacts_session_ended(const char *session_id, bool purge) {}
