/* Frame decoding, shared by the daemon and the static agent: see frame.h.
 * Pure: no I/O, so that a fuzz target runs exactly this code. */
#include "proto/frame.h"

int moat_frame_next(const void *buf, size_t len, struct moat_frame *f)
{
	const unsigned char *p = buf;
	*f = (struct moat_frame){.size = MOAT_FRAME_HDR};
	if (len < MOAT_FRAME_HDR)
		return 0;
	uint32_t jl, dl;
	if (moat_frame_parse(p, &jl, &dl) < 0)
		return -1;
	/* both bounded above (1 MiB, 256 MiB): no overflow */
	f->size = MOAT_FRAME_HDR + (size_t)jl + dl;
	if (len < f->size)
		return 0;
	const char *js = (const char *)p + MOAT_FRAME_HDR;
	f->data = js + jl;
	f->data_len = dl;
	f->msg = json_loadb(js, jl, 0, NULL);
	if (f->msg && !json_is_object(f->msg)) {
		json_decref(f->msg);
		f->msg = NULL;
	}
	f->id = json_integer_value(json_object_get(f->msg, "id"));
	return 1;
}
