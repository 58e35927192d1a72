/* Unit tests for the LLM proxy's dialects (src/serve/llm_dialect.c):
 * requests of OpenAI Chat Completions, OpenAI Responses and Anthropic
 * Messages as the SDKs send them, answers and SSE streams as the APIs
 * send them (each stream also fed split at every byte offset), tool
 * calls, missing usage and malformed input. Inputs are exact heap copies,
 * so a read past the end trips ASan. */
#include <criterion/criterion.h>

#include "serve/llm_dialect.h"

#include <stdlib.h>
#include <string.h>

static json_t *J(const char *s)
{
	json_error_t err;
	json_t *j = json_loads(s, JSON_ALLOW_NUL, &err);
	cr_assert_not_null(j, "bad test JSON: %s: %s", err.text, s);
	return j;
}

/* ---- paths and requests ----------------------------------------------------------- */

Test(llm_dialect, paths)
{
	cr_assert_eq(llm_dialect_of_path("/v1/chat/completions"), LLM_CHAT);
	cr_assert_eq(llm_dialect_of_path("/v1/responses"), LLM_RESPONSES);
	cr_assert_eq(llm_dialect_of_path("/v1/messages"), LLM_MESSAGES);
	cr_assert_eq(llm_dialect_of_path("/v1/messages/"), -1);
	cr_assert_eq(llm_dialect_of_path("/v1/models"), -1);
	cr_assert_eq(llm_dialect_of_path(""), -1);
	cr_assert_eq(llm_dialect_of_path(NULL), -1);
	for (int d = LLM_CHAT; d <= LLM_MESSAGES; d++)
		cr_assert_eq(llm_dialect_of_path(llm_dialect_path(d)), d);
}

static void inspect_refused(enum llm_dialect d, const char *body, const char *needle)
{
	json_t *j = J(body);
	struct llm_req_info info;
	struct core_err e = {0};
	cr_assert_eq(llm_req_inspect(d, j, &info, &e), -1, "accepted: %s", body);
	cr_assert_eq(e.status, 400, "%s: status %d", body, e.status);
	cr_assert_str_eq(e.code, "invalid_request");
	cr_assert(strstr(e.msg, needle), "%s: \"%s\" lacks \"%s\"", body, e.msg, needle);
	json_decref(j);
}

Test(llm_dialect, inspect)
{
	struct llm_req_info info;
	struct core_err e = {0};
	json_t *j = J("{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
		      "\"stream\":true}");
	cr_assert_eq(llm_req_inspect(LLM_CHAT, j, &info, &e), 0, "%s", e.msg);
	cr_assert_str_eq(info.model, "gpt-4o-mini");
	cr_assert(info.stream);
	json_decref(j);

	j = J("{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":1024,\"messages\":[]}");
	cr_assert_eq(llm_req_inspect(LLM_MESSAGES, j, &info, &e), 0, "%s", e.msg);
	cr_assert_str_eq(info.model, "claude-sonnet-4-5");
	cr_assert_not(info.stream);
	json_decref(j);

	/* Responses takes a string input too (client.responses.create({input: "..."})) */
	j = J("{\"model\":\"gpt-4.1\",\"input\":\"Tell me a joke\",\"stream\":null}");
	cr_assert_eq(llm_req_inspect(LLM_RESPONSES, j, &info, &e), 0, "%s", e.msg);
	cr_assert_not(info.stream);
	json_decref(j);

	inspect_refused(LLM_CHAT, "[1]", "object");
	inspect_refused(LLM_CHAT, "{\"messages\":[]}", "model");
	inspect_refused(LLM_CHAT, "{\"model\":\"\",\"messages\":[]}", "model");
	inspect_refused(LLM_CHAT, "{\"model\":7,\"messages\":[]}", "model");
	inspect_refused(LLM_CHAT, "{\"model\":\"m\\u0000x\",\"messages\":[]}", "model");
	inspect_refused(LLM_CHAT, "{\"model\":\"m\"}", "messages");
	inspect_refused(LLM_CHAT, "{\"model\":\"m\",\"messages\":\"hi\"}", "messages");
	inspect_refused(LLM_MESSAGES, "{\"model\":\"m\",\"messages\":{}}", "messages");
	inspect_refused(LLM_RESPONSES, "{\"model\":\"m\",\"messages\":[]}", "input");
	inspect_refused(LLM_RESPONSES, "{\"model\":\"m\",\"input\":3}", "input");
	inspect_refused(LLM_CHAT, "{\"model\":\"m\",\"messages\":[],\"stream\":\"yes\"}", "stream");
	char big[400];
	memset(big, 'a', sizeof big);
	big[sizeof big - 1] = '\0';
	char body[512];
	snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":[]}", big);
	inspect_refused(LLM_CHAT, body, "model");
	cr_assert_eq(llm_req_inspect(LLM_CHAT, NULL, &info, &e), -1);
}

