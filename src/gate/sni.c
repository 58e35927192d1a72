/* TLS ClientHello server_name extraction: see sni.h. */
#include "gate/sni.h"

#include <stdbool.h>
#include <string.h>

#define REC_TYPE_HANDSHAKE 22
#define HS_CLIENT_HELLO 1
#define REC_MAX 16384 /* TLSPlaintext.length limit, 2^14 */
#define EXT_SERVER_NAME 0

/* A bounded reader over the reassembled hello: every read checks what is
 * left, so no length in the message can take it past its end. */
struct rd {
	const uint8_t *p;
	size_t n;
};

static bool rd_take(struct rd *r, size_t k, struct rd *out)
{
	if (k > r->n)
		return false;
	out->p = r->p;
	out->n = k;
	r->p += k;
	r->n -= k;
	return true;
}

static bool rd_u8(struct rd *r, size_t *v)
{
	if (r->n < 1)
		return false;
	*v = r->p[0];
	r->p++;
	r->n--;
	return true;
}

static bool rd_u16(struct rd *r, size_t *v)
{
	if (r->n < 2)
		return false;
	*v = ((size_t)r->p[0] << 8) | r->p[1];
	r->p += 2;
	r->n -= 2;
	return true;
}

/* A vector with a 1- or 2-byte length prefix. */
static bool rd_vec(struct rd *r, int width, struct rd *out)
{
	size_t k;
	if (!(width == 1 ? rd_u8(r, &k) : rd_u16(r, &k)))
		return false;
	return rd_take(r, k, out);
}

static enum gate_sni_status bad(const char **err, const char *msg)
{
	if (err)
		*err = msg;
	return GATE_SNI_ERROR;
}

/* server_name extension data: ServerNameList. */
static enum gate_sni_status server_name(struct rd ext,
					char name[GATE_SNI_HOST_CAP],
					const char **err)
{
	struct rd list, hn;
	if (!rd_vec(&ext, 2, &list) || ext.n != 0 || list.n == 0)
		return bad(err, "malformed server_name extension");
	bool have = false;
	while (list.n) {
		size_t type;
		rd_u8(&list, &type);
		if (type != 0)
			return bad(err, "server name of unknown type");
		if (!rd_vec(&list, 2, &hn))
			return bad(err, "malformed server_name extension");
		if (have)
			return bad(err, "more than one host name");
		if (hn.n == 0 || hn.n >= GATE_SNI_HOST_CAP)
			return bad(err, "server name empty or too long");
		for (size_t i = 0; i < hn.n; i++) {
			uint8_t c = hn.p[i];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '-' || c == '.' ||
			      c == '_'))
				return bad(err, "invalid character in server name");
		}
		memcpy(name, hn.p, hn.n);
		name[hn.n] = '\0';
		have = true;
	}
	return GATE_SNI_FOUND;
}

/* The ClientHello body (after the 4-byte handshake header). */
static enum gate_sni_status client_hello(struct rd r,
					 char host[GATE_SNI_HOST_CAP],
					 const char **err)
{
	struct rd skip, exts;
	size_t major, minor;
	if (!rd_u8(&r, &major) || !rd_u8(&r, &minor) || major != 3)
		return bad(err, "not a TLS ClientHello version");
	if (!rd_take(&r, 32, &skip))
		return bad(err, "ClientHello too short");
	if (!rd_vec(&r, 1, &skip) || skip.n > 32)
		return bad(err, "bad session id");
	if (!rd_vec(&r, 2, &skip) || skip.n < 2 || skip.n % 2)
		return bad(err, "bad cipher suites");
	if (!rd_vec(&r, 1, &skip) || skip.n < 1)
		return bad(err, "bad compression methods");
	if (r.n == 0)
		return GATE_SNI_NONE; /* no extensions at all (TLS <= 1.2) */
	if (!rd_vec(&r, 2, &exts) || r.n != 0)
		return bad(err, "extensions length does not match the hello");
	char name[GATE_SNI_HOST_CAP];
	bool found = false;
	while (exts.n) {
		size_t type;
		struct rd data;
		if (!rd_u16(&exts, &type) || !rd_vec(&exts, 2, &data))
			return bad(err, "malformed extension");
		if (type != EXT_SERVER_NAME)
			continue;
		if (found)
			return bad(err, "more than one server_name extension");
		if (server_name(data, name, err) != GATE_SNI_FOUND)
			return GATE_SNI_ERROR;
		found = true;
	}
	if (!found)
		return GATE_SNI_NONE;
	memcpy(host, name, strlen(name) + 1);
	return GATE_SNI_FOUND;
}

enum gate_sni_status gate_sni_parse(const uint8_t *buf, size_t len,
				    char host[GATE_SNI_HOST_CAP],
				    const char **err)
{
	/* Reassemble the handshake message from the records' payloads. */
	uint8_t hello[GATE_SNI_HELLO_MAX];
	size_t have = 0, need = 4, off = 0;
	while (have < need) {
		/* Even a 1-byte record here would end past the limit; decided
		 * before its header arrives so that NEED_MORE always means
		 * len < GATE_SNI_INPUT_MAX. */
		if (off + 6 > GATE_SNI_INPUT_MAX)
			return bad(err, "ClientHello records too long");
		if (off < len && buf[off] != REC_TYPE_HANDSHAKE)
			return bad(err, off ? "non-handshake record inside the ClientHello"
					    : "not a TLS handshake record");
		if (off + 1 < len && buf[off + 1] != 3)
			return bad(err, "not a TLS record version");
		if (len < 5 || off > len - 5)
			return GATE_SNI_NEED_MORE;
		size_t rlen = ((size_t)buf[off + 3] << 8) | buf[off + 4];
		if (rlen == 0 || rlen > REC_MAX)
			return bad(err, "bad TLS record length");
		size_t p = off + 5, end = p + rlen;
		if (end > GATE_SNI_INPUT_MAX)
			return bad(err, "ClientHello records too long");
		while (p < end && have < need) {
			if (p >= len)
				return GATE_SNI_NEED_MORE;
			size_t k = (end < len ? end : len) - p;
			if (k > need - have)
				k = need - have;
			memcpy(hello + have, buf + p, k);
			have += k;
			p += k;
			if (need == 4 && have == 4) {
				if (hello[0] != HS_CLIENT_HELLO)
					return bad(err, "not a ClientHello");
				size_t body = ((size_t)hello[1] << 16) |
					      ((size_t)hello[2] << 8) | hello[3];
				if (body > GATE_SNI_HELLO_MAX - 4)
					return bad(err, "ClientHello too long");
				need = 4 + body;
			}
		}
		off = end;
	}
	return client_hello((struct rd){hello + 4, need - 4}, host, err);
}
