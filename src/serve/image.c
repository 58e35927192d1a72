/* Image sniffing and base64: see image.h. The bytes come from inside a
 * sandbox, so every read is bounds-checked against len first. */
#include "serve/image.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint32_t be16(const unsigned char *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}
static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}
static uint32_t le16(const unsigned char *p)
{
	return (uint32_t)p[1] << 8 | p[0];
}
static uint32_t le24(const unsigned char *p)
{
	return (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[3] << 24 | le24(p);
}

/* Signature, then the IHDR chunk, which the PNG spec requires first. */
static int sniff_png(const unsigned char *p, size_t len, uint32_t *w,
		     uint32_t *h)
{
	if (len < 24 || be32(p + 8) != 13 || memcmp(p + 12, "IHDR", 4))
		return -1;
	*w = be32(p + 16);
	*h = be32(p + 20);
	/* PNG limits dimensions to 2^31-1. */
	return (*w >> 31 || *h >> 31) ? -1 : 0;
}

/* Logical screen descriptor right after the 6-byte signature. */
static int sniff_gif(const unsigned char *p, size_t len, uint32_t *w,
		     uint32_t *h)
{
	if (len < 10)
		return -1;
	*w = le16(p + 6);
	*h = le16(p + 8);
	return 0;
}

static bool is_sof(unsigned m)
{
	/* C4 (DHT), C8 (JPG extension) and CC (DAC) share the range but are
	 * not frame headers. */
	return m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
}

/* Walk the marker segments up to the first frame header. */
static int sniff_jpeg(const unsigned char *p, size_t len, uint32_t *w,
		      uint32_t *h)
{
	size_t at = 2;
	for (;;) {
		if (at >= len || p[at] != 0xff)
			return -1;
		while (at < len && p[at] == 0xff) /* fill bytes */
			at++;
		if (at >= len)
			return -1;
		unsigned m = p[at++];
		if (m == 0x01 || (m >= 0xd0 && m <= 0xd8))
			continue; /* no length field */
		if (m == 0xd9 || m == 0xda || m == 0x00)
			return -1; /* image data or end before any frame */
		if (len - at < 2)
			return -1;
		size_t seg = be16(p + at);
		if (seg < 2 || seg > len - at)
			return -1;
		if (is_sof(m)) {
			/* length(2) precision(1) height(2) width(2) */
			if (seg < 7)
				return -1;
			*h = be16(p + at + 3);
			*w = be16(p + at + 5);
			return 0;
		}
		at += seg;
	}
}

/* RIFF header, then the first chunk says which kind of WebP it is. */
static int sniff_webp(const unsigned char *p, size_t len, uint32_t *w,
		      uint32_t *h)
{
	if (len < 20)
		return -1;
	const unsigned char *c = p + 20; /* chunk payload */
	size_t clen = len - 20;
	if (!memcmp(p + 12, "VP8 ", 4)) {
		/* Key-frame tag (bit 0 clear), start code, then 14-bit
		 * width and height (the top 2 bits are a scale). */
		if (clen < 10 || (c[0] & 1) || memcmp(c + 3, "\x9d\x01\x2a", 3))
			return -1;
		*w = le16(c + 6) & 0x3fff;
		*h = le16(c + 8) & 0x3fff;
		return 0;
	}
	if (!memcmp(p + 12, "VP8L", 4)) {
		/* Signature byte, then width-1 and height-1 in 14 bits each
		 * and a 3-bit version that must be 0. */
		if (clen < 5 || c[0] != 0x2f)
			return -1;
		uint32_t v = le32(c + 1);
		if (v >> 29)
			return -1;
		*w = (v & 0x3fff) + 1;
		*h = ((v >> 14) & 0x3fff) + 1;
		return 0;
	}
	if (!memcmp(p + 12, "VP8X", 4)) {
		/* flags(1) reserved(3) canvas width-1(3) height-1(3) */
		if (clen < 10)
			return -1;
		*w = le24(c + 4) + 1;
		*h = le24(c + 7) + 1;
		return 0;
	}
	return -1;
}

int moat_image_sniff(const void *data, size_t len, const char **mime,
		     uint32_t *w, uint32_t *h)
{
	const unsigned char *p = data;
	uint32_t iw = 0, ih = 0;
	const char *m;
	int r;
	if (!p)
		return -1;
	if (len >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) {
		m = "image/png";
		r = sniff_png(p, len, &iw, &ih);
	} else if (len >= 6 &&
		   (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6))) {
		m = "image/gif";
		r = sniff_gif(p, len, &iw, &ih);
	} else if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) {
		m = "image/jpeg";
		r = sniff_jpeg(p, len, &iw, &ih);
	} else if (len >= 12 && !memcmp(p, "RIFF", 4) &&
		   !memcmp(p + 8, "WEBP", 4)) {
		m = "image/webp";
		r = sniff_webp(p, len, &iw, &ih);
	} else {
		return -1;
	}
	/* A zero dimension means a corrupt header (or, for JPEG, a height
	 * deferred to a DNL segment, which nothing displays). */
	if (r < 0 || iw == 0 || ih == 0)
		return -1;
	*mime = m;
	*w = iw;
	*h = ih;
	return 0;
}

char *moat_base64(const void *data, size_t len)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = data;
	size_t groups = len / 3 + (len % 3 != 0);
	if (groups > (SIZE_MAX - 1) / 4)
		return NULL;
	char *out = malloc(groups * 4 + 1);
	if (!out)
		return NULL;
	char *o = out;
	size_t i = 0;
	for (; len - i >= 3; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 |
			     p[i + 2];
		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = tab[(v >> 6) & 63];
		*o++ = tab[v & 63];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)p[i] << 16;
		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = '=';
		*o++ = '=';
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = tab[(v >> 6) & 63];
		*o++ = '=';
	}
	*o = '\0';
	return out;
}