Test(llm_dialect, prepare)
{
	json_t *j = J("{\"model\":\"m\",\"messages\":[],\"stream\":true,"
		      "\"stream_options\":{\"include_obfuscation\":false}}");
	llm_req_prepare(LLM_CHAT, j);
	json_t *so = json_object_get(j, "stream_options");
	cr_assert(json_is_true(json_object_get(so, "include_usage")));
	cr_assert(json_is_false(json_object_get(so, "include_obfuscation")), "kept");
	json_decref(j);

	j = J("{\"model\":\"m\",\"messages\":[],\"stream\":true,\"stream_options\":"
	      "{\"include_usage\":false}}");
	llm_req_prepare(LLM_CHAT, j);
	cr_assert(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
	json_decref(j);

	j = J("{\"model\":\"m\",\"messages\":[],\"stream\":true,\"stream_options\":null}");
	llm_req_prepare(LLM_CHAT, j);
	cr_assert(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
	json_decref(j);

	/* not a stream, or not chat: unchanged */
	const char *same[] = {"{\"model\":\"m\",\"messages\":[]}",
			      "{\"model\":\"m\",\"messages\":[],\"stream\":false}"};
	for (size_t i = 0; i < 2; i++) {
		j = J(same[i]);
		json_t *before = json_deep_copy(j);
		llm_req_prepare(LLM_CHAT, j);
		cr_assert(json_equal(j, before), "%s changed", same[i]);
		json_decref(before);
		json_decref(j);
	}
	j = J("{\"model\":\"m\",\"messages\":[],\"stream\":true}");
	llm_req_prepare(LLM_MESSAGES, j);
	cr_assert_null(json_object_get(j, "stream_options"));
	llm_req_prepare(LLM_RESPONSES, j);
	cr_assert_null(json_object_get(j, "stream_options"));
	json_decref(j);
	llm_req_prepare(LLM_CHAT, NULL); /* no crash */
}

/* ---- complete answers ------------------------------------------------------------- */

static int parse(enum llm_dialect d, const char *s, struct llm_usage *u, json_t **msgs)
{
	size_t n = strlen(s);
	char *copy = malloc(n ? n : 1);
	cr_assert_not_null(copy);
	memcpy(copy, s, n);
	int rc = llm_answer_parse(d, copy, n, u, msgs);
	free(copy);
	return rc;
}

static const char CHAT_ANSWER[] =
	"{\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion\","
	"\"created\":1741569952,\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[{\"index\":0,"
	"\"message\":{\"role\":\"assistant\",\"content\":\"Hello! How can I assist you today?\","
	"\"refusal\":null,\"annotations\":[]},\"logprobs\":null,\"finish_reason\":\"stop\"}],"
	"\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":10,\"total_tokens\":29,"
	"\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0}},"
	"\"service_tier\":\"default\"}";

Test(llm_dialect, answer_chat)
{
	struct llm_usage u;
	json_t *m;
	cr_assert_eq(parse(LLM_CHAT, CHAT_ANSWER, &u, &m), 0);
	cr_assert_eq(u.in, 19);
	cr_assert_eq(u.out, 10);
	json_t *want = J("[{\"role\":\"assistant\",\"content\":\"Hello! How can I assist you today?\"}]");
	cr_assert(json_equal(m, want), "%s", json_dumps(m, 0));
	json_decref(want);
	json_decref(m);

	/* a tool call: content null, tool_calls kept */
	cr_assert_eq(parse(LLM_CHAT,
			   "{\"id\":\"c\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
			   "\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{"
			   "\"id\":\"call_abc\",\"type\":\"function\",\"function\":{\"name\":"
			   "\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}}]},"
			   "\"finish_reason\":\"tool_calls\"}]}",
			   &u, &m),
		     0);
	cr_assert_eq(u.in, -1, "no usage: unknown");
	cr_assert_eq(u.out, -1);
	json_t *msg = json_array_get(m, 0);
	cr_assert(json_is_null(json_object_get(msg, "content")));
	cr_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0),
						 "function"),
				 "name")),
			 "get_weather");
	json_decref(m);

	/* an error body: not an answer, and its usage unknown */
	cr_assert_eq(parse(LLM_CHAT, "{\"error\":{\"message\":\"bad\",\"type\":\"invalid_request_error\"}}",
			   &u, &m),
		     -1);
	cr_assert_null(m);
	cr_assert_eq(u.in, -1);
	/* usage with no choices still counts */
	cr_assert_eq(parse(LLM_CHAT, "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,"
				     "\"completion_tokens\":-3}}",
			   &u, &m),
		     -1);
	cr_assert_eq(u.in, 5);
	cr_assert_eq(u.out, -1, "negative: unknown");
}

