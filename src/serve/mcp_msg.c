/* The MCP wire codec: see mcp_msg.h. */
#define _GNU_SOURCE
#include "mcp_msg.h"

#include "../base/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* 2025-11-25 is the TypeScript SDK's LATEST_PROTOCOL_VERSION (1.32);
 * 2024-11-05 clients reach us through `moat mcp` (stdio). What moat
 * answers is the same in each: the later versions only add fields
 * (structuredContent, title, annotations) older clients ignore. */
const char *const mcp_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05",
				    NULL};

bool mcp_version_known(const char *v)
{
	for (size_t i = 0; v && mcp_versions[i]; i++)
		if (!strcmp(v, mcp_versions[i]))
			return true;
	return false;
}

const char *mcp_version_pick(const char *asked)
{
	for (size_t i = 0; asked && mcp_versions[i]; i++)
		if (!strcmp(asked, mcp_versions[i]))
			return mcp_versions[i];
	return mcp_versions[0];
}

static enum mcp_kind invalid(struct mcp_msg *m, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static enum mcp_kind invalid(struct mcp_msg *m, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->err, sizeof m->err, fmt, ap);
	va_end(ap);
	moat_utf8_clean(m->err);
	m->code = code;
	m->method = NULL;
	m->params = NULL;
	return m->kind = MCP_INVALID;
}

enum mcp_kind mcp_msg_parse(const char *body, size_t len, struct mcp_msg *m)
{
	memset(m, 0, sizeof *m);
	json_error_t je;
	/* duplicate keys: which "id" or "method" counts would be a guess; a
	 * NUL (\u0000) is refused as /v1 refuses it (C strings downstream) */
	m->root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!m->root)
		return invalid(m, MCP_PARSE_ERROR, "parse error: %s (line %d, column %d)", je.text,
			       je.line, je.column);
	if (json_is_array(m->root))
		return invalid(m, MCP_INVALID_REQUEST,
			       "JSON-RPC batches are not supported: send one message per request");
	if (!json_is_object(m->root))
		return invalid(m, MCP_INVALID_REQUEST, "a JSON-RPC message must be an object");
	json_t *id = json_object_get(m->root, "id");
	/* MCP: an id is a string or an integer, never null */
	if (id && (json_is_string(id) || json_is_integer(id)))
		m->id = id;
	const char *ver = json_string_value(json_object_get(m->root, "jsonrpc"));
	if (!ver || strcmp(ver, "2.0"))
		return invalid(m, MCP_INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"");
	if (id && !m->id)
		return invalid(m, MCP_INVALID_REQUEST, "\"id\" must be a string or an integer");
	json_t *method = json_object_get(m->root, "method");
	if (!method) {
		bool res = json_object_get(m->root, "result"), err = json_object_get(m->root, "error");
		if (!m->id || res == err)
			return invalid(m, MCP_INVALID_REQUEST,
				       "a message needs a \"method\" (request, notification) or an "
				       "\"id\" with one of \"result\" or \"error\" (response)");
		return m->kind = MCP_RESPONSE;
	}
	if (!json_is_string(method) || !json_string_length(method) ||
	    strlen(json_string_value(method)) != json_string_length(method))
		return invalid(m, MCP_INVALID_REQUEST, "\"method\" must be a non-empty string");
	json_t *params = json_object_get(m->root, "params");
	if (params && !json_is_object(params)) {
		if (!m->id) /* a notification with odd params is still ignored */
			params = NULL;
		else
			return invalid(m, MCP_INVALID_PARAMS, "\"params\" must be an object");
	}
	m->method = json_string_value(method);
	m->params = params;
	return m->kind = m->id ? MCP_REQUEST : MCP_NOTIFICATION;
}

void mcp_msg_free(struct mcp_msg *m)
{
	json_decref(m->root);
	memset(m, 0, sizeof *m);
}

json_t *mcp_result(json_t *id, json_t *result)
{
	if (!result)
		return NULL;
	return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
			 result);
}

json_t *mcp_error(json_t *id, int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	moat_utf8_clean(msg);
	return json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
			 "error", "code", code, "message", msg);
}

bool mcp_session_id_ok(const char *s)
{
	if (!s || strlen(s) != MCP_SESSION_ID_LEN)
		return false;
	for (size_t i = 0; i < MCP_SESSION_ID_LEN; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}
