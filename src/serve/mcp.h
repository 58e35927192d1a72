/* The MCP door (docs/mcp.md): the Model Context Protocol's Streamable HTTP
 * transport at /mcp, on the listener and behind the bearer auth of moat's
 * own API, onto the operation core through the tools of mcp_tools.c.
 * Sessions (Mcp-Session-Id) live in the daemon's memory only: a restarted
 * daemon answers 404 to an old one, and the client initializes again. */
#ifndef MOAT_SERVE_MCP_H
#define MOAT_SERVE_MCP_H

#include <event2/http.h>
#include <stdbool.h>

struct event_base;

struct mcp_config {
	struct event_base *base;
	unsigned max_sessions; /* open sessions at most (0: MCP_MAX_SESSIONS) */
	unsigned idle_s;       /* a session unused this long ends (0: MCP_IDLE_S) */
};
#define MCP_MAX_SESSIONS 256
#define MCP_IDLE_S 3600

void mcp_init(const struct mcp_config *c);
/* Is this request the door's? (the path /mcp, any query) */
bool mcp_claims(struct evhttp_request *req);
/* Answer an authenticated request of the door. */
void mcp_route(struct evhttp_request *req);
/* End every session (calls in flight are cancelled, unanswered). */
void mcp_shutdown(void);

#endif
