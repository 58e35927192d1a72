/* STUB (issue 14): replaced by conversation mode's handler. */
#include "cp.h"

#include "http.h"

void cp_conv_route(struct evhttp_request *req, struct session *s, const char *path)
{
	http_error(req, 501, "internal", "conversations are not built yet");
}
