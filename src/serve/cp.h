/* The control plane's door inside each session's sandbox: an HTTP server
 * on the sandbox's control listener (127.0.0.1:MOAT_CONTROL_PORT inside,
 * accepted here through box_control_ops), one evhttp per sandbox, so a
 * request's sandbox is known from the listener it came through and never
 * from the request. Every request carries the session token
 * (Authorization: Bearer, or x-api-key for Anthropic's SDK) and is
 * refused 401 unless session_auth finds it for this sandbox; a one-time
 * file URL (/files/<ticket>) carries its ticket instead. Then the path
 * picks the handler:
 *   /llm/<route>/v1/chat/completions|/v1/responses|/v1/messages  cp_llm_route
 *   /v1/conversations/<session>[/turns]                           cp_conv_route
 *   /v1/files/upload-url|download-url, /files/<ticket>             artifacts_cp_route
 */
#ifndef MOAT_SERVE_CP_H
#define MOAT_SERVE_CP_H

#include <moat/err.h>

#include <event2/http.h>
#include <stdint.h>

struct event_base;
struct session;

int cp_init(struct event_base *base, struct moat_err *e);
void cp_shutdown(void);
/* "http://127.0.0.1:7878": the address the agent is given. */
const char *cp_url(void);
/* Bytes an upload may carry at most on a control listener. */
#define CP_MAX_BODY ((uint64_t)256 << 20)

/* The handlers (path: decoded, without the query; s authenticated): */
void cp_llm_route(struct evhttp_request *req, struct session *s, const char *path);
void cp_conv_route(struct evhttp_request *req, struct session *s, const char *path);

#endif
