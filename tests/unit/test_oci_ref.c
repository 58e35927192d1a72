/* Unit tests for src/oci/ref.c: references parsed and normalised as
 * Docker does (docker.io, library/, latest), formatted back, and bad input
 * refused with an error that quotes the reference and says what is wrong. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "oci/ref.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define HEX "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

struct ok_case {
	const char *in;
	const char *registry, *repo, *tag, *digest, *formatted, *endpoint;
};

static const struct ok_case oks[] = {
	{"busybox", "docker.io", "library/busybox", "latest", "", "docker.io/library/busybox:latest",
	 "registry-1.docker.io"},
	{"busybox:1.36", "docker.io", "library/busybox", "1.36", "",
	 "docker.io/library/busybox:1.36", "registry-1.docker.io"},
	{"moat/test", "docker.io", "moat/test", "latest", "", "docker.io/moat/test:latest",
	 "registry-1.docker.io"},
	{"docker.io/busybox", "docker.io", "library/busybox", "latest", "",
	 "docker.io/library/busybox:latest", "registry-1.docker.io"},
	{"docker.io/library/busybox", "docker.io", "library/busybox", "latest", "",
	 "docker.io/library/busybox:latest", "registry-1.docker.io"},
	{"index.docker.io/library/alpine:3", "docker.io", "library/alpine", "3", "",
	 "docker.io/library/alpine:3", "registry-1.docker.io"},
	{"registry-1.docker.io/x/y", "docker.io", "x/y", "latest", "", "docker.io/x/y:latest",
	 "registry-1.docker.io"},
	{"127.0.0.1:5000/moat/one", "127.0.0.1:5000", "moat/one", "latest", "",
	 "127.0.0.1:5000/moat/one:latest", "127.0.0.1:5000"},
	{"localhost/a", "localhost", "a", "latest", "", "localhost/a:latest", "localhost"},
	{"localhost:5000/a:v_1.2-rc", "localhost:5000", "a", "v_1.2-rc", "",
	 "localhost:5000/a:v_1.2-rc", "localhost:5000"},
	{"ghcr.io/o/r/deep/name:tag", "ghcr.io", "o/r/deep/name", "tag", "",
	 "ghcr.io/o/r/deep/name:tag", "ghcr.io"},
	{"Quay.IO/a/b", "Quay.IO", "a/b", "latest", "", "Quay.IO/a/b:latest", "Quay.IO"},
	/* a digest alone: no tag; both: both kept */
	{"busybox@sha256:" HEX, "docker.io", "library/busybox", "", "sha256:" HEX,
	 "docker.io/library/busybox@sha256:" HEX, "registry-1.docker.io"},
	{"h.example:443/a/b:t@sha256:" HEX, "h.example:443", "a/b", "t", "sha256:" HEX,
	 "h.example:443/a/b:t@sha256:" HEX, "h.example:443"},
	/* a port-looking tag without a slash is a tag (Docker's rule) */
	{"localhost:5000", "docker.io", "library/localhost", "5000", "",
	 "docker.io/library/localhost:5000", "registry-1.docker.io"},
	{"a__b-c--d/e.f_g", "docker.io", "a__b-c--d/e.f_g", "latest", "",
	 "docker.io/a__b-c--d/e.f_g:latest", "registry-1.docker.io"},
	/* a first component with a '.' is a host (Docker's rule) */
	{"a.b/c", "a.b", "c", "latest", "", "a.b/c:latest", "a.b"},
};