Test(llm_dialect, answer_responses)
{
	struct llm_usage u;
	json_t *m;
	const char *a =
		"{\"id\":\"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b\",\"object\":"
		"\"response\",\"created_at\":1741476542,\"status\":\"completed\",\"model\":"
		"\"gpt-4.1-2025-04-14\",\"output\":[{\"type\":\"function_call\",\"id\":\"fc_1\","
		"\"call_id\":\"call_1\",\"name\":\"ls\",\"arguments\":\"{}\",\"status\":\"completed\"},"
		"{\"type\":\"message\",\"id\":\"msg_67ccd2bf17f0\",\"status\":\"completed\",\"role\":"
		"\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"In a peaceful grove...\","
		"\"annotations\":[]}]}],\"usage\":{\"input_tokens\":36,\"input_tokens_details\":"
		"{\"cached_tokens\":0},\"output_tokens\":87,\"output_tokens_details\":"
		"{\"reasoning_tokens\":0},\"total_tokens\":123}}";
	cr_assert_eq(parse(LLM_RESPONSES, a, &u, &m), 0);
	cr_assert_eq(u.in, 36);
	cr_assert_eq(u.out, 87);
	cr_assert_eq(json_array_size(m), 2);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 0), "type")),
			 "function_call");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 1), "role")),
			 "assistant");
	json_decref(m);
	cr_assert_eq(parse(LLM_RESPONSES, "{\"output\":[1]}", &u, &m), -1);
	cr_assert_eq(parse(LLM_RESPONSES, "{\"output\":{}}", &u, &m), -1);
	/* chat's usage names are not Responses' */
	cr_assert_eq(parse(LLM_RESPONSES, "{\"output\":[],\"usage\":{\"prompt_tokens\":3}}", &u, &m), 0);
	cr_assert_eq(u.in, -1);
	json_decref(m);
}

Test(llm_dialect, answer_messages)
{
	struct llm_usage u;
	json_t *m;
	const char *a =
		"{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\","
		"\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[{\"type\":\"text\",\"text\":"
		"\"I'll check.\"},{\"type\":\"tool_use\",\"id\":\"toolu_01A09q90qw90lq917835lq9\","
		"\"name\":\"get_weather\",\"input\":{\"location\":\"San Francisco, CA\"}}],"
		"\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":2095,"
		"\"cache_creation_input_tokens\":5,\"cache_read_input_tokens\":100,\"output_tokens\":503}}";
	cr_assert_eq(parse(LLM_MESSAGES, a, &u, &m), 0);
	cr_assert_eq(u.in, 2200, "input plus cached input");
	cr_assert_eq(u.out, 503);
	cr_assert_eq(json_array_size(m), 1);
	json_t *msg = json_array_get(m, 0);
	cr_assert_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
	cr_assert_eq(json_array_size(json_object_get(msg, "content")), 2);
	cr_assert_null(json_object_get(msg, "usage"), "only role and content");
	json_decref(m);
	cr_assert_eq(parse(LLM_MESSAGES,
			   "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":"
			   "\"Overloaded\"}}",
			   &u, &m),
		     -1);
	cr_assert_eq(parse(LLM_MESSAGES, "{\"type\":\"message\",\"content\":\"x\"}", &u, &m), -1);
}

Test(llm_dialect, answer_malformed)
{
	const char *bad[] = {"", "{", "null", "[]", "\"x\"", "{\"a\":1,\"a\":2}",
			     "{\"choices\":[{\"message\":{\"content\":5}}]}",
			     "{\"choices\":[{\"message\":{\"tool_calls\":{}}}]}",
			     "{\"choices\":\"x\"}", "{\"choices\":[{\"message\":[]}]}"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		for (int d = LLM_CHAT; d <= LLM_MESSAGES; d++) {
			struct llm_usage u;
			json_t *m = (json_t *)1;
			cr_assert_eq(parse(d, bad[i], &u, &m), -1, "%d accepted %s", d, bad[i]);
			cr_assert_null(m);
		}
	}
	struct llm_usage u;
	json_t *m;
	cr_assert_eq(llm_answer_parse(LLM_CHAT, NULL, 0, &u, &m), -1);
	/* a NUL inside the body ends nothing early: the bytes are what counts */
	cr_assert_eq(llm_answer_parse(LLM_CHAT, "{}\0{}", 5, &u, &m), -1);
}

/* ---- streams ---------------------------------------------------------------------- */

/* Feed s whole, then split at every offset (two pieces) and byte by
 * byte; each run must agree with the first. */
struct fed {
	int rc;
	bool complete;
	struct llm_usage u;
	json_t *msgs;
};

static struct fed feed_pieces(enum llm_dialect d, const char *s, size_t n, size_t cut, bool bytes)
{
	struct llm_stream *st = llm_stream_new(d);
	cr_assert_not_null(st);
	struct fed f = {0};
	size_t off = 0;
	while (off < n && f.rc == 0) {
		size_t k = bytes ? 1 : (off == 0 && cut && cut < n ? cut : n - off);
		char *copy = malloc(k);
		cr_assert_not_null(copy);
		memcpy(copy, s + off, k);
		f.rc = llm_stream_feed(st, copy, k);
		free(copy);
		off += k;
	}
	f.complete = llm_stream_complete(st);
	llm_stream_usage(st, &f.u);
	f.msgs = llm_stream_msgs(st);
	llm_stream_free(st);
	return f;
}

