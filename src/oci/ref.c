#define _GNU_SOURCE
/* Image references, Docker's grammar (distribution/reference):
 *   [HOST[:PORT]/]COMPONENT(/COMPONENT)*[:TAG][@sha256:HEX]
 * The first component is a registry when it has a '.' or a ':' or is
 * "localhost" (and more follow); otherwise docker.io, with "library/" for
 * a one-component name. */
#include "ref.h"

#include "digest.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* */
static bool component_ok(const char *s, size_t n)
{
	size_t i = 0;
	if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
		return false;
	while (i < n) {
		if (lower_alnum(s[i])) {
			i++;
			continue;
		}
		size_t j = i;
		if (s[i] == '.' || s[i] == '_') {
			j++;
			if (s[i] == '_' && j < n && s[j] == '_')
				j++;
		} else if (s[i] == '-') {
			while (j < n && s[j] == '-')
				j++;
		} else {
			return false;
		}
		if (j >= n || !lower_alnum(s[j]))
			return false;
		i = j;
	}
	return true;
}

/* host[:port]: letters, digits, '.', '-'; port 1..65535 */
static bool registry_ok(const char *s, size_t n)
{
	size_t i = 0;
	if (n == 0)
		return false;
	for (; i < n && s[i] != ':'; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-'))
			return false;
	}
	if (i == 0 || s[0] == '.' || s[0] == '-' || s[i - 1] == '.' || s[i - 1] == '-')
		return false;
	if (i == n)
		return true;
	unsigned long port = 0;
	size_t d = 0;
	for (i++; i < n; i++, d++) {
		if (s[i] < '0' || s[i] > '9' || d >= 5)
			return false;
		port = port * 10 + (unsigned long)(s[i] - '0');
	}
	return d > 0 && port >= 1 && port <= 65535;
}

static bool tag_ok(const char *s, size_t n)
{
	if (n == 0 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool w = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			 c == '_';
		if (!w && (i == 0 || (c != '.' && c != '-')))
			return false;
	}
	return true;
}

static int bad(struct moat_err *e, const char *s, const char *why)
{
	moat_err_set(e, MOAT_E_USAGE, 0, "image reference \"%.150s%s\": %s", s,
		     strlen(s) > 150 ? "..." : "", why);
	if (e)
		e->errnum = EINVAL;
	return -1;
}

int oci_ref_parse(const char *s, struct oci_ref *r, struct moat_err *e)
{
	memset(r, 0, sizeof *r);
	size_t len = strlen(s);
	if (len == 0)
		return bad(e, s, "empty");
	if (len > 1024)
		return bad(e, s, "too long");
	const char *at = strrchr(s, '@');
	size_t name_len = at ? (size_t)(at - s) : len;
	if (at) {
		if (!oci_digest_valid(at + 1))
			return bad(e, s, "the digest is not sha256:<64 lowercase hex>");
		memcpy(r->digest, at + 1, OCI_DIGEST_LEN + 1);
	}
	/* the tag: after the last ':' that follows the last '/' */
	const char *slash = memrchr(s, '/', name_len);
	const char *start = slash ? slash + 1 : s;
	const char *colon = memchr(start, ':', name_len - (size_t)(start - s));
	size_t repo_end = name_len;
	if (colon) {
		size_t tl = name_len - (size_t)(colon + 1 - s);
		if (!tag_ok(colon + 1, tl))
			return bad(e, s, "bad tag (letters, digits, '_', '.', '-'; at most 128)");
		memcpy(r->tag, colon + 1, tl);
		r->tag[tl] = '\0';
		repo_end = (size_t)(colon - s);
	}
	/* registry: the first component, when it looks like a host */
	const char *first_slash = memchr(s, '/', repo_end);
	const char *repo = s;
	if (first_slash) {
		size_t hl = (size_t)(first_slash - s);
		bool host = memchr(s, '.', hl) || memchr(s, ':', hl) ||
			    (hl == 9 && memcmp(s, "localhost", 9) == 0);
		for (size_t i = 0; host == false && i < hl; i++)
			if (s[i] >= 'A' && s[i] <= 'Z')
				host = true; /* upper case is only valid in a host */
		if (host) {
			if (!registry_ok(s, hl) || hl >= sizeof r->registry)
				return bad(e, s, "bad registry host[:port]");
			memcpy(r->registry, s, hl);
			r->registry[hl] = '\0';
			repo = first_slash + 1;
		}
	}
	if (!r->registry[0] || strcmp(r->registry, "index.docker.io") == 0 ||
	    strcmp(r->registry, "registry-1.docker.io") == 0)
		strcpy(r->registry, "docker.io");
	size_t rl = (size_t)(s + repo_end - repo);
	if (rl == 0)
		return bad(e, s, "no repository name");
	/* every component checked */
	for (const char *p = repo; p < s + repo_end;) {
		const char *q = memchr(p, '/', (size_t)(s + repo_end - p));
		size_t cl = q ? (size_t)(q - p) : (size_t)(s + repo_end - p);
		if (!component_ok(p, cl))
			return bad(e, s,
				   "bad repository name (lower-case letters, digits, separators "
				   "'.', '_', '__', '-')");
		p += cl + (q ? 1 : 0);
		if (q && p == s + repo_end)
			return bad(e, s, "bad repository name (ends with '/')");
	}
	bool library = strcmp(r->registry, "docker.io") == 0 && !memchr(repo, '/', rl);
	if (rl + (library ? 8 : 0) >= sizeof r->repo)
		return bad(e, s, "repository name too long");
	snprintf(r->repo, sizeof r->repo, "%s%.*s", library ? "library/" : "", (int)rl, repo);
	if (!r->tag[0] && !r->digest[0])
		strcpy(r->tag, "latest");
	return 0;
}

int oci_ref_format(const struct oci_ref *r, char *out, size_t cap)
{
	int n = snprintf(out, cap, "%s/%s%s%s%s%s", r->registry, r->repo, r->tag[0] ? ":" : "",
			 r->tag, r->digest[0] ? "@" : "", r->digest);
	if (n < 0 || (size_t)n >= cap)
		return -1;
	return n;
}

const char *oci_ref_endpoint(const struct oci_ref *r)
{
	return strcmp(r->registry, "docker.io") == 0 ? "registry-1.docker.io" : r->registry;
}