Test(oci_ref, parses_and_normalises)
{
	for (size_t i = 0; i < sizeof oks / sizeof oks[0]; i++) {
		const struct ok_case *c = &oks[i];
		struct oci_ref r;
		struct moat_err e = {0};
		cr_assert_eq(oci_ref_parse(c->in, &r, &e), 0, "%s: %s", c->in, e.msg);
		cr_expect_str_eq(r.registry, c->registry, "%s", c->in);
		cr_expect_str_eq(r.repo, c->repo, "%s", c->in);
		cr_expect_str_eq(r.tag, c->tag, "%s", c->in);
		cr_expect_str_eq(r.digest, c->digest, "%s", c->in);
		cr_expect_str_eq(oci_ref_endpoint(&r), c->endpoint, "%s", c->in);
		char out[1200];
		int n = oci_ref_format(&r, out, sizeof out);
		cr_assert_eq(n, (int)strlen(c->formatted), "%s", c->in);
		cr_expect_str_eq(out, c->formatted, "%s", c->in);
		/* the formatted form is a fixed point */
		struct oci_ref r2;
		cr_assert_eq(oci_ref_parse(out, &r2, &e), 0, "%s: %s", out, e.msg);
		cr_expect_eq(memcmp(&r, &r2, sizeof r), 0, "%s -> %s", c->in, out);
	}
}

struct bad_case {
	const char *in, *why;
};

static const struct bad_case bads[] = {
	{"", "empty"},
	{"Busybox", "bad repository name"},
	{"a/B", "bad repository name"},
	{"a//b", "bad repository name"},
	{"a/", "ends with '/'"},
	{"-a", "bad repository name"},
	{"a-", "bad repository name"},
	{"a..b", "bad repository name"},
	{"a___b", "bad repository name"},
	{"a b", "bad repository name"},
	{"busybox:", "bad tag"},
	{"busybox:.x", "bad tag"},
	{"busybox:a/b", "bad registry"},
	{"busybox:t!", "bad tag"},
	{"busybox@sha256:abc", "the digest is not sha256"},
	{"busybox@sha512:" HEX, "the digest is not sha256"},
	{"busybox@sha256:" "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
	 "the digest is not sha256"},
	{"@sha256:" HEX, "no repository name"},
	{"h.example:0/a", "bad registry"},
	{"h.example:65536/a", "bad registry"},
	{"h.example:123456/a", "bad registry"},
	{"h.example:/a", "bad registry"},
	{"h.example:x/a", "bad registry"},
	{".h.example/a", "bad registry"},
	{"h_x.example/a", "bad registry"},
	{"h.example/", "no repository name"},
};

Test(oci_ref, bad_input_names_the_culprit)
{
	for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
		struct oci_ref r;
		struct moat_err e = {0};
		cr_assert_eq(oci_ref_parse(bads[i].in, &r, &e), -1, "accepted \"%s\"", bads[i].in);
		cr_expect_eq(e.errnum, EINVAL, "%s", bads[i].in);
		char quoted[200];
		snprintf(quoted, sizeof quoted, "\"%s\"", bads[i].in);
		cr_expect(strstr(e.msg, quoted) != NULL, "%s: %s", bads[i].in, e.msg);
		cr_expect(strstr(e.msg, bads[i].why) != NULL, "%s: %s (want %s)", bads[i].in, e.msg,
			  bads[i].why);
	}
}

Test(oci_ref, limits)
{
	char big[1100];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = 0;
	struct oci_ref r;
	struct moat_err e = {0};
	cr_expect_eq(oci_ref_parse(big, &r, &e), -1);
	cr_expect(strstr(e.msg, "too long") && strstr(e.msg, "..."), "%s", e.msg);
	/* a tag of 128 is fine, of 129 not */
	char t[200] = "busybox:";
	memset(t + 8, 'x', 128);
	cr_expect_eq(oci_ref_parse(t, &r, &e), 0, "%s", e.msg);
	t[8 + 128] = 'x';
	t[8 + 129] = 0;
	cr_expect_eq(oci_ref_parse(t, &r, &e), -1);
	/* a repository that fills repo[] once library/ is added */
	char rp[300];
	memset(rp, 'b', 250);
	rp[250] = 0;
	cr_expect_eq(oci_ref_parse(rp, &r, &e), -1);
	cr_expect(strstr(e.msg, "too long"), "%s", e.msg);
	/* format refuses a short buffer */
	cr_assert_eq(oci_ref_parse("busybox", &r, &e), 0);
	char small[10];
	cr_expect_eq(oci_ref_format(&r, small, sizeof small), -1);
}
