/* libFuzzer target: apply_patch (src/patch/patch.c), which the agent runs
 * on a POST .../patch body against files the sandbox wrote: parse, then
 * apply each Update section to in-memory content (the file's "old" text,
 * also from the input). Layout: old content, a NUL, the patch text; when
 * the first byte is odd the patch text gets a "*** Begin Patch / *** Update
 * File: f" head and "*** End Patch" tail (so that the fuzzer spends its
 * time on hunks). Checks the parse's shape, that an error says why, and
 * that an applied result is NUL-terminated at its length, ends with a
 * newline unless empty (a pure Move to: is the old bytes exactly), and that
 * parsing is deterministic. */
#include "patch/patch.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void apply_all(const struct moat_patch *p, const char *old, size_t old_len)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct moat_patch_file *f = &p->files[i];
		if (!f->path || !f->path[0])
			abort();
		if (f->kind == MOAT_PATCH_ADD &&
		    (!f->content || strlen(f->content) > f->content_len))
			abort();
		if (f->kind != MOAT_PATCH_UPDATE)
			continue;
		char *out = NULL;
		size_t out_len = 0;
		struct moat_err e = {0};
		if (moat_patch_apply(f, old, old_len, &out, &out_len, &e) == 0) {
			if (!out || out[out_len] != '\0')
				abort();
			if (f->nhunks == 0) { /* a pure Move to: the bytes as they were */
				if (!f->move_to || out_len != old_len || memcmp(out, old, old_len))
					abort();
			} else if (out_len && out[out_len - 1] != '\n') {
				abort();
			}
			free(out);
		} else if (!e.msg[0] || out) {
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *nul = memchr(data + 1, 0, size - 1);
	size_t old_len = nul ? (size_t)(nul - (data + 1)) : 0;
	const uint8_t *pt = nul ? nul + 1 : data + 1;
	size_t pl = size - (size_t)(pt - data);
	/* exact heap copies for ASan */
	char *old = malloc(old_len + 1);
	memcpy(old, data + 1, old_len);
	old[old_len] = '\0';
	static const char head[] = "*** Begin Patch\n*** Update File: f\n";
	static const char tail[] = "\n*** End Patch\n";
	bool wrap = data[0] & 1;
	size_t tl = pl + (wrap ? sizeof head - 1 + sizeof tail - 1 : 0);
	char *text = malloc(tl ? tl : 1);
	size_t o = 0;
	if (wrap) {
		memcpy(text, head, sizeof head - 1);
		o = sizeof head - 1;
	}
	memcpy(text + o, pt, pl);
	o += pl;
	if (wrap)
		memcpy(text + o, tail, sizeof tail - 1);

	struct moat_patch p = {0}, q = {0};
	struct moat_err e = {0}, e2 = {0};
	int rc = moat_patch_parse(text, tl, &p, &e);
	int rc2 = moat_patch_parse(text, tl, &q, &e2);
	if (rc != rc2 || p.n != q.n || (rc < 0 && (strcmp(e.msg, e2.msg) || !e.msg[0])))
		abort();
	if (rc < 0 && (p.n || p.files))
		abort(); /* left empty on failure */
	if (rc == 0)
		apply_all(&p, old, old_len);
	moat_patch_free(&p);
	moat_patch_free(&q);
	free(text);
	free(old);
	return 0;
}
