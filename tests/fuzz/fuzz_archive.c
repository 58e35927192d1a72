/* libFuzzer target: archive upload (src/serve/archive.c, libarchive): the
 * bytes of PUT .../archive -> entry stream, as the daemon does before any
 * of it reaches a sandbox. Limits are small so that a compressed bomb ends
 * quickly. Checks that a refusal appends nothing and says why, that the
 * stream is valid (moat_entry_next over it), that no name is absolute,
 * has "..", or repeats, and that the stream survives the way back to tar
 * (archive download) and in again unchanged. */
#include "serve/archive.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_stream(const struct moat_buf *b)
{
	size_t off = 0;
	struct moat_entry en;
	struct moat_err e = {0};
	int rc;
	while ((rc = moat_entry_next(b->p, b->len, &off, &en, &e)) == 1)
		if (en.path[0] == '/')
			abort();
	if (rc < 0)
		abort(); /* the daemon sends only valid streams */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *tar = malloc(size ? size : 1); /* exact heap copy for ASan */
	memcpy(tar, data, size);
	struct moat_archive_limits lim = {.max_total = 4u << 20, .max_entries = 2000};
	struct moat_buf out = {0};
	struct moat_err e = {0};
	/* something already in the buffer must stay as it is on failure */
	if (moat_buf_add(&out, "x", 1) < 0)
		abort();
	out.len = 0;
	int rc = moat_archive_to_entries(tar, size, &lim, &out, &e);
	if (rc < 0) {
		if (out.len || !e.msg[0] ||
		    (e.errnum != EINVAL && e.errnum != EFBIG && e.errnum != ENOMEM))
			abort();
	} else {
		check_stream(&out);
		struct moat_buf back = {0}, again = {0};
		struct moat_err e2 = {0};
		if (moat_entries_to_archive(out.p, out.len, &back, &e2) < 0)
			abort();
		if (moat_archive_to_entries(back.p, back.len, &lim, &again, &e2) < 0)
			abort();
		if (again.len != out.len || (out.len && memcmp(again.p, out.p, out.len)))
			abort();
		moat_buf_free(&back);
		moat_buf_free(&again);
	}
	moat_buf_free(&out);
	free(tar);
	return 0;
}
