/* Unit tests for what the fuzz targets (tests/fuzz) and their review found:
 * the frame decoder both sides share, and manifests whose git_repo sits
 * deeper than manifest_is_slow() looked. */
#include <criterion/criterion.h>

#include "proto/frame.h"
#include "serve/manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t mkframe(unsigned char *out, const char *js, const char *data, size_t dl)
{
	size_t jl = strlen(js);
	moat_frame_hdr(out, (uint32_t)jl, (uint32_t)dl);
	memcpy(out + MOAT_FRAME_HDR, js, jl);
	memcpy(out + MOAT_FRAME_HDR + jl, data, dl);
	return MOAT_FRAME_HDR + jl + dl;
}

Test(frame, whole_and_prefixes)
{
	unsigned char b[128];
	size_t n = mkframe(b, "{\"id\":7,\"op\":\"ping\"}", "xyz", 3);
	struct moat_frame f;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(moat_frame_next(b, i, &f), 0);
		cr_assert_eq(f.size, i < MOAT_FRAME_HDR ? MOAT_FRAME_HDR : n);
	}
	cr_assert_eq(moat_frame_next(b, n, &f), 1);
	cr_assert_eq(f.size, n);
	cr_assert_eq(f.id, 7);
	cr_assert_eq(f.data_len, 3);
	cr_assert(f.data == (const char *)b + n - 3);
	cr_assert(json_is_object(f.msg));
	json_decref(f.msg);
}

Test(frame, malformed_json_is_a_frame)
{
	unsigned char b[64];
	const char *bad[] = {"{\"id\":", "[1,2]", "42", "{\"id\":\"7\"}"};
	for (size_t i = 0; i < 4; i++) {
		size_t n = mkframe(b, bad[i], "", 0);
		struct moat_frame f;
		cr_assert_eq(moat_frame_next(b, n, &f), 1, "%s", bad[i]);
		cr_assert_eq(f.size, n);
		cr_assert_eq(f.id, 0);
		cr_assert(i == 3 ? f.msg != NULL : f.msg == NULL, "%s", bad[i]);
		json_decref(f.msg);
	}
}

Test(frame, bad_header)
{
	unsigned char h[MOAT_FRAME_HDR];
	struct moat_frame f;
	moat_frame_hdr(h, 0, 0);
	cr_assert_eq(moat_frame_next(h, sizeof h, &f), -1);
	moat_frame_hdr(h, MOAT_FRAME_JSON_MAX + 1, 0);
	cr_assert_eq(moat_frame_next(h, sizeof h, &f), -1);
	moat_frame_hdr(h, 2, MOAT_FRAME_DATA_MAX + 1);
	cr_assert_eq(moat_frame_next(h, sizeof h, &f), -1);
	moat_frame_hdr(h, MOAT_FRAME_JSON_MAX, MOAT_FRAME_DATA_MAX);
	cr_assert_eq(moat_frame_next(h, sizeof h, &f), 0);
	cr_assert_eq(f.size, MOAT_FRAME_HDR + (size_t)MOAT_FRAME_JSON_MAX + MOAT_FRAME_DATA_MAX);
}

/* A git_repo under 70 directories: before, manifest_is_slow() stopped at
 * depth 64 and said no, so that the daemon built the manifest inline and
 * ran git clone on its event loop (every other request waiting). */
Test(manifest, deep_git_repo_is_slow)
{
	json_t *e = json_pack("{s:s,s:s}", "type", "git_repo", "repo", "https://example.invalid/x");
	for (int i = 0; i < 70; i++)
		e = json_pack("{s:s,s:{s:o}}", "type", "dir", "children", "d", e);
	json_t *m = json_pack("{s:{s:o}}", "entries", "d", e);
	cr_assert(manifest_is_slow(m));
	json_decref(m);
}

Test(manifest, deep_files_are_not_slow)
{
	json_t *e = json_pack("{s:s}", "type", "file");
	for (int i = 0; i < 70; i++)
		e = json_pack("{s:s,s:{s:o}}", "type", "dir", "children", "d", e);
	json_t *m = json_pack("{s:{s:o}}", "entries", "d", e);
	cr_assert(!manifest_is_slow(m));
	json_decref(m);
}

#include "base/utf8.h"

/* Messages quote clients and are cut at byte counts: what is not UTF-8
 * must not reach a JSON string (a 500, or the agent closing the
 * daemon's connection). */
Test(utf8, clean)
{
	struct {
		const char *in, *out;
	} t[] = {
		{"plain", "plain"},
		{"caf\xc3\xa9", "caf\xc3\xa9"},
		{"cut \xc3", "cut ?"},
		{"\xff\xfe x", "?? x"},
		{"\xc0\xaf overlong", "?? overlong"},
		{"\xed\xa0\x80 surrogate", "??? surrogate"},
		{"\xf4\x90\x80\x80 big", "???? big"},
		{"\xf0\x9f\x98\x80 emoji", "\xf0\x9f\x98\x80 emoji"},
		{"\xe2\x82", "??"},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char buf[64];
		snprintf(buf, sizeof buf, "%s", t[i].in);
		moat_utf8_clean(buf);
		cr_assert_str_eq(buf, t[i].out, "case %zu", i);
		json_t *j = json_string(buf);
		cr_assert(j != NULL, "case %zu", i);
		json_decref(j);
	}
}
