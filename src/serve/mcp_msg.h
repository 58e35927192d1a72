/* The MCP door's wire codec (Model Context Protocol over JSON-RPC 2.0):
 * one message as a Streamable HTTP POST carries it, parsed and classified;
 * answers built; protocol versions negotiated; the Origin check of the
 * transport. Pure: no I/O and no state, so it is fuzzed on its own
 * (tests/fuzz/fuzz_mcp.c). The transport and sessions are mcp.c's. */
#ifndef MOAT_SERVE_MCP_MSG_H
#define MOAT_SERVE_MCP_MSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* JSON-RPC 2.0 error codes */
#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)
#define MCP_SERVER_ERROR (-32000) /* transport refusals (no session, too many) */

enum mcp_kind {
	MCP_REQUEST,      /* method and id: answered with a result or an error */
	MCP_NOTIFICATION, /* method, no id: never answered */
	MCP_RESPONSE,     /* id and result or error (to a request of ours: none are sent) */
	MCP_INVALID,      /* code and err say why; id is set when it could be read */
};

struct mcp_msg {
	enum mcp_kind kind;
	json_t *root;       /* owned: the parsed body (NULL after a parse error) */
	json_t *id;         /* borrowed from root: a string or an integer, or NULL */
	const char *method; /* borrowed from root: requests and notifications */
	json_t *params;     /* borrowed from root: an object, or NULL when absent */
	int code;           /* MCP_INVALID: the JSON-RPC error code */
	char err[256];      /* MCP_INVALID: a message naming the culprit */
};

/* Parse one message (body[0..len), any bytes). Always fills *m (free it
 * with mcp_msg_free, also after MCP_INVALID) and returns m->kind. A batch
 * (a JSON array) is invalid: MCP 2025-06-18 has none. Requests with params
 * that are not an object are MCP_INVALID with MCP_INVALID_PARAMS and id. */
enum mcp_kind mcp_msg_parse(const char *body, size_t len, struct mcp_msg *m);
void mcp_msg_free(struct mcp_msg *m);

/* {"jsonrpc":"2.0","id":id,"result":result}: result stolen, id borrowed
 * (NULL: null). NULL only when out of memory. */
json_t *mcp_result(json_t *id, json_t *result);
/* {"jsonrpc":"2.0","id":id,"error":{"code","message"}}; the message is
 * made valid UTF-8 (it may quote the client). */
json_t *mcp_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The protocol versions served, newest first, NULL-terminated. */
extern const char *const mcp_versions[];
bool mcp_version_known(const char *v);
/* initialize: the client's version when it is served, else the newest. */
const char *mcp_version_pick(const char *asked);

/* A session id as the transport mints them: 32 lowercase hex digits. */
#define MCP_SESSION_ID_LEN 32
bool mcp_session_id_ok(const char *s);

#endif