static struct fed stream_all(enum llm_dialect d, const char *s)
{
	size_t n = strlen(s);
	struct fed whole = feed_pieces(d, s, n, 0, false);
	for (size_t cut = 1; cut <= n; cut++) {
		struct fed f = feed_pieces(d, s, n, cut, cut == n);
		cr_assert_eq(f.rc, whole.rc, "cut at %zu", cut);
		cr_assert_eq(f.complete, whole.complete, "cut at %zu", cut);
		cr_assert_eq(f.u.in, whole.u.in, "cut at %zu", cut);
		cr_assert_eq(f.u.out, whole.u.out, "cut at %zu", cut);
		cr_assert(json_equal(f.msgs, whole.msgs) || (!f.msgs && !whole.msgs), "cut at %zu",
			  cut);
		json_decref(f.msgs);
	}
	return whole;
}

/* \n line ends -> \r\n */
static char *crlf(const char *s)
{
	size_t n = strlen(s), k = 0;
	char *o = malloc(2 * n + 1);
	cr_assert_not_null(o);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\n')
			o[k++] = '\r';
		o[k++] = s[i];
	}
	o[k] = '\0';
	return o;
}

static const char CHAT_STREAM[] =
	": keep-alive\n\n"
	"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,"
	"\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
	"\"content\":\"\",\"refusal\":null},\"finish_reason\":null}],\"usage\":null}\n\n"
	"data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},"
	"\"finish_reason\":null}],\"usage\":null}\n\n"
	"data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"},"
	"\"finish_reason\":null}],\"usage\":null}\n\n"
	"data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
	"\"stop\"}],\"usage\":null}\n\n"
	"data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,"
	"\"completion_tokens\":3,\"total_tokens\":15}}\n\n"
	"data: [DONE]\n\n";

Test(llm_dialect, stream_chat_text)
{
	struct fed f = stream_all(LLM_CHAT, CHAT_STREAM);
	cr_assert_eq(f.rc, 0);
	cr_assert(f.complete);
	cr_assert_eq(f.u.in, 12);
	cr_assert_eq(f.u.out, 3);
	json_t *want = J("[{\"role\":\"assistant\",\"content\":\"Hello \\u00e9\"}]");
	cr_assert(json_equal(f.msgs, want), "%s", json_dumps(f.msgs, 0));
	json_decref(f.msgs);

	char *c = crlf(CHAT_STREAM);
	struct fed g = stream_all(LLM_CHAT, c);
	free(c);
	cr_assert(g.complete);
	cr_assert(json_equal(g.msgs, want), "CRLF: %s", json_dumps(g.msgs, 0));
	json_decref(g.msgs);
	json_decref(want);
}

Test(llm_dialect, stream_chat_tool_calls)
{
	const char *s =
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,"
		"\"tool_calls\":[{\"index\":0,\"id\":\"call_DdmO9pD3xa9XTPNJ32zg2hcA\",\"type\":"
		"\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
		"{\"arguments\":\"{\\\"loc\"}}]}}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
		"{\"arguments\":\"ation\\\":\\\"Paris\\\"}\"}}]}}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\","
		"\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]}}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
		"data: [DONE]\n\n";
	struct fed f = stream_all(LLM_CHAT, s);
	cr_assert(f.complete);
	cr_assert_eq(f.u.in, -1, "no usage chunk: unknown");
	cr_assert_eq(f.u.out, -1);
	json_t *want = J("[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
			 "{\"id\":\"call_DdmO9pD3xa9XTPNJ32zg2hcA\",\"type\":\"function\",\"function\":"
			 "{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}},"
			 "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"ls\","
			 "\"arguments\":\"{}\"}}]}]");
	cr_assert(json_equal(f.msgs, want), "%s", json_dumps(f.msgs, 0));
	json_decref(want);
	json_decref(f.msgs);
}

Test(llm_dialect, stream_chat_incomplete)
{
	/* cut before [DONE]: no messages */
	const char *s = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
	struct fed f = stream_all(LLM_CHAT, s);
	cr_assert_eq(f.rc, 0);
	cr_assert_not(f.complete);
	cr_assert_null(f.msgs);
	/* [DONE] without its blank line is not dispatched yet */
	f = stream_all(LLM_CHAT, "data: [DONE]\n");
	cr_assert_not(f.complete);
	/* an error event: the answer is not whole even with [DONE] */
	f = stream_all(LLM_CHAT, "data: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: [DONE]\n\n");
	cr_assert_not(f.complete);
	cr_assert_null(f.msgs);
	/* not JSON */
	f = stream_all(LLM_CHAT, "data: hello\n\n");
	cr_assert_eq(f.rc, -1);
	cr_assert_not(f.complete);
	/* a tool call index out of range */
	f = stream_all(LLM_CHAT, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":100000}]}}]}"
				 "\n\ndata: [DONE]\n\n");
	cr_assert_eq(f.rc, -1);
	cr_assert_not(f.complete);
}

