/* Unit tests for the MCP door's pure parts: the JSON-RPC codec and the
 * Origin check (src/serve/mcp_msg.c), the tool table and its argument
 * checks (src/serve/mcp_schema.c). Bodies are exact heap copies, so a read
 * past the end trips ASan. */
#include <criterion/criterion.h>

#include "serve/browser.h"
#include "serve/mcp_msg.h"
#include "serve/mcp_schema.h"

#include <stdlib.h>
#include <string.h>

static enum mcp_kind parse(const char *s, struct mcp_msg *m)
{
	size_t n = strlen(s);
	char *copy = malloc(n ? n : 1);
	cr_assert_not_null(copy);
	memcpy(copy, s, n);
	enum mcp_kind k = mcp_msg_parse(copy, n, m);
	free(copy); /* m holds no pointer into the body */
	return k;
}

static void refused(const char *body, int code, const char *needle)
{
	struct mcp_msg m;
	cr_assert_eq(parse(body, &m), MCP_INVALID, "accepted: %s", body);
	cr_assert_eq(m.code, code, "%s: code %d, wanted %d (%s)", body, m.code, code, m.err);
	cr_assert(strstr(m.err, needle), "%s: \"%s\" lacks \"%s\"", body, m.err, needle);
	cr_assert_null(m.method);
	mcp_msg_free(&m);
}

Test(mcp_msg, request_notification_response)
{
	struct mcp_msg m;
	cr_assert_eq(parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}", &m),
		     MCP_REQUEST);
	cr_assert_str_eq(m.method, "tools/list");
	cr_assert_eq(json_integer_value(m.id), 7);
	cr_assert_null(m.params);
	mcp_msg_free(&m);

	cr_assert_eq(parse("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"x\",\"params\":{\"k\":1}}",
			   &m),
		     MCP_REQUEST);
	cr_assert_str_eq(json_string_value(m.id), "a");
	cr_assert(json_is_object(m.params));
	mcp_msg_free(&m);

	cr_assert_eq(parse("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &m),
		     MCP_NOTIFICATION);
	cr_assert_null(m.id);
	mcp_msg_free(&m);

	/* a notification's odd params are dropped, not refused (never answered) */
	cr_assert_eq(parse("{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":[1]}", &m),
		     MCP_NOTIFICATION);
	cr_assert_null(m.params);
	mcp_msg_free(&m);

	cr_assert_eq(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &m), MCP_RESPONSE);
	mcp_msg_free(&m);
	cr_assert_eq(parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}", &m),
		     MCP_RESPONSE);
	mcp_msg_free(&m);
}

Test(mcp_msg, refusals_name_the_culprit)
{
	refused("", MCP_PARSE_ERROR, "parse error");
	refused("{\"jsonrpc\":\"2.0\",", MCP_PARSE_ERROR, "parse error");
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"x\"}", MCP_PARSE_ERROR,
		"duplicate");
	refused("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", MCP_INVALID_REQUEST,
		"batches");
	refused("42", MCP_INVALID_REQUEST, "object");
	refused("{\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, "jsonrpc");
	refused("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST,
		"jsonrpc");
	refused("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MCP_INVALID_REQUEST, "id");
	refused("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MCP_INVALID_REQUEST, "id");
	refused("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", MCP_INVALID_REQUEST, "id");
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", MCP_INVALID_REQUEST, "method");
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", MCP_INVALID_REQUEST, "method");
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\u0000b\"}", MCP_PARSE_ERROR,
		"parse error");
	refused("{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_INVALID_REQUEST, "result");
	refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}", MCP_INVALID_REQUEST,
		"result");
	refused("{\"jsonrpc\":\"2.0\",\"result\":1}", MCP_INVALID_REQUEST, "result");
	/* params of a request: -32602, the id kept for the answer */
	struct mcp_msg m;
	cr_assert_eq(parse("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"x\",\"params\":[1]}", &m),
		     MCP_INVALID);
	cr_assert_eq(m.code, MCP_INVALID_PARAMS);
	cr_assert_eq(json_integer_value(m.id), 9);
	mcp_msg_free(&m);
}

Test(mcp_msg, answers)
{
	json_t *id = json_integer(3);
	json_t *r = mcp_result(id, json_pack("{s:i}", "a", 1));
	char *s = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
	cr_assert_str_eq(s, "{\"id\":3,\"jsonrpc\":\"2.0\",\"result\":{\"a\":1}}");
	free(s);
	json_decref(r);
	/* a message quoting invalid UTF-8 still makes a JSON answer */
	r = mcp_error(NULL, MCP_METHOD_NOT_FOUND, "method not found: %s", "x\xff");
	cr_assert_not_null(r);
	cr_assert(json_is_null(json_object_get(r, "id")));
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
		     -32601);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "error"), "message")),
			 "method not found: x?");
	json_decref(r);
	json_decref(id);
}

