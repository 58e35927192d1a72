/* Unit tests for src/serve/image.c: format sniffing from hand-built minimal
 * headers, and base64. Inputs are exact heap copies so ASan sees overreads. */
#include <criterion/criterion.h>

#include "serve/image.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sniff from an exact-size heap copy. */
static int img_sniff(const void *d, size_t len, const char **mime, uint32_t *w,
		     uint32_t *h)
{
	void *copy = malloc(len ? len : 1);
	cr_assert_not_null(copy);
	memcpy(copy, d, len);
	*mime = NULL;
	*w = *h = 0;
	int r = moat_image_sniff(copy, len, mime, w, h);
	free(copy);
	return r;
}

static void img_expect(const void *d, size_t len, const char *mime, uint32_t w,
		       uint32_t h)
{
	const char *m;
	uint32_t gw, gh;
	cr_assert_eq(img_sniff(d, len, &m, &gw, &gh), 0, "%s not recognised",
		     mime);
	cr_assert_str_eq(m, mime);
	cr_assert_eq(gw, w, "%s width %u", mime, gw);
	cr_assert_eq(gh, h, "%s height %u", mime, gh);
}

/* Every prefix shorter than `need` bytes must be refused. */
static void img_truncations_fail(const void *d, size_t need)
{
	for (size_t cut = 0; cut < need; cut++) {
		const char *m;
		uint32_t w, h;
		cr_assert_eq(img_sniff(d, cut, &m, &w, &h), -1,
			     "prefix of %zu bytes accepted", cut);
	}
}

static void img_refused(const void *d, size_t len)
{
	const char *m;
	uint32_t w, h;
	cr_assert_eq(img_sniff(d, len, &m, &w, &h), -1);
}

static const unsigned char png_640x480[] = {
	0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
	0, 0, 0, 13, 'I', 'H', 'D', 'R',
	0, 0, 0x02, 0x80, /* 640 */
	0, 0, 0x01, 0xe0, /* 480 */
	8, 6, 0, 0, 0,    /* depth, colour type, ... */
	0, 0, 0, 0,       /* CRC (not checked) */
};

Test(image, png)
{
	img_expect(png_640x480, sizeof png_640x480, "image/png", 640, 480);
	img_truncations_fail(png_640x480, 24);
	unsigned char bad[sizeof png_640x480];
	memcpy(bad, png_640x480, sizeof bad);
	memcpy(bad + 12, "IDAT", 4); /* IHDR must come first */
	img_refused(bad, sizeof bad);
	memcpy(bad, png_640x480, sizeof bad);
	memset(bad + 16, 0, 4); /* zero width */
	img_refused(bad, sizeof bad);
}

Test(image, gif)
{
	unsigned char g[] = {'G', 'I', 'F', '8', '9', 'a', 0x2c, 0x01, 0xc8,
			     0x00, 0xf7, 0, 0};
	img_expect(g, sizeof g, "image/gif", 300, 200);
	img_truncations_fail(g, 10);
	g[4] = '7';
	img_expect(g, sizeof g, "image/gif", 300, 200);
	g[4] = '8';
	g[6] = 0;
	g[7] = 0;
	img_refused(g, sizeof g); /* 0 wide */
	unsigned char g88[] = {'G', 'I', 'F', '8', '8', 'a', 1, 0, 1, 0};
	img_refused(g88, sizeof g88);
}

/* SOI, APP0 (JFIF), fill bytes, DQT, then a frame header with `sof`. */
static size_t img_jpeg(unsigned char *o, unsigned char sof, uint16_t w,
		       uint16_t h)
{
	size_t n = 0;
	static const unsigned char head[] = {
		0xff, 0xd8,
		0xff, 0xe0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0,
		0xff, 0xff, 0xff, /* fill bytes before the next marker */
		0xdb, 0, 4, 0, 1, /* DQT, truncated table is fine: only skipped */
	};
	memcpy(o, head, sizeof head);
	n = sizeof head;
	const unsigned char frame[] = {
		0xff, sof, 0, 17, 8, (unsigned char)(h >> 8), (unsigned char)h,
		(unsigned char)(w >> 8), (unsigned char)w, 3,
		1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1,
	};
	memcpy(o + n, frame, sizeof frame);
	return n + sizeof frame;
}

Test(image, jpeg_baseline_and_progressive)
{
	unsigned char j[128];
	size_t n = img_jpeg(j, 0xc0, 1920, 1080);
	img_expect(j, n, "image/jpeg", 1920, 1080);
	img_truncations_fail(j, n);
	n = img_jpeg(j, 0xc2, 17, 65535);
	img_expect(j, n, "image/jpeg", 17, 65535);
	n = img_jpeg(j, 0xc1, 3, 4);
	img_expect(j, n, "image/jpeg", 3, 4);
}

Test(image, jpeg_without_frame_refused)
{
	unsigned char j[128];
	/* DHT (0xc4) sits in the SOF range but is not a frame header. */
	size_t n = img_jpeg(j, 0xc4, 100, 100);
	img_refused(j, n);
	/* Start of scan before any frame. */
	n = img_jpeg(j, 0xda, 100, 100);
	img_refused(j, n);
	static const unsigned char eoi[] = {0xff, 0xd8, 0xff, 0xd9};
	img_refused(eoi, sizeof eoi);
	/* A segment length running past the data. */
	static const unsigned char runaway[] = {0xff, 0xd8, 0xff, 0xe1, 0xff,
						0xff, 0, 0};
	img_refused(runaway, sizeof runaway);
	/* Height 0 (deferred to DNL) cannot be reported. */
	n = img_jpeg(j, 0xc0, 100, 0);
	img_refused(j, n);
}

