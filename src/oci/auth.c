/* Registry authentication inputs: the WWW-Authenticate challenge of a 401
 * (RFC 7235 auth-params) and Basic credentials from a docker config.json.
 * Both are outside input; both end up in request headers, so nothing with
 * a control character gets through. */
#include "registry.h"

#include "base/cleanup.h"

#include <jansson.h>
#include <openssl/evp.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int chal_bad(struct moat_err *e, const char *why)
{
	moat_err_set(e, MOAT_E_USAGE, 0, "WWW-Authenticate: %s", why);
	if (e)
		e->errnum = EBADMSG;
	return -1;
}

static bool tchar(int c)
{
	return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

int oci_challenge_parse(const char *hdr, struct oci_challenge *c, struct moat_err *e)
{
	memset(c, 0, sizeof *c);
	const char *p = hdr;
	while (*p == ' ' || *p == '\t')
		p++;
	size_t n = 0;
	while (p[n] && tchar((unsigned char)p[n]))
		n++;
	if (n == 0 || n >= sizeof c->scheme)
		return chal_bad(e, "no auth scheme");
	memcpy(c->scheme, p, n);
	if (strcasecmp(c->scheme, "bearer") == 0)
		strcpy(c->scheme, "Bearer");
	else if (strcasecmp(c->scheme, "basic") == 0)
		strcpy(c->scheme, "Basic");
	else
		return chal_bad(e, "scheme is neither Bearer nor Basic");
	p += n;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (!*p)
			break;
		const char *k = p;
		size_t kl = 0;
		while (p[kl] && tchar((unsigned char)p[kl]))
			kl++;
		if (kl == 0)
			return chal_bad(e, "bad parameter name");
		p += kl;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p != '=') {
			/* a second challenge ("Bearer ..., Basic realm=") starts here */
			break;
		}
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		char val[1024];
		size_t vl = 0;
		if (*p == '"') {
			for (p++;; p++) {
				if (!*p)
					return chal_bad(e, "unterminated quoted string");
				if (*p == '"') {
					p++;
					break;
				}
				if (*p == '\\') {
					p++;
					if (!*p)
						return chal_bad(e, "unterminated quoted string");
				}
				if ((unsigned char)*p < 0x20 || *p == 0x7f)
					return chal_bad(e, "control character in a parameter");
				if (vl + 1 >= sizeof val)
					return chal_bad(e, "parameter too long");
				val[vl++] = *p;
			}
		} else {
			while (*p && tchar((unsigned char)*p)) {
				if (vl + 1 >= sizeof val)
					return chal_bad(e, "parameter too long");
				val[vl++] = *p++;
			}
			if (*p && *p != ',' && *p != ' ' && *p != '\t')
				return chal_bad(e, "bad parameter value");
		}
		val[vl] = '\0';
		char *dst = NULL;
		size_t cap = 0;
		if (kl == 5 && strncasecmp(k, "realm", 5) == 0)
			dst = c->realm, cap = sizeof c->realm;
		else if (kl == 7 && strncasecmp(k, "service", 7) == 0)
			dst = c->service, cap = sizeof c->service;
		else if (kl == 5 && strncasecmp(k, "scope", 5) == 0)
			dst = c->scope, cap = sizeof c->scope;
		if (dst) {
			if (vl >= cap)
				return chal_bad(e, "parameter too long");
			memcpy(dst, val, vl + 1);
		}
	}
	if (strcmp(c->scheme, "Bearer") == 0 && !c->realm[0])
		return chal_bad(e, "Bearer challenge without a realm");
	return 0;
}

static bool b64_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n % 4 != 0 || n > 8192)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '+' && s[i] != '/' &&
		    !(s[i] == '=' && i >= n - 2))
			return false;
	return true;
}

static void json_freep(json_t **j)
{
	if (*j)
		json_decref(*j);
}

/* The keys a config.json may use for host. */
static json_t *find_host(json_t *auths, const char *host)
{
	char k[400];
	const char *pre[] = {"", "https://", "http://", "https://", "https://"};
	const char *post[] = {"", "", "", "/v1/", "/v2/"};
	bool hub = strcmp(host, "docker.io") == 0 || strcmp(host, "registry-1.docker.io") == 0 ||
		   strcmp(host, "index.docker.io") == 0;
	const char *hosts[] = {host, hub ? "index.docker.io" : NULL, hub ? "docker.io" : NULL,
			       hub ? "registry-1.docker.io" : NULL};
	for (size_t h = 0; h < sizeof hosts / sizeof hosts[0]; h++) {
		if (!hosts[h])
			continue;
		for (size_t f = 0; f < sizeof pre / sizeof pre[0]; f++) {
			snprintf(k, sizeof k, "%s%s%s", pre[f], hosts[h], post[f]);
			json_t *v = json_object_get(auths, k);
			if (json_is_object(v))
				return v;
		}
	}
	return NULL;
}

int oci_auth_lookup(const char *file, const char *host, char **out, struct moat_err *e)
{
	*out = NULL;
	struct stat st;
	if (stat(file, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "auth file %s", file);
	if (!S_ISREG(st.st_mode) || st.st_size > (1 << 20))
		return moat_err_set(e, MOAT_E_USAGE, EFBIG, "auth file %s: not a file of at most 1 MiB",
				    file);
	json_error_t je;
	__attribute__((cleanup(json_freep))) json_t *j = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		moat_err_set(e, MOAT_E_USAGE, 0, "auth file %s: not a JSON object (%s, line %d)", file,
			     j ? "" : je.text, j ? 0 : je.line);
		if (e)
			e->errnum = EINVAL;
		return -1;
	}
	json_t *auths = json_object_get(j, "auths");
	if (!json_is_object(auths))
		return 0;
	json_t *a = find_host(auths, host);
	if (!a)
		return 0;
	json_t *v = json_object_get(a, "auth");
	if (json_is_string(v) && json_string_length(v) > 0) {
		if (!b64_ok(json_string_value(v))) {
			moat_err_set(e, MOAT_E_USAGE, 0, "auth file %s: auths.%s.auth is not base64", file,
				     host);
			if (e)
				e->errnum = EINVAL;
			return -1;
		}
		*out = strdup(json_string_value(v));
		return *out ? 0 : moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "auth file %s", file);
	}
	json_t *u = json_object_get(a, "username"), *pw = json_object_get(a, "password");
	if (!json_is_string(u) || !json_is_string(pw))
		return 0;
	size_t ul = json_string_length(u), pl = json_string_length(pw);
	if (ul + pl > 4096 || strlen(json_string_value(u)) != ul || strchr(json_string_value(u), ':')) {
		moat_err_set(e, MOAT_E_USAGE, 0, "auth file %s: bad username for %s", file, host);
		if (e)
			e->errnum = EINVAL;
		return -1;
	}
	_cleanup_free_ char *plain = malloc(ul + pl + 2);
	char *b = malloc(4 * ((ul + pl + 1 + 2) / 3) + 1);
	if (!plain || !b) {
		free(b);
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "auth file %s", file);
	}
	memcpy(plain, json_string_value(u), ul);
	plain[ul] = ':';
	memcpy(plain + ul + 1, json_string_value(pw), pl);
	EVP_EncodeBlock((unsigned char *)b, (unsigned char *)plain, (int)(ul + pl + 1));
	*out = b;
	return 0;
}
