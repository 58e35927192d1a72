/* libFuzzer target: the MCP door's codec (src/serve/mcp_msg.c) and tool
 * argument checks (src/serve/mcp_schema.c), which read what any MCP client
 * POSTs to /mcp: one JSON-RPC message (any bytes), a tools/call's arguments
 * checked against every tool, and the Origin header. Checks: every message
 * is classified, a refusal has a JSON-RPC code and a message; a request has
 * a method and a string or integer id; the answers built from what was
 * read are JSON that dumps; a refused argument set says which argument; an
 * accepted Origin is one of the loopback or listen forms. Seeds:
 * tests/fuzz/corpus/fuzz_mcp (the messages an MCP SDK client sends). */
#include "serve/mcp_msg.h"
#include "serve/mcp_schema.h"
#include "serve/browser.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void dumps(json_t *j)
{
	if (!j)
		abort(); /* an answer to anything read is always possible */
	char *s = json_dumps(j, JSON_COMPACT);
	if (!s)
		abort();
	free(s);
	json_decref(j);
}

static void arguments(json_t *args)
{
	static const char *const names[] = {"sandbox_create", "sandbox_list", "sandbox_delete",
					    "exec", "write_stdin", "read_file", "write_file",
					    "list_files", "apply_patch", "view_image"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const struct mcp_tool *t = mcp_tool_find(names[i]);
		if (!t)
			abort();
		char err[512] = "";
		if (!mcp_args_check(t, args, err, sizeof err)) {
			if (!strstr(err, names[i]))
				abort(); /* a refusal names the tool (and the argument) */
			continue;
		}
		/* accepted: what the tools read is there, of its type */
		for (const struct mcp_arg *a = t->args; a->name; a++) {
			json_t *v = json_object_get(args, a->name);
			if (a->required && (!v || json_is_null(v)))
				abort();
			if (a->kind == MA_STRING && v && !json_is_null(v) &&
			    (!mcp_arg_str(args, a->name, NULL) || !*mcp_arg_str(args, a->name, NULL)))
				abort();
			if (a->kind == MA_INT && v && !json_is_null(v)) {
				int64_t x = mcp_arg_int(args, a->name, a->min - 1);
				if (x < a->min || x > a->max)
					abort();
			}
		}
	}
}

static bool loopback_form(const char *o)
{
	const char *h = strstr(o, "://");
	if (!h)
		return false;
	h += 3;
	return !strncasecmp(h, "localhost", 9) || !strncmp(h, "127.", 4) || !strncmp(h, "[::1]", 5) ||
	       !strncasecmp(h, "moat.test", 9);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool once;
	if (!once) {
		once = true;
		dumps(mcp_tools_json());
	}
	struct mcp_msg m;
	enum mcp_kind k = mcp_msg_parse((const char *)data, size, &m);
	if (k != m.kind)
		abort();
	switch (k) {
	case MCP_INVALID:
		if (!m.err[0] || (m.code != MCP_PARSE_ERROR && m.code != MCP_INVALID_REQUEST &&
				  m.code != MCP_INVALID_PARAMS))
			abort();
		if (m.code == MCP_INVALID_PARAMS && !m.id)
			abort();
		dumps(mcp_error(m.id, m.code, "%s", m.err));
		break;
	case MCP_REQUEST:
		if (!m.method || !m.id || !(json_is_string(m.id) || json_is_integer(m.id)))
			abort();
		if (m.params && !json_is_object(m.params))
			abort();
		dumps(mcp_result(m.id, json_object()));
		dumps(mcp_error(m.id, MCP_METHOD_NOT_FOUND, "method not found: %s", m.method));
		if (json_is_object(json_object_get(m.params, "arguments")))
			arguments(json_object_get(m.params, "arguments"));
		(void)mcp_version_pick(json_string_value(json_object_get(m.params, "protocolVersion")));
		break;
	case MCP_NOTIFICATION:
		if (!m.method || m.id)
			abort();
		break;
	case MCP_RESPONSE:
		if (m.method || !m.id)
			abort();
		break;
	}
	mcp_msg_free(&m);

	/* the same bytes as an Origin header and a session id */
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (browser_origin_ok(s, "moat.test", NULL) && !loopback_form(s))
		abort();
	/* a Host that passes is HOST[:PORT] alone */
	if (browser_host_ok(s, "moat.test") && strpbrk(s, "/?#@ "))
		abort();
	if (mcp_session_id_ok(s) && strlen(s) != MCP_SESSION_ID_LEN)
		abort();
	if (!mcp_version_pick(s) || (mcp_version_known(s) && strcmp(mcp_version_pick(s), s)))
		abort();
	free(s);
	return 0;
}