Test(llm_dialect, stream_sse_framing)
{
	/* multi-line data joined with \n; event:, id:, retry:, unknown fields and
	 * comments ignored; "data:x" without the space; CR alone ends a line */
	const char *s = "event: chunk\rid: 1\nretry: 10\nfoo\n: c\n"
			"data:{\"choices\":[{\"delta\":\n"
			"data: {\"content\":\"A\"}}]}\n\n"
			"data: [DONE]\r\n\r\n";
	struct fed f = stream_all(LLM_CHAT, s);
	cr_assert_eq(f.rc, 0);
	cr_assert(f.complete);
	json_t *want = J("[{\"role\":\"assistant\",\"content\":\"A\"}]");
	cr_assert(json_equal(f.msgs, want), "%s", json_dumps(f.msgs, 0));
	json_decref(want);
	json_decref(f.msgs);
	/* events after the end are ignored */
	f = stream_all(LLM_CHAT, "data: [DONE]\n\ndata: junk\n\n");
	cr_assert_eq(f.rc, 0);
	cr_assert(f.complete);
	json_decref(f.msgs);
}

Test(llm_dialect, stream_event_bound)
{
	struct llm_stream *st = llm_stream_new(LLM_CHAT);
	cr_assert_not_null(st);
	size_t n = 1 << 20;
	char *chunk = malloc(n);
	cr_assert_not_null(chunk);
	memset(chunk, 'x', n);
	cr_assert_eq(llm_stream_feed(st, "data: ", 6), 0);
	int rc = 0;
	for (int i = 0; i < 5 && rc == 0; i++)
		rc = llm_stream_feed(st, chunk, n);
	cr_assert_eq(rc, -1, "an event over 4 MiB is refused");
	cr_assert_eq(llm_stream_feed(st, "\n\ndata: [DONE]\n\n", 16), -1, "and it stays refused");
	cr_assert_not(llm_stream_complete(st));
	llm_stream_free(st);

	/* many data lines, each short: the event is bounded all the same */
	st = llm_stream_new(LLM_CHAT);
	cr_assert_not_null(st);
	for (size_t i = 0; i + 6 <= n; i += 6)
		memcpy(chunk + i, "data:\n", 6);
	rc = 0;
	for (int i = 0; i < 6 && rc == 0; i++)
		rc = llm_stream_feed(st, chunk, n - n % 6);
	cr_assert_eq(rc, -1);
	llm_stream_free(st);

	/* just under the bound is fine (a 3 MiB event) */
	st = llm_stream_new(LLM_CHAT);
	cr_assert_not_null(st);
	char *big = malloc(3 << 20);
	cr_assert_not_null(big);
	size_t k = (size_t)snprintf(big, 64, "data: {\"choices\":[{\"delta\":{\"content\":\"");
	memset(big + k, 'y', (3u << 20) - 100);
	k += (3u << 20) - 100;
	k += (size_t)snprintf(big + k, 64, "\"}}]}\n\ndata: [DONE]\n\n");
	cr_assert_eq(llm_stream_feed(st, big, k), 0);
	cr_assert(llm_stream_complete(st));
	json_t *m = llm_stream_msgs(st);
	cr_assert_eq(json_string_length(json_object_get(json_array_get(m, 0), "content")),
		     (3u << 20) - 100);
	json_decref(m);
	llm_stream_free(st);
	free(big);
	free(chunk);
}

static const char RESPONSES_STREAM[] =
	"event: response.created\n"
	"data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\","
	"\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n"
	"event: response.output_item.added\n"
	"data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_1\","
	"\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n"
	"event: response.output_text.delta\n"
	"data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,"
	"\"content_index\":0,\"delta\":\"Hi\"}\n\n"
	"event: response.completed\n"
	"data: {\"type\":\"response.completed\",\"sequence_number\":9,\"response\":{\"id\":\"resp_1\","
	"\"object\":\"response\",\"status\":\"completed\",\"output\":[{\"id\":\"msg_1\",\"type\":"
	"\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":"
	"\"output_text\",\"text\":\"Hi there\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":"
	"37,\"output_tokens\":11,\"total_tokens\":48}}}\n\n";

Test(llm_dialect, stream_responses)
{
	struct fed f = stream_all(LLM_RESPONSES, RESPONSES_STREAM);
	cr_assert_eq(f.rc, 0);
	cr_assert(f.complete);
	cr_assert_eq(f.u.in, 37);
	cr_assert_eq(f.u.out, 11);
	cr_assert_eq(json_array_size(f.msgs), 1);
	cr_assert_str_eq(json_string_value(json_object_get(
				 json_array_get(json_object_get(json_array_get(f.msgs, 0), "content"), 0),
				 "text")),
			 "Hi there", "response.completed's output is authoritative");
	json_decref(f.msgs);

	/* failed: usage counted, not complete */
	f = stream_all(LLM_RESPONSES,
		       "data: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\","
		       "\"output\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n");
	cr_assert_not(f.complete);
	cr_assert_eq(f.u.in, 5);
	cr_assert_null(f.msgs);
	f = stream_all(LLM_RESPONSES, "data: {\"type\":\"response.completed\",\"response\":{}}\n\n");
	cr_assert_eq(f.rc, -1);
	cr_assert_not(f.complete);
	f = stream_all(LLM_RESPONSES,
		       "data: {\"type\":\"response.completed\",\"response\":{\"output\":[\"x\"]}}\n\n");
	cr_assert_eq(f.rc, -1);
}

