/* Frames between the daemon and a sandbox's agent, over the sandbox's
 * control socket (a unix stream socket). One frame:
 *   u32 json_len, u32 data_len (little-endian), json_len bytes of a JSON
 *   object, data_len bytes of raw data.
 * Requests carry "id" (an integer the daemon picks) and "op"; each reply
 * carries the same "id". The agent may answer out of order (a "wait" can
 * stay pending while other requests are served). Sizes are bounded on
 * both sides; the daemon treats everything the agent says as untrusted. */
#ifndef MOAT_PROTO_FRAME_H
#define MOAT_PROTO_FRAME_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define MOAT_FRAME_HDR 8
#define MOAT_FRAME_JSON_MAX (1u << 20)  /* 1 MiB of JSON */
#define MOAT_FRAME_DATA_MAX (256u << 20) /* 256 MiB of data */

static inline void moat_frame_hdr(unsigned char h[MOAT_FRAME_HDR], uint32_t jl, uint32_t dl)
{
	for (int i = 0; i < 4; i++) {
		h[i] = (unsigned char)(jl >> (8 * i));
		h[4 + i] = (unsigned char)(dl >> (8 * i));
	}
}

/* Decode a header; returns 0, or -1 when a length is over its bound. */
static inline int moat_frame_parse(const unsigned char h[MOAT_FRAME_HDR], uint32_t *jl,
				   uint32_t *dl)
{
	*jl = *dl = 0;
	for (int i = 0; i < 4; i++) {
		*jl |= (uint32_t)h[i] << (8 * i);
		*dl |= (uint32_t)h[4 + i] << (8 * i);
	}
	return (*jl == 0 || *jl > MOAT_FRAME_JSON_MAX || *dl > MOAT_FRAME_DATA_MAX) ? -1 : 0;
}

/* One frame, decoded (moat_frame_next). */
struct moat_frame {
	json_t *msg;      /* the JSON object (the caller's: json_decref), or
			   * NULL when the JSON is malformed or not an object */
	json_int_t id;    /* msg's "id" when an integer, else 0 */
	const char *data; /* the raw data, inside the input */
	size_t data_len;
	size_t size;      /* bytes of the whole frame, header included */
};

/* The frame at the start of buf, len bytes of it in: the one decoder of
 * both sides (the daemon reading the agent's replies, the agent reading the
 * daemon's requests; each treats the other as hostile). Returns 1 with *f
 * filled when the whole frame is in (the caller drops f->size bytes); 0
 * when more bytes are needed (f->size: the bytes the frame needs, once its
 * header is in, else MOAT_FRAME_HDR); -1 when the header is bad (a length
 * over its bound): there is no resync, the connection is to be closed.
 * Malformed JSON is still a whole frame (msg NULL, id 0), which the reader
 * answers or drops, not a framing error. Never reads past len. */
int moat_frame_next(const void *buf, size_t len, struct moat_frame *f);

#endif