Test(mcp_msg, versions)
{
	cr_assert_str_eq(mcp_version_pick("2025-06-18"), "2025-06-18");
	cr_assert_str_eq(mcp_version_pick("2025-03-26"), "2025-03-26");
	cr_assert_str_eq(mcp_version_pick("2024-11-05"), "2024-11-05");
	cr_assert_str_eq(mcp_version_pick("2025-11-25"), "2025-11-25");
	/* unknown: the newest, and the client decides whether it can go on */
	cr_assert_str_eq(mcp_version_pick("2099-01-01"), mcp_versions[0]);
	cr_assert_str_eq(mcp_version_pick(NULL), mcp_versions[0]);
	cr_assert(mcp_version_known("2025-06-18"));
	cr_assert_not(mcp_version_known("2025-06-1"));
	cr_assert_not(mcp_version_known(""));
}

Test(mcp_msg, origin)
{
	cr_assert(browser_origin_ok(NULL, "127.0.0.1", NULL));
	cr_assert(browser_origin_ok("http://localhost:7070", "127.0.0.1", NULL));
	cr_assert(browser_origin_ok("http://LOCALHOST", "127.0.0.1", NULL));
	cr_assert(browser_origin_ok("https://127.0.0.1:8443", "127.0.0.1", NULL));
	cr_assert(browser_origin_ok("http://127.1.2.3", "127.0.0.1", NULL));
	cr_assert(browser_origin_ok("http://[::1]:7070", "127.0.0.1", NULL));
	cr_assert(browser_origin_ok("http://10.0.0.5:7070", "10.0.0.5", NULL));
	cr_assert(browser_origin_ok("http://moat.lan:7070", "moat.lan", NULL));
	cr_assert(browser_origin_ok("http://[fd00::5]:7070", "fd00::5", NULL));
	/* DNS rebinding: a page of another name that now resolves to us */
	cr_assert_not(browser_origin_ok("http://evil.example:7070", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://localhost.evil.example", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://127.0.0.1.evil.example", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://127.0.0.256", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://127.0.0", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://10.0.0.5", "0.0.0.0", NULL));
	cr_assert_not(browser_origin_ok("http://[fd00::5]", "fd00::6", NULL));
	cr_assert_not(browser_origin_ok("null", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("file://", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("vscode-webview://localhost", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://user@localhost", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://localhost/path", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://localhost:", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://localhost:123456", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("http://[::1", "127.0.0.1", NULL));
	cr_assert_not(browser_origin_ok("", "127.0.0.1", NULL));
}

Test(mcp_msg, session_ids)
{
	cr_assert(mcp_session_id_ok("0123456789abcdef0123456789abcdef"));
	cr_assert_not(mcp_session_id_ok("0123456789ABCDEF0123456789abcdef"));
	cr_assert_not(mcp_session_id_ok("0123456789abcdef0123456789abcde"));
	cr_assert_not(mcp_session_id_ok("0123456789abcdef0123456789abcdef0"));
	cr_assert_not(mcp_session_id_ok(NULL));
}

/* ---- the tool table ---------------------------------------------------------------- */

Test(mcp_schema, tools_list_matches_the_contract)
{
	static const struct {
		const char *name, *required, *optional;
	} want[] = {
		{"sandbox_create", "", "image manifest network"},
		{"sandbox_list", "", ""},
		{"sandbox_delete", "id", ""},
		{"exec", "id cmd", "cwd timeout_ms yield_ms"},
		{"write_stdin", "id process_id data", "yield_ms"},
		{"read_file", "id path", ""},
		{"write_file", "id path content", ""},
		{"list_files", "id", "path depth"},
		{"apply_patch", "id patch", ""},
		{"view_image", "id path", ""},
	};
	json_t *r = mcp_tools_json();
	json_t *tools = json_object_get(r, "tools");
	cr_assert_eq(json_array_size(tools), sizeof want / sizeof want[0]);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		json_t *t = json_array_get(tools, i);
		cr_assert_str_eq(json_string_value(json_object_get(t, "name")), want[i].name);
		cr_assert(json_string_length(json_object_get(t, "description")) > 10);
		json_t *s = json_object_get(t, "inputSchema");
		cr_assert_str_eq(json_string_value(json_object_get(s, "type")), "object");
		cr_assert(json_is_false(json_object_get(s, "additionalProperties")), "%s",
			  want[i].name);
		json_t *props = json_object_get(s, "properties");
		json_t *req = json_object_get(s, "required");
		/* required lists exactly the required ones (absent when none) */
		char got[128] = "";
		size_t k;
		json_t *v;
		json_array_foreach(req, k, v)
		{
			strcat(got, k ? " " : "");
			strcat(got, json_string_value(v));
		}
		cr_assert_str_eq(got, want[i].required, "%s", want[i].name);
		if (!*want[i].required)
			cr_assert_null(req, "%s", want[i].name);
		char all[160];
		snprintf(all, sizeof all, "%s%s%s", want[i].required,
			 *want[i].required && *want[i].optional ? " " : "", want[i].optional);
		char keys[160] = "";
		const char *key;
		int n = 0;
		json_object_foreach(props, key, v)
		{
			strcat(keys, n++ ? " " : "");
			strcat(keys, key);
			cr_assert(json_string_length(json_object_get(v, "description")), "%s.%s",
				  want[i].name, key);
		}
		cr_assert_str_eq(keys, all, "%s", want[i].name);
		cr_assert(json_is_object(json_object_get(t, "annotations")));
		cr_assert_eq(mcp_tool_find(want[i].name)->name, mcp_tool_find(want[i].name)->name);
	}
	cr_assert_null(mcp_tool_find("nope"));
	cr_assert_null(mcp_tool_find(NULL));
	json_decref(r);
}

static void bad_args(const char *tool, const char *args, const char *needle)
{
	json_error_t je;
	json_t *a = json_loads(args, JSON_ALLOW_NUL, &je); /* the check's own guard */
	cr_assert_not_null(a, "%s", args);
	char err[512] = "";
	cr_assert_not(mcp_args_check(mcp_tool_find(tool), a, err, sizeof err), "%s %s accepted",
		      tool, args);
	cr_assert(strstr(err, needle), "%s %s: \"%s\" lacks \"%s\"", tool, args, err, needle);
	cr_assert(strstr(err, tool), "%s: \"%s\" does not name the tool", args, err);
	json_decref(a);
}

static void good_args(const char *tool, const char *args)
{
	json_error_t je;
	json_t *a = json_loads(args, JSON_ALLOW_NUL, &je); /* the check's own guard */
	cr_assert_not_null(a, "%s", args);
	char err[512] = "";
	cr_assert(mcp_args_check(mcp_tool_find(tool), a, err, sizeof err), "%s %s: %s", tool,
		  args, err);
	json_decref(a);
}

Test(mcp_schema, arguments)
{
	good_args("sandbox_list", "{}");
	cr_assert(mcp_args_check(mcp_tool_find("sandbox_list"), NULL, (char[8]){0}, 8));
	good_args("sandbox_create", "{\"image\":\"host\",\"network\":{\"allow\":[]}}");
	good_args("sandbox_create", "{\"image\":null}");
	good_args("exec", "{\"id\":\"a\",\"cmd\":\"echo hi\"}");
	good_args("exec", "{\"id\":\"a\",\"cmd\":[\"echo\",\"hi\"],\"yield_ms\":0,\"timeout_ms\":5}");
	good_args("write_stdin", "{\"id\":\"a\",\"process_id\":3,\"data\":\"\"}");
	good_args("write_file", "{\"id\":\"a\",\"path\":\"p\",\"content\":\"a\\u0000b\"}");
	good_args("list_files", "{\"id\":\"a\",\"depth\":64}");

	bad_args("sandbox_list", "{\"x\":1}", "unknown argument \"x\" (it takes none)");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":\"x\",\"shell\":1}",
		 "unknown argument \"shell\" (it takes id, cmd, cwd, timeout_ms, yield_ms)");
	bad_args("exec", "{\"cmd\":\"x\"}", "missing argument \"id\"");
	bad_args("exec", "{\"id\":null,\"cmd\":\"x\"}", "missing argument \"id\"");
	bad_args("exec", "{\"id\":\"a\"}", "missing argument \"cmd\"");
	bad_args("exec", "{\"id\":\"\",\"cmd\":\"x\"}", "argument \"id\" must be");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":\"\"}", "argument \"cmd\"");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":[]}", "argument \"cmd\"");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":[\"ls\",1]}", "argument \"cmd\"");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":\"x\",\"cwd\":\"a\\u0000b\"}", "argument \"cwd\"");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":\"x\",\"timeout_ms\":-1}",
		 "argument \"timeout_ms\" must be an integer from 0 to");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":\"x\",\"yield_ms\":\"5\"}", "argument \"yield_ms\"");
	bad_args("exec", "{\"id\":\"a\",\"cmd\":\"x\",\"yield_ms\":1.5}", "argument \"yield_ms\"");
	bad_args("write_stdin", "{\"id\":\"a\",\"process_id\":0,\"data\":\"\"}",
		 "argument \"process_id\" must be an integer from 1");
	bad_args("write_stdin", "{\"id\":\"a\",\"process_id\":1,\"data\":5}",
		 "argument \"data\" must be a string");
	bad_args("list_files", "{\"id\":\"a\",\"depth\":0}", "argument \"depth\"");
	bad_args("list_files", "{\"id\":\"a\",\"depth\":65}", "argument \"depth\"");
	bad_args("sandbox_create", "{\"manifest\":[]}", "argument \"manifest\" must be an object");
	bad_args("read_file", "[]", "arguments must be an object");
}