static const char MESSAGES_STREAM[] =
	"event: message_start\n"
	"data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\","
	"\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"stop_sequence\":"
	"null,\"usage\":{\"input_tokens\":472,\"output_tokens\":2},\"content\":[],\"stop_reason\":"
	"null}}\n\n"
	"event: content_block_start\n"
	"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\","
	"\"text\":\"\"}}\n\n"
	"event: ping\ndata: {\"type\": \"ping\"}\n\n"
	"event: content_block_delta\n"
	"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
	"\"text\":\"Okay, let's check\"}}\n\n"
	"event: content_block_delta\n"
	"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
	"\"text\":\" the weather.\"}}\n\n"
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
	"event: content_block_start\n"
	"data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\","
	"\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\n\n"
	"event: content_block_delta\n"
	"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
	"\"partial_json\":\"\"}}\n\n"
	"event: content_block_delta\n"
	"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
	"\"partial_json\":\"{\\\"location\\\": \\\"San Fra\"}}\n\n"
	"event: content_block_delta\n"
	"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
	"\"partial_json\":\"ncisco, CA\\\"}\"}}\n\n"
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
	"event: message_delta\n"
	"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":"
	"null},\"usage\":{\"output_tokens\":89}}\n\n"
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

Test(llm_dialect, stream_messages)
{
	struct fed f = stream_all(LLM_MESSAGES, MESSAGES_STREAM);
	cr_assert_eq(f.rc, 0);
	cr_assert(f.complete);
	cr_assert_eq(f.u.in, 472);
	cr_assert_eq(f.u.out, 89, "message_delta's total");
	json_t *want = J("[{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
			 "\"Okay, let's check the weather.\"},{\"type\":\"tool_use\",\"id\":"
			 "\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":"
			 "{\"location\":\"San Francisco, CA\"}}]}]");
	cr_assert(json_equal(f.msgs, want), "%s", json_dumps(f.msgs, 0));
	json_decref(want);
	json_decref(f.msgs);
	char *c = crlf(MESSAGES_STREAM);
	f = stream_all(LLM_MESSAGES, c);
	free(c);
	cr_assert(f.complete);
	json_decref(f.msgs);
}

Test(llm_dialect, stream_messages_thinking)
{
	const char *s =
		"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,"
		"\"cache_read_input_tokens\":4,\"output_tokens\":1}}}\n\n"
		"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
		"\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
		"\"thinking_delta\",\"thinking\":\"Let me think\"}}\n\n"
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
		"\"signature_delta\",\"signature\":\"EqQBCgIYAh\"}}\n\n"
		"data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
		"data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":"
		"\"tool_use\",\"id\":\"t\",\"name\":\"noargs\",\"input\":{}}}\n\n"
		"data: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
		"data: {\"type\":\"message_stop\"}\n\n";
	struct fed f = stream_all(LLM_MESSAGES, s);
	cr_assert(f.complete);
	cr_assert_eq(f.u.in, 14);
	cr_assert_eq(f.u.out, 1, "no message_delta: message_start's count");
	json_t *want = J("[{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":"
			 "\"Let me think\",\"signature\":\"EqQBCgIYAh\"},{\"type\":\"tool_use\","
			 "\"id\":\"t\",\"name\":\"noargs\",\"input\":{}}]}]");
	cr_assert(json_equal(f.msgs, want), "%s", json_dumps(f.msgs, 0));
	json_decref(want);
	json_decref(f.msgs);
}

Test(llm_dialect, stream_messages_malformed)
{
	static const char start[] = "data: {\"type\":\"content_block_start\",\"index\":0,"
				    "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":"
				    "\"n\",\"input\":{}}}\n\n";
	char buf[1024];
	/* the tool input's pieces do not make an object */
	snprintf(buf, sizeof buf,
		 "%sdata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
		 "\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}\n\n"
		 "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
		 "data: {\"type\":\"message_stop\"}\n\n",
		 start);
	struct fed f = stream_all(LLM_MESSAGES, buf);
	cr_assert_eq(f.rc, -1);
	cr_assert_not(f.complete);
	/* a block never stopped */
	snprintf(buf, sizeof buf, "%sdata: {\"type\":\"message_stop\"}\n\n", start);
	f = stream_all(LLM_MESSAGES, buf);
	cr_assert_not(f.complete);
	/* a delta for a block never started; a block started twice; text into a tool */
	const char *bad[] = {
		"data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":"
		"\"text_delta\",\"text\":\"x\"}}\n\n",
		"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
		"\"text\",\"text\":\"\"}}\n\ndata: {\"type\":\"content_block_start\",\"index\":0,"
		"\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
		"data: {\"type\":\"content_block_start\",\"index\":-1,\"content_block\":{\"type\":"
		"\"text\"}}\n\n",
		"data: {\"type\":\"content_block_stop\",\"index\":\"0\"}\n\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		f = stream_all(LLM_MESSAGES, bad[i]);
		cr_assert_eq(f.rc, -1, "accepted: %s", bad[i]);
	}
	snprintf(buf, sizeof buf,
		 "%sdata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
		 "\"text_delta\",\"text\":\"x\"}}\n\n",
		 start);
	f = stream_all(LLM_MESSAGES, buf);
	cr_assert_eq(f.rc, -1);
	/* an error event: not complete, nothing to store */
	f = stream_all(LLM_MESSAGES, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
				     "\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
				     "data: {\"type\":\"message_stop\"}\n\n");
	cr_assert_eq(f.rc, 0);
	cr_assert_not(f.complete);
	cr_assert_null(f.msgs);
	/* NULL stream */
	cr_assert_eq(llm_stream_feed(NULL, "x", 1), -1);
	cr_assert_not(llm_stream_complete(NULL));
	cr_assert_null(llm_stream_msgs(NULL));
	llm_stream_free(NULL);
}

