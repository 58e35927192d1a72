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

#endif