/* RIFF....WEBP + chunk header + payload. */
static size_t img_webp(unsigned char *o, const char *fourcc,
		       const unsigned char *payload, size_t plen)
{
	memcpy(o, "RIFF", 4);
	uint32_t riff = (uint32_t)(4 + 8 + plen);
	for (int i = 0; i < 4; i++)
		o[4 + i] = (unsigned char)(riff >> (8 * i));
	memcpy(o + 8, "WEBP", 4);
	memcpy(o + 12, fourcc, 4);
	for (int i = 0; i < 4; i++)
		o[16 + i] = (unsigned char)(plen >> (8 * i));
	memcpy(o + 20, payload, plen);
	return 20 + plen;
}

Test(image, webp_vp8)
{
	/* frame tag (key frame), start code, 14-bit sizes (scale bits set on
	 * the width, which must be masked off). */
	static const unsigned char vp8[] = {0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a,
					    0x20, 0xc3, 0xe0, 0x01};
	unsigned char o[64];
	size_t n = img_webp(o, "VP8 ", vp8, sizeof vp8);
	img_expect(o, n, "image/webp", 800, 480);
	img_truncations_fail(o, n);
	unsigned char inter[sizeof vp8];
	memcpy(inter, vp8, sizeof vp8);
	inter[0] |= 1; /* not a key frame */
	n = img_webp(o, "VP8 ", inter, sizeof inter);
	img_refused(o, n);
	memcpy(inter, vp8, sizeof vp8);
	inter[4] = 0; /* bad start code */
	n = img_webp(o, "VP8 ", inter, sizeof inter);
	img_refused(o, n);
}

Test(image, webp_vp8l)
{
	/* width-1 = 399, height-1 = 299: v = 399 | 299 << 14 */
	uint32_t v = 399u | 299u << 14;
	unsigned char l[] = {0x2f, (unsigned char)v, (unsigned char)(v >> 8),
			     (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
	unsigned char o[64];
	size_t n = img_webp(o, "VP8L", l, sizeof l);
	img_expect(o, n, "image/webp", 400, 300);
	img_truncations_fail(o, n);
	l[4] |= 0x20; /* version 1 */
	n = img_webp(o, "VP8L", l, sizeof l);
	img_refused(o, n);
	l[4] &= (unsigned char)~0x20;
	l[0] = 0x2e; /* bad signature */
	n = img_webp(o, "VP8L", l, sizeof l);
	img_refused(o, n);
}

Test(image, webp_vp8x)
{
	/* canvas 5000x70000 (24-bit, minus one) */
	uint32_t cw = 5000 - 1, ch = 70000 - 1;
	unsigned char x[] = {0x10, 0, 0, 0,
			     (unsigned char)cw, (unsigned char)(cw >> 8),
			     (unsigned char)(cw >> 16),
			     (unsigned char)ch, (unsigned char)(ch >> 8),
			     (unsigned char)(ch >> 16)};
	unsigned char o[64];
	size_t n = img_webp(o, "VP8X", x, sizeof x);
	img_expect(o, n, "image/webp", 5000, 70000);
	img_truncations_fail(o, n);
	n = img_webp(o, "ALPH", x, sizeof x);
	img_refused(o, n);
}

Test(image, not_images)
{
	static const char text[] = "#!/bin/sh\necho hello, this is not an image\n";
	img_refused(text, sizeof text - 1);
	img_refused("", 0);
	img_refused("GIF", 3);
	static const unsigned char wav[] = "RIFF\x24\0\0\0WAVEfmt \x10\0\0\0"
					   "\x01\0\x02\0\x44\xac\0\0";
	img_refused(wav, sizeof wav - 1);
	cr_assert_eq(moat_image_sniff(NULL, 0, &(const char *){NULL},
				      &(uint32_t){0}, &(uint32_t){0}),
		     -1);
}

Test(image, outputs_untouched_on_failure)
{
	const char *m = "keep";
	uint32_t w = 7, h = 9;
	cr_assert_eq(moat_image_sniff(png_640x480, 20, &m, &w, &h), -1);
	cr_assert_str_eq(m, "keep");
	cr_assert_eq(w, 7);
	cr_assert_eq(h, 9);
}

Test(image, base64_rfc4648_vectors)
{
	static const char *vec[][2] = {
		{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
		{"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
		{"foobar", "Zm9vYmFy"},
	};
	for (size_t i = 0; i < sizeof vec / sizeof *vec; i++) {
		char *s = moat_base64(vec[i][0], strlen(vec[i][0]));
		cr_assert_not_null(s);
		cr_assert_str_eq(s, vec[i][1]);
		free(s);
	}
}

Test(image, base64_binary)
{
	static const unsigned char bin[] = {0x00, 0xff, 0xfe, 0xfb, 0xef, 0x3e,
					    0x3f};
	char *s = moat_base64(bin, sizeof bin);
	cr_assert_not_null(s);
	cr_assert_str_eq(s, "AP/+++8+Pw==");
	free(s);

	unsigned char all[256];
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	s = moat_base64(all, sizeof all);
	cr_assert_not_null(s);
	cr_assert_eq(strlen(s), 344);
	cr_assert_eq(strncmp(s, "AAECAwQFBgcICQoL", 16), 0);
	cr_assert_str_eq(s + 340, "/w==");
	free(s);
}
