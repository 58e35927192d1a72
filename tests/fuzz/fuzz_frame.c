/* libFuzzer target: the daemon<->agent frame decoder (src/proto/frame.c),
 * which both sides run on what the other writes: the agent on the daemon's
 * requests, the daemon on a possibly hostile agent's replies. The stream is
 * decoded as the agent does (frames from one buffer, in place) and as the
 * daemon does (the header first, then the whole frame copied out), fed in
 * small chunks; both must agree frame by frame. Checks that a frame stays
 * inside its input, that its data ends where the frame does, that msg is an
 * object whose "id" is f.id, and that a prefix never decides otherwise than
 * the whole. When the first byte is odd the input is records split at
 * "\x1e", each a JSON text and data split at "\x1f", and the harness writes
 * their headers (so that the fuzzer reaches the JSON without guessing
 * lengths); bit 1 of the first byte then spoils one header's length. */
#include "proto/frame.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_frame(const unsigned char *buf, size_t len, const struct moat_frame *f)
{
	if (f->size < MOAT_FRAME_HDR + 1 || f->size > len)
		abort();
	if (f->data < (const char *)buf + MOAT_FRAME_HDR ||
	    f->data + f->data_len != (const char *)buf + f->size)
		abort();
	if (f->msg && !json_is_object(f->msg))
		abort();
	json_t *id = json_object_get(f->msg, "id");
	if (f->id != (json_is_integer(id) ? json_integer_value(id) : 0))
		abort();
}

/* The agent's way; returns the number of frames, -1 at a bad header. */
static long agent_side(const unsigned char *buf, size_t len, size_t *sizes, size_t cap)
{
	size_t off = 0;
	long n = 0;
	for (;;) {
		struct moat_frame f;
		int st = moat_frame_next(buf + off, len - off, &f);
		if (st < 0)
			return -1;
		if (st == 0) {
			if (f.size <= len - off)
				abort(); /* says it needs what it has */
			return n;
		}
		check_frame(buf + off, len - off, &f);
		if ((size_t)n < cap)
			sizes[n] = f.size;
		n++;
		off += f.size;
		json_decref(f.msg);
	}
}

/* The daemon's way, the bytes arriving in chunks of 1..13. */
static long daemon_side(const unsigned char *buf, size_t len, const size_t *sizes, size_t cap)
{
	size_t have = 0, off = 0, step = 1;
	long n = 0;
	while (have < len || off < have) {
		if (have < len) {
			have = have + step > len ? len : have + step;
			step = step % 13 + 1;
		}
		for (;;) {
			struct moat_frame f;
			size_t got = have - off < MOAT_FRAME_HDR ? have - off : MOAT_FRAME_HDR;
			int st = moat_frame_next(buf + off, got, &f);
			if (st < 0)
				return -1;
			if (st == 1)
				abort(); /* a header alone is never a whole frame */
			if (have - off < f.size)
				break;
			/* an exact heap copy: ASan sees any read past the frame */
			unsigned char *fr = malloc(f.size);
			memcpy(fr, buf + off, f.size);
			if (moat_frame_next(fr, f.size, &f) != 1)
				abort();
			check_frame(fr, f.size, &f);
			if ((size_t)n < cap && sizes[n] != f.size)
				abort();
			n++;
			off += f.size;
			json_decref(f.msg);
			free(fr);
		}
		if (have == len)
			break;
	}
	return n;
}

static void run(const unsigned char *buf, size_t len)
{
	/* an exact heap copy of the stream too */
	unsigned char *b = malloc(len ? len : 1);
	memcpy(b, buf, len);
	size_t sizes[64];
	long a = agent_side(b, len, sizes, 64);
	long d = daemon_side(b, len, sizes, 64);
	if (a != d)
		abort();
	free(b);
}

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (!(data[0] & 1)) {
		run(data + 1, size - 1);
		return 0;
	}
	/* records -> frames with correct headers */
	size_t cap = size * (MOAT_FRAME_HDR + 1) + 64; /* an empty record: a header per byte */
	unsigned char *out = malloc(cap);
	size_t o = 0, i = 1;
	int nrec = 0;
	while (i < size) {
		size_t end = i;
		while (end < size && data[end] != 0x1e)
			end++;
		size_t mid = i;
		while (mid < end && data[mid] != 0x1f)
			mid++;
		size_t jl = mid - i, dl = mid < end ? end - mid - 1 : 0;
		unsigned char *h = out + o;
		put_le32(h, (uint32_t)jl);
		put_le32(h + 4, (uint32_t)dl);
		if ((data[0] & 2) && nrec == (data[0] >> 2) % 4)
			put_le32(h + ((data[0] >> 4) & 1) * 4, /* too long, or 0 */
				 (data[0] & 32) ? 0 : (MOAT_FRAME_DATA_MAX + 1));
		o += MOAT_FRAME_HDR;
		memcpy(out + o, data + i, jl);
		o += jl;
		if (dl)
			memcpy(out + o, data + mid + 1, dl);
		o += dl;
		nrec++;
		i = end + 1;
	}
	run(out, o);
	free(out);
	return 0;
}
