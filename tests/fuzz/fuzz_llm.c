/* libFuzzer target: the LLM proxy's dialects (src/serve/llm_dialect.c),
 * which read what a sandbox POSTs (requests, conversation turns) and what
 * an upstream answers (JSON bodies, SSE streams). The first byte picks the
 * dialect and how the rest is cut into pieces; the rest is fed as:
 *  - a request (inspected, prepared, made a conversation body with itself
 *    as history when it is an array),
 *  - a complete answer,
 *  - a stream, in pieces of the chosen size.
 * Checks: an accepted request has a non-empty model; a prepared chat
 * stream asks for usage; a conversation body holds the history then the
 * turn's messages and none of route/dialect/turn_id; usage is -1 or
 * non-negative; the messages of an answer or a complete stream are an
 * array that dumps; a stream is never complete after a refusal. Seeds:
 * tests/fuzz/corpus/fuzz_llm (each starts with its selector byte). */
#include "serve/llm_dialect.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_usage(const struct llm_usage *u)
{
	if (u->in < -1 || u->out < -1)
		abort();
}

static void check_msgs(json_t *m)
{
	if (!json_is_array(m))
		abort();
	char *s = json_dumps(m, JSON_COMPACT);
	if (!s)
		abort();
	free(s);
}

static void request(enum llm_dialect d, const char *p, size_t n)
{
	json_t *j = json_loadb(p, n, 0, NULL);
	if (!j)
		return;
	struct llm_req_info info;
	struct core_err e = {0};
	if (llm_req_inspect(d, j, &info, &e) == 0) {
		if (!info.model[0])
			abort();
		json_t *c = json_deep_copy(j);
		llm_req_prepare(d, c);
		if (d == LLM_CHAT && info.stream &&
		    !json_is_true(json_object_get(json_object_get(c, "stream_options"),
						  "include_usage")))
			abort();
		json_decref(c);
	} else if (e.status != 400 || !e.msg[0]) {
		abort();
	}
	const char *f = d == LLM_RESPONSES ? "input" : "messages";
	json_t *hist = json_object_get(j, f);
	if (!json_is_array(hist))
		hist = NULL;
	json_t *b = llm_conv_body(d, j, hist, &e);
	if (b) {
		const json_t *nw = llm_conv_new(d, j);
		json_t *all = json_object_get(b, f);
		if (!nw || json_array_size(all) != json_array_size(hist) + json_array_size(nw) ||
		    json_object_get(b, "route") || json_object_get(b, "dialect") ||
		    json_object_get(b, "turn_id"))
			abort();
		json_decref(b);
	} else if (!e.msg[0]) {
		abort();
	}
	json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	enum llm_dialect d = (enum llm_dialect)(data[0] % 3);
	size_t piece = (size_t)(data[0] >> 2) + 1; /* 1..64 */
	const char *p = (const char *)data + 1;
	size_t n = size - 1;
	/* exact heap copies: a read past the end trips ASan */
	char *copy = malloc(n ? n : 1);
	if (!copy)
		return 0;
	memcpy(copy, p, n);

	request(d, copy, n);

	struct llm_usage u;
	json_t *m = NULL;
	if (llm_answer_parse(d, copy, n, &u, &m) == 0)
		check_msgs(m);
	else if (m)
		abort();
	check_usage(&u);
	json_decref(m);

	struct llm_stream *s = llm_stream_new(d);
	if (s) {
		bool refused = false;
		for (size_t off = 0; off < n; off += piece) {
			size_t k = n - off < piece ? n - off : piece;
			if (llm_stream_feed(s, copy + off, k) < 0)
				refused = true;
			if (refused && llm_stream_complete(s))
				abort();
		}
		llm_stream_usage(s, &u);
		check_usage(&u);
		json_t *sm = llm_stream_msgs(s);
		if (sm && !llm_stream_complete(s))
			abort(); /* messages only of a whole answer */
		if (sm)
			check_msgs(sm);
		json_decref(sm);
		llm_stream_free(s);
	}
	free(copy);
	return 0;
}
