/* libFuzzer target: ClientHello server-name extraction. The input is used
 * raw, as byte patches on a real captured hello, or as a handshake message
 * wrapped into records of varying size. Checks the name, and that prefixes
 * say NEED_MORE until the answer is decided and the same answer after. */
#include "gate/sni.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include "../unit/sni_hello.h"

static uint8_t work[GATE_SNI_INPUT_MAX + 16384];

static size_t wrap(const uint8_t *hs, size_t n, size_t chunk)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 5 + chunk <= sizeof work; i += chunk) {
		size_t k = n - i < chunk ? n - i : chunk;
		work[o++] = 22;
		work[o++] = 3;
		work[o++] = 1;
		work[o++] = (uint8_t)(k >> 8);
		work[o++] = (uint8_t)k;
		memcpy(work + o, hs + i, k);
		o += k;
	}
	return o;
}

static void check(const uint8_t *src, size_t n)
{
	/* an exact heap copy, so that ASan sees any read past n */
	uint8_t *b = malloc(n ? n : 1);
	memcpy(b, src, n);
	char host[GATE_SNI_HOST_CAP];
	const char *err = NULL;
	enum gate_sni_status st = gate_sni_parse(b, n, host, &err);
	if (st == GATE_SNI_ERROR && !err)
		abort();
	if (st == GATE_SNI_NEED_MORE && n >= GATE_SNI_INPUT_MAX)
		abort();
	if (st == GATE_SNI_FOUND) {
		size_t hl = strnlen(host, sizeof host);
		if (hl == 0 || hl >= sizeof host)
			abort();
		for (size_t i = 0; i < hl; i++)
			if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				    "0123456789-._", host[i]))
				abort();
	}
	size_t stride = n / 32 + 1;
	bool decided = false;
	for (size_t i = 0; i <= n; i += i < 64 ? 1 : stride) {
		char h2[GATE_SNI_HOST_CAP];
		enum gate_sni_status s = gate_sni_parse(b, i, h2, NULL);
		if (decided || s != GATE_SNI_NEED_MORE) {
			decided = true;
			if (s != st || (s == GATE_SNI_FOUND && strcmp(h2, host) != 0))
				abort();
		}
	}
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *in = data + 1;
	size_t n = size - 1;
	switch (data[0] & 3) {
	case 0:
		check(in, n);
		break;
	case 1: { /* patches (offset, value) on the captured hello */
		uint8_t h[sizeof sni_tls13];
		memcpy(h, sni_tls13, sizeof h);
		for (size_t i = 0; i + 2 < n; i += 3)
			h[(in[i] | in[i + 1] << 8) % sizeof h] = in[i + 2];
		check(h, sizeof h);
		break;
	}
	case 2: /* the input as a handshake message, in records */
		if (n > GATE_SNI_HELLO_MAX)
			n = GATE_SNI_HELLO_MAX;
		check(work, wrap(in, n, (size_t)(data[0] >> 2) + 1));
		break;
	default: { /* the captured hello, patched, re-split into records */
		uint8_t h[sizeof sni_tls13];
		memcpy(h, sni_tls13, sizeof h);
		for (size_t i = 0; i + 1 < n; i += 2)
			h[5 + in[i] % (sizeof h - 5)] = in[i + 1];
		check(work, wrap(h + 5, sizeof h - 5, (size_t)(data[0] >> 2) + 1));
		break;
	}
	}
	return 0;
}