/* ---- conversation mode ------------------------------------------------------------ */

Test(llm_dialect, conv_body)
{
	json_t *hist = J("[{\"role\":\"user\",\"content\":\"one\"},{\"role\":\"assistant\","
			 "\"content\":\"two\"}]");
	json_t *turn = J("{\"route\":\"oa\",\"dialect\":\"chat\",\"turn_id\":\"t1\",\"model\":\"m\","
			 "\"stream\":true,\"tools\":[{\"type\":\"function\"}],\"messages\":"
			 "[{\"role\":\"user\",\"content\":\"three\"}]}");
	json_t *before = json_deep_copy(turn);
	struct core_err e = {0};
	json_t *b = llm_conv_body(LLM_CHAT, turn, hist, &e);
	cr_assert_not_null(b, "%s", e.msg);
	json_t *want = J("{\"model\":\"m\",\"stream\":true,\"tools\":[{\"type\":\"function\"}],"
			 "\"messages\":[{\"role\":\"user\",\"content\":\"one\"},{\"role\":"
			 "\"assistant\",\"content\":\"two\"},{\"role\":\"user\",\"content\":"
			 "\"three\"}]}");
	cr_assert(json_equal(b, want), "%s", json_dumps(b, 0));
	cr_assert(json_equal(turn, before), "the turn is borrowed, not changed");
	cr_assert(json_equal(llm_conv_new(LLM_CHAT, turn), json_object_get(before, "messages")));
	json_decref(want);
	json_decref(b);

	/* Responses: "input"; no history */
	json_t *rt = J("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"x\"}],"
		       "\"turn_id\":\"t\"}");
	b = llm_conv_body(LLM_RESPONSES, rt, NULL, &e);
	cr_assert_not_null(b, "%s", e.msg);
	cr_assert_eq(json_array_size(json_object_get(b, "input")), 1);
	cr_assert_null(json_object_get(b, "turn_id"));
	json_decref(b);
	json_decref(rt);

	const char *bad[][2] = {
		{"{\"model\":\"m\"}", "messages"},
		{"{\"messages\":[]}", "model"},
		{"{\"model\":\"m\",\"messages\":[1]}", "messages[0]"},
		{"{\"model\":\"m\",\"messages\":[{},\"x\"]}", "messages[1]"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *t = J(bad[i][0]);
		cr_assert_null(llm_conv_body(LLM_MESSAGES, t, hist, &e), "%s", bad[i][0]);
		cr_assert_eq(e.status, 400);
		cr_assert(strstr(e.msg, bad[i][1]), "%s: %s", bad[i][0], e.msg);
		json_decref(t);
	}
	json_t *t = J("{\"model\":\"m\",\"input\":\"a string\"}");
	cr_assert_null(llm_conv_body(LLM_RESPONSES, t, hist, &e));
	cr_assert(strstr(e.msg, "input"), "%s", e.msg);
	cr_assert_null(llm_conv_new(LLM_RESPONSES, t));
	json_decref(t);
	json_decref(before);
	json_decref(turn);
	json_decref(hist);
}

/* ---- the conversation store (src/serve/conv.c) on a database of its own --------- */

#include "serve/conv.h"
#include "serve/store.h"

#include <stdio.h>
#include <unistd.h>

static char dbdir[64];

static void db_open(void)
{
	snprintf(dbdir, sizeof dbdir, "/tmp/moat-conv-XXXXXX");
	cr_assert_not_null(mkdtemp(dbdir));
	struct moat_err e = {0};
	cr_assert_eq(store_open(dbdir, &e), 0, "%s", e.msg);
	cr_assert_eq(conv_init(&e), 0, "%s", e.msg);
	cr_assert_eq(conv_init(&e), 0, "again: %s", e.msg);
}

static void db_close(void)
{
	store_close();
	char p[128];
	const char *const files[] = {"moat.db", "moat.db-wal", "moat.db-shm"};
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof p, "%s/%s", dbdir, files[i]);
		unlink(p);
	}
	rmdir(dbdir);
}

TestSuite(conv, .init = db_open, .fini = db_close);

