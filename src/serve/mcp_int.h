/* Inside the MCP door: how the transport (mcp.c) hands a tools/call to
 * the tools (mcp_tools.c), which are thin calls onto the operation core. */
#ifndef MOAT_SERVE_MCP_INT_H
#define MOAT_SERVE_MCP_INT_H

#include "mcp_schema.h"

#include <jansson.h>
#include <stddef.h>

struct mcp_call;

struct mcp_call_cbs {
	/* final, exactly once unless mcp_call_cancel came first: result is a
	 * CallToolResult (stolen; an isError one for a tool failure) */
	void (*done)(void *arg, json_t *result);
	/* optional: exec's output as it comes (then done's result still has
	 * all of it); only called when the transport asked for it */
	void (*output)(void *arg, const char *out, size_t olen, const char *err, size_t elen);
	/* optional: what the transport still has queued for its client
	 * (core_exec_cbs' back-pressure) */
	size_t (*backlog)(void *arg);
};

/* Run tool t with args (borrowed, may be NULL). When the answer is known
 * at once (a bad argument, an unknown sandbox, sandbox_list) it returns
 * NULL with *now set (a CallToolResult, new reference) and no callback
 * runs; else it returns the call, and cbs->done runs later from the event
 * loop. stream: exec's output also goes to cbs->output. */
struct mcp_call *mcp_tools_call(const struct mcp_tool *t, json_t *args, bool stream,
				const struct mcp_call_cbs *cbs, void *arg, json_t **now);
/* The client went away or cancelled: no callback runs after this. An exec
 * waiting for its exit is killed (core_op_cancel); one left running with
 * yield_ms runs on. NULL is a no-op. */
void mcp_call_cancel(struct mcp_call *c);

/* A CallToolResult with isError and one text block (printf format). */
json_t *mcp_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
