/* libFuzzer target: the entry stream parser (src/proto/entries.c), which
 * the agent runs on what the daemon sends (archive upload, manifests) and
 * the daemon on what a hostile agent sends (archive download). Checks that
 * every record stays inside the stream, obeys the format's rules, and that
 * moat_entry_put writes it back to exactly the bytes it was read from.
 * When the first byte is odd the input is records split at "\x1e", each
 * [type][mode lo][mode hi] path "\x1f" data, and the harness writes the
 * headers (so that the fuzzer reaches path and data checks without
 * guessing lengths). */
#include "proto/entries.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *src, size_t n)
{
	uint8_t *s = malloc(n ? n : 1); /* exact heap copy for ASan */
	memcpy(s, src, n);
	size_t off = 0, prev = 0;
	struct moat_entry en;
	struct moat_err e = {0};
	struct moat_buf again = {0};
	int rc;
	while ((rc = moat_entry_next(s, n, &off, &en, &e)) == 1) {
		if (off <= prev || off > n)
			abort();
		if (en.path < (const char *)s || en.path + en.path_len > (const char *)s + n ||
		    (const char *)en.data + en.size != (const char *)s + off)
			abort();
		if (!moat_entry_path_ok(en.path, en.path_len) || (en.mode & ~07777u) ||
		    (en.mode & 06000) || (en.type != 'f' && en.type != 'd' && en.type != 'l'))
			abort();
		if (en.type == 'l' && (en.size == 0 || memchr(en.data, 0, en.size)))
			abort();
		struct moat_err pe = {0};
		if (moat_entry_put(&again, &en, &pe) < 0)
			abort(); /* what next accepts, put accepts */
		prev = off;
	}
	if (rc < 0 && (e.msg[0] == '\0' || off != prev))
		abort(); /* an error says why and does not move */
	if (again.len != prev || (prev && memcmp(again.p, s, prev) != 0))
		abort();
	moat_buf_free(&again);
	free(s);
}

static void le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (!(data[0] & 1)) {
		check(data + 1, size - 1);
		return 0;
	}
	uint8_t *out = malloc(size * 10 + 64);
	size_t o = 0, i = 1;
	while (i < size) {
		size_t end = i;
		while (end < size && data[end] != 0x1e)
			end++;
		if (end - i >= 3) {
			size_t p = i + 3, mid = p;
			while (mid < end && data[mid] != 0x1f)
				mid++;
			size_t pl = mid - p, dl = mid < end ? end - mid - 1 : 0;
			uint8_t *h = out + o;
			memset(h, 0, MOAT_ENTRY_HDR);
			h[0] = "fdl?"[data[i] & 3];
			le(h + 4, (uint64_t)(data[i + 1] | data[i + 2] << 8), 4);
			le(h + 8, (uint64_t)data[i] << 20, 8);
			le(h + 16, pl, 4);
			le(h + 20, dl, 8);
			o += MOAT_ENTRY_HDR;
			memcpy(out + o, data + p, pl);
			o += pl;
			if (dl)
				memcpy(out + o, data + mid + 1, dl);
			o += dl;
		}
		i = end + 1;
	}
	check(out, o);
	free(out);
	return 0;
}
