/* The MCP door's tools as data: names, descriptions, the JSON schema of
 * each input (tools/list) and the check of a tools/call's arguments
 * against that same table, so what is advertised is what is accepted.
 * Pure (fuzzed with the codec, tests/fuzz/fuzz_mcp.c); what each tool
 * does is mcp_tools.c's. */
#ifndef MOAT_SERVE_MCP_SCHEMA_H
#define MOAT_SERVE_MCP_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mcp_op {
	MCP_OP_CREATE, MCP_OP_LIST, MCP_OP_DELETE, MCP_OP_EXEC, MCP_OP_STDIN,
	MCP_OP_READ, MCP_OP_WRITE, MCP_OP_LS, MCP_OP_PATCH, MCP_OP_IMAGE,
};

enum mcp_arg_kind {
	MA_STRING, /* a non-empty string without NUL (ids, paths) */
	MA_TEXT,   /* any string, empty and NUL included (file content, stdin) */
	MA_INT,    /* an integer from min to max */
	MA_CMD,    /* a non-empty string (sh -c) or a non-empty array of strings */
	MA_OBJECT, /* an object, checked by the core (manifest, network) */
};

struct mcp_arg {
	const char *name;
	enum mcp_arg_kind kind;
	bool required;
	int64_t min, max; /* MA_INT */
	const char *desc;
};

struct mcp_tool {
	const char *name, *title, *desc;
	enum mcp_op op;
	const struct mcp_arg *args; /* terminated by a NULL name */
	bool read_only, destructive, idempotent;
};

/* The tool called name, or NULL. */
const struct mcp_tool *mcp_tool_find(const char *name);
/* The tools/list result: {"tools":[{"name","title","description",
 * "inputSchema","annotations"}]} (new reference). */
json_t *mcp_tools_json(void);
/* Are args (an object, or NULL for none) what t takes? Optional arguments
 * may be null (as absent). On false, err holds a message naming the
 * argument. */
bool mcp_args_check(const struct mcp_tool *t, json_t *args, char *err, size_t n);
/* Convenience readers after a successful check (absent or null: dflt). */
const char *mcp_arg_str(json_t *args, const char *name, size_t *len);
int64_t mcp_arg_int(json_t *args, const char *name, int64_t dflt);

#endif