Test(conv, turns_history_retry)
{
	struct moat_err e = {0};
	json_t *h = conv_history("ses_a");
	cr_assert_eq(json_array_size(h), 0);
	json_decref(h);
	json_t *n1 = J("[{\"role\":\"user\",\"content\":\"one\"}]");
	json_t *a1 = J("[{\"role\":\"assistant\",\"content\":\"two\"}]");
	struct llm_usage u = {.in = 5, .out = 2};
	const char ans[] = "{\"choices\":[{\"message\":{\"content\":\"two\"}}]}";
	cr_assert_eq(conv_turn_add("ses_a", "t1", "oa", LLM_CHAT, n1, a1, ans, sizeof ans - 1, &u,
				   &e),
		     0, "%s", e.msg);
	/* the same turn_id again: refused, and nothing of it stored */
	cr_assert_eq(conv_turn_add("ses_a", "t1", "oa", LLM_CHAT, n1, a1, ans, sizeof ans - 1, &u,
				   &e),
		     -1);
	cr_assert(strstr(e.msg, "t1"), "%s", e.msg);
	/* a message that is not an object: the whole turn rolls back */
	json_t *bad = J("[{\"role\":\"user\",\"content\":\"x\"},7]");
	cr_assert_eq(conv_turn_add("ses_a", "t2", "oa", LLM_CHAT, bad, a1, "", 0, &u, &e), -1);
	cr_assert_null(conv_turn_find("ses_a", "t2"));
	/* turns without turn_id are never taken for each other */
	cr_assert_eq(conv_turn_add("ses_a", NULL, "oa", LLM_CHAT, n1, a1, ans, 3, NULL, &e), 0,
		     "%s", e.msg);
	cr_assert_eq(conv_turn_add("ses_a", NULL, "oa", LLM_CHAT, n1, a1, ans, 3, NULL, &e), 0,
		     "%s", e.msg);
	h = conv_history("ses_a");
	cr_assert_eq(json_array_size(h), 6, "3 turns of 2: %s", json_dumps(h, 0));
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(h, 0), "content")), "one");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(h, 1), "content")), "two");
	json_decref(h);
	json_t *f = conv_turn_find("ses_a", "t1");
	cr_assert_not_null(f);
	cr_assert_str_eq(json_string_value(json_object_get(f, "answer")), ans);
	cr_assert(json_equal(json_object_get(f, "msgs"), a1));
	json_decref(f);
	cr_assert_null(conv_turn_find("ses_b", "t1"), "another session's turn");
	json_t *cj = conv_json("ses_a");
	cr_assert_str_eq(json_string_value(json_object_get(cj, "session")), "ses_a");
	cr_assert_eq(json_integer_value(json_object_get(cj, "turns")), 3);
	cr_assert_eq(json_array_size(json_object_get(cj, "messages")), 6);
	json_decref(cj);
	cj = conv_json("ses_b");
	cr_assert_eq(json_integer_value(json_object_get(cj, "turns")), 0);
	cr_assert_eq(json_array_size(json_object_get(cj, "messages")), 0);
	json_decref(cj);

	cr_assert_eq(conv_record("ses_a", "oa", LLM_MESSAGES, "{}", 2, 200, "x", 1, false, &u, &e),
		     0, "%s", e.msg);
	conv_purge("ses_a");
	h = conv_history("ses_a");
	cr_assert_eq(json_array_size(h), 0);
	json_decref(h);
	cr_assert_null(conv_turn_find("ses_a", "t1"));
	json_decref(bad);
	json_decref(n1);
	json_decref(a1);
}

Test(llm_dialect, stream_chat_choices_and_lenient_index)
{
	/* n = 2: the second choice's deltas are not the conversation's; a tool
	 * call without index takes its position */
	const char *s =
		"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other\"}}]}\n\n"
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mine\"}}]}\n\n"
		"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\" x\"}},{\"index\":0,"
		"\"delta\":{\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\","
		"\"arguments\":\"{}\"}}]}}]}\n\n"
		"data: [DONE]\n\n";
	struct fed f = stream_all(LLM_CHAT, s);
	cr_assert(f.complete);
	json_t *want = J("[{\"role\":\"assistant\",\"content\":\"mine\",\"tool_calls\":[{\"id\":"
			 "\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
			 "\"{}\"}}]}]");
	cr_assert(json_equal(f.msgs, want), "%s", json_dumps(f.msgs, 0));
	json_decref(want);
	json_decref(f.msgs);
}

Test(llm_dialect, stream_responses_incomplete_is_whole)
{
	struct fed f = stream_all(
		LLM_RESPONSES,
		"data: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\","
		"\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"output\":[{\"type\":"
		"\"message\",\"role\":\"assistant\",\"content\":[]}],\"usage\":{\"input_tokens\":2,"
		"\"output_tokens\":16}}}\n\n");
	cr_assert(f.complete);
	cr_assert_eq(f.u.out, 16);
	cr_assert_eq(json_array_size(f.msgs), 1);
	json_decref(f.msgs);
	f = stream_all(LLM_RESPONSES, "data: {\"type\":\"error\",\"code\":\"server_error\"}\n\n"
				      "data: {\"type\":\"response.completed\",\"response\":{\"output\":"
				      "[]}}\n\n");
	cr_assert_not(f.complete, "an error event spoils the answer");
}
