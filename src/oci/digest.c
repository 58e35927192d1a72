/* SHA-256 digests with OpenSSL's EVP interface. */
#include "digest.h"

#include <openssl/evp.h>

#include <stdio.h>
#include <string.h>

bool oci_digest_valid(const char *d)
{
	if (!d || strncmp(d, "sha256:", 7) != 0)
		return false;
	for (int i = 0; i < 64; i++) {
		char c = d[7 + i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return d[OCI_DIGEST_LEN] == '\0';
}

int oci_sha256_init(struct oci_sha256 *h)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (!c)
		return -1;
	if (EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		return -1;
	}
	h->ctx = c;
	return 0;
}

int oci_sha256_update(struct oci_sha256 *h, const void *p, size_t n)
{
	if (!h->ctx)
		return -1;
	return EVP_DigestUpdate(h->ctx, p, n) == 1 ? 0 : -1;
}

int oci_sha256_final(struct oci_sha256 *h, char out[OCI_DIGEST_LEN + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	int ok = h->ctx && EVP_DigestFinal_ex(h->ctx, md, &n) == 1 && n == 32;
	oci_sha256_free(h);
	if (!ok)
		return -1;
	memcpy(out, "sha256:", 7);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	out[OCI_DIGEST_LEN] = '\0';
	return 0;
}

void oci_sha256_free(struct oci_sha256 *h)
{
	if (h->ctx)
		EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}

int oci_sha256_buf(const void *p, size_t n, char out[OCI_DIGEST_LEN + 1])
{
	struct oci_sha256 h = {0};
	if (oci_sha256_init(&h) < 0)
		return -1;
	if (oci_sha256_update(&h, p, n) < 0) {
		oci_sha256_free(&h);
		return -1;
	}
	return oci_sha256_final(&h, out);
}
