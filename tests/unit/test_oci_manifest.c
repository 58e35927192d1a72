/* Unit tests for src/oci/manifest.c (and the descriptor parser that
 * layout_json.c shares): the document kind from mediaType / Content-Type /
 * shape, the host's platform picked from an index, OCI and Docker v2
 * manifests, configs, and bad JSON refused with an error naming the
 * document and the field. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "oci/layout_json.h"
#include "oci/manifest.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define H(c) #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c \
	     #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c #c
#define D(c) "sha256:" H(c)

static int kind(const char *j, const char *ct, enum oci_doc *k, struct moat_err *e)
{
	return oci_doc_kind(j, strlen(j), ct, k, e);
}

Test(oci_manifest, doc_kind)
{
	enum oci_doc k;
	struct moat_err e = {0};
	cr_assert_eq(kind("{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_INDEX "\"}", NULL, &k, &e), 0);
	cr_expect_eq(k, OCI_DOC_INDEX);
	cr_assert_eq(kind("{\"schemaVersion\":2,\"mediaType\":\"" DOCKER_MT_LIST "\"}", NULL, &k, &e), 0);
	cr_expect_eq(k, OCI_DOC_INDEX);
	cr_assert_eq(kind("{\"schemaVersion\":2,\"mediaType\":\"" DOCKER_MT_MANIFEST "\"}", NULL, &k, &e),
		     0);
	cr_expect_eq(k, OCI_DOC_MANIFEST);
	/* no mediaType: the Content-Type (with parameters), else the shape */
	cr_assert_eq(kind("{\"schemaVersion\":2}", OCI_MT_MANIFEST "; charset=utf-8", &k, &e), 0);
	cr_expect_eq(k, OCI_DOC_MANIFEST);
	cr_assert_eq(kind("{\"schemaVersion\":2,\"manifests\":[]}", "application/json", &k, &e), 0);
	cr_expect_eq(k, OCI_DOC_INDEX);
	cr_assert_eq(kind("{\"layers\":[]}", NULL, &k, &e), 0);
	cr_expect_eq(k, OCI_DOC_MANIFEST);
	/* refused, each naming why */
	static const struct {
		const char *j, *why;
	} bad[] = {
		{"{\"schemaVersion\":1,\"fsLayers\":[]}", "schemaVersion is not 2"},
		{"{\"mediaType\":\"application/vnd.oci.artifact.manifest.v1+json\"}",
		 "unsupported media type \"application/vnd.oci.artifact.manifest.v1+json\""},
		{"{\"mediaType\":7}", "mediaType is not a string"},
		{"{\"manifests\":[],\"layers\":[]}", "neither an index"},
		{"{}", "neither an index"},
		{"[1,2]", "not a JSON object"},
		{"{\"a\":1,\"a\":2}", "not JSON"},
		{"{\"schemaVersion\":2", "not JSON"},
		{"", "not JSON"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct moat_err be = {0};
		cr_expect_eq(kind(bad[i].j, NULL, &k, &be), -1, "%s", bad[i].j);
		cr_expect_eq(be.errnum, EBADMSG, "%s", bad[i].j);
		cr_expect(strstr(be.msg, "manifest: ") == be.msg, "%s", be.msg);
		cr_expect(strstr(be.msg, bad[i].why), "%s: %s", bad[i].j, be.msg);
	}
}

static const char *index_doc =
	"{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_INDEX "\",\"manifests\":["
	/* an attestation: not an image, passed over */
	"{\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"digest\":\"" D(0)
	"\",\"size\":10,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}},"
	"{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D(1) "\",\"size\":11,"
	"\"platform\":{\"os\":\"linux\",\"architecture\":\"arm\",\"variant\":\"v6\"}},"
	"{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D(2) "\",\"size\":12,"
	"\"platform\":{\"os\":\"linux\",\"architecture\":\"arm\",\"variant\":\"v7\"}},"
	"{\"mediaType\":\"" DOCKER_MT_MANIFEST "\",\"digest\":\"" D(3) "\",\"size\":13,"
	"\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}},"
	"{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D(4) "\",\"size\":14,"
	"\"platform\":{\"os\":\"windows\",\"architecture\":\"amd64\"}}]}";

Test(oci_manifest, index_platform_pick)
{
	struct oci_desc d;
	struct moat_err e = {0};
	size_t n = strlen(index_doc);
	cr_assert_eq(oci_index_pick(index_doc, n, "linux", "amd64", NULL, &d, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, D(3));
	cr_expect_str_eq(d.media_type, DOCKER_MT_MANIFEST);
	cr_expect_eq(d.size, 13);
	cr_assert_eq(oci_index_pick(index_doc, n, "linux", "arm", "v7", &d, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, D(2));
	cr_assert_eq(oci_index_pick(index_doc, n, "linux", "arm", NULL, &d, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, D(1)); /* any variant: the first */
	cr_assert_eq(oci_index_pick(index_doc, n, "windows", "amd64", NULL, &d, &e), 0);
	cr_expect_str_eq(d.digest, D(4));
	/* none: the error lists what there is */
	struct moat_err ne = {0};
	cr_assert_eq(oci_index_pick(index_doc, n, "linux", "riscv64", NULL, &d, &ne), -1);
	cr_expect_eq(ne.errnum, ENOENT);
	cr_expect(strstr(ne.msg, "no image for linux/riscv64"), "%s", ne.msg);
	cr_expect(strstr(ne.msg, "linux/arm/v6, linux/arm/v7, linux/amd64, windows/amd64"), "%s",
		  ne.msg);
	/* the host's platform is one of the names the registries use */
	const char *os, *arch, *var;
	oci_host_platform(&os, &arch, &var);
	cr_expect_str_eq(os, "linux");
	cr_expect_str_neq(arch, "unknown");
}

Test(oci_manifest, index_without_platforms)
{
	struct oci_desc d;
	struct moat_err e = {0};
	const char *one = "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_MT_MANIFEST
			  "\",\"digest\":\"" D(5) "\",\"size\":5}]}";
	cr_assert_eq(oci_index_pick(one, strlen(one), "linux", "amd64", NULL, &d, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, D(5));
	const char *two = "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_MT_MANIFEST
			  "\",\"digest\":\"" D(5) "\",\"size\":5},{\"mediaType\":\"" OCI_MT_MANIFEST
			  "\",\"digest\":\"" D(6) "\",\"size\":6}]}";
	cr_expect_eq(oci_index_pick(two, strlen(two), "linux", "amd64", NULL, &d, &e), -1);
}

Test(oci_manifest, index_bad_entries_named)
{
	static const struct {
		const char *j, *why;
	} bad[] = {
		{"{\"schemaVersion\":2}", "no manifests array"},
		{"{\"schemaVersion\":2,\"manifests\":[7]}", "a descriptor is not an object"},
		{"{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"" D(1) "\",\"size\":1}]}",
		 "no valid mediaType"},
		{"{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_MT_MANIFEST
		 "\",\"digest\":\"sha256:ABC\",\"size\":1}]}",
		 "descriptor digest \"sha256:ABC\" is not sha256:<64 lowercase hex>"},
		{"{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_MT_MANIFEST
		 "\",\"digest\":\"" D(1) "\",\"size\":-1}]}",
		 "no valid size"},
		{"{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_MT_MANIFEST
		 "\",\"digest\":\"" D(1) "\",\"size\":\"1\"}]}",
		 "no valid size"},
		{"{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_MT_MANIFEST
		 "\",\"digest\":\"" D(1) "\",\"size\":1,\"platform\":\"linux\"}]}",
		 "a platform is not"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct oci_desc d;
		struct moat_err e = {0};
		cr_expect_eq(oci_index_pick(bad[i].j, strlen(bad[i].j), "linux", "amd64", NULL, &d, &e),
			     -1, "%s", bad[i].j);
		cr_expect_eq(e.errnum, EBADMSG, "%s", bad[i].j);
		cr_expect(strstr(e.msg, bad[i].why), "%s: %s", bad[i].j, e.msg);
	}
}

#define LAYER(mt, c, sz) "{\"mediaType\":\"" mt "\",\"digest\":\"" D(c) "\",\"size\":" #sz "}"

Test(oci_manifest, oci_and_docker_manifests)
{
	const char *oci = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_MANIFEST "\",\"config\":"
		LAYER(OCI_MT_CONFIG, a, 100) ",\"layers\":["
		LAYER("application/vnd.oci.image.layer.v1.tar+gzip", b, 200) ","
		LAYER("application/vnd.oci.image.layer.v1.tar", c, 300) ","
		LAYER("application/vnd.oci.image.layer.v1.tar+zstd", d, 0) "]}";
	struct oci_manifest m;
	struct moat_err e = {0};
	cr_assert_eq(oci_manifest_parse(oci, strlen(oci), &m, &e), 0, "%s", e.msg);
	cr_expect_str_eq(m.config.digest, D(a));
	cr_expect_eq(m.config.size, 100);
	cr_assert_eq(m.nlayers, 3);
	cr_expect_str_eq(m.layers[0].digest, D(b));
	cr_expect_str_eq(m.layers[2].media_type, "application/vnd.oci.image.layer.v1.tar+zstd");
	cr_expect_eq(m.layers[1].size, 300);
	const char *docker = "{\"schemaVersion\":2,\"mediaType\":\"" DOCKER_MT_MANIFEST "\",\"config\":"
		LAYER(DOCKER_MT_CONFIG, a, 1) ",\"layers\":["
		LAYER("application/vnd.docker.image.rootfs.diff.tar.gzip", b, 2) "]}";
	cr_assert_eq(oci_manifest_parse(docker, strlen(docker), &m, &e), 0, "%s", e.msg);
	cr_expect_eq(m.nlayers, 1);
	cr_expect_str_eq(m.config.media_type, DOCKER_MT_CONFIG);
}

Test(oci_manifest, manifests_refused)
{
	static const struct {
		const char *j, *why;
	} bad[] = {
		{"{\"schemaVersion\":1}", "schemaVersion is not 2"},
		{"{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_INDEX "\"}",
		 "is not an image manifest"},
		{"{\"schemaVersion\":2,\"layers\":[]}", "manifest: config: a descriptor is not an object"},
		{"{\"schemaVersion\":2,\"config\":" LAYER("application/vnd.oci.empty.v1+json", a, 2)
		 ",\"layers\":[]}",
		 "is not an image config (an artifact?)"},
		{"{\"schemaVersion\":2,\"config\":" LAYER(OCI_MT_CONFIG, a, 2) "}", "no layers array"},
		{"{\"schemaVersion\":2,\"config\":" LAYER(OCI_MT_CONFIG, a, 2) ",\"layers\":["
		 LAYER("application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", b, 2) "]}",
		 "manifest: layer " D(b) ": media type"},
		{"{\"schemaVersion\":2,\"config\":" LAYER(OCI_MT_CONFIG, a, 2) ",\"layers\":["
		 "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"" D(b)
		 "\"}]}",
		 "manifest: layer: descriptor " D(b) " has no valid size"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct oci_manifest m;
		struct moat_err e = {0};
		cr_expect_eq(oci_manifest_parse(bad[i].j, strlen(bad[i].j), &m, &e), -1, "%s", bad[i].j);
		cr_expect_eq(e.errnum, EBADMSG, "%s", bad[i].j);
		cr_expect(strstr(e.msg, bad[i].why), "%s: %s", bad[i].j, e.msg);
	}
	/* more than OCI_MAX_LAYERS */
	char big[40000];
	int n = snprintf(big, sizeof big, "{\"schemaVersion\":2,\"config\":" LAYER(OCI_MT_CONFIG, a, 2)
			 ",\"layers\":[");
	for (int i = 0; i <= OCI_MAX_LAYERS; i++)
		n += snprintf(big + n, sizeof big - (size_t)n, "%s" LAYER("application/vnd.oci.image.layer.v1.tar", b, 1),
			      i ? "," : "");
	snprintf(big + n, sizeof big - (size_t)n, "]}");
	struct oci_manifest m;
	struct moat_err e = {0};
	cr_expect_eq(oci_manifest_parse(big, strlen(big), &m, &e), -1);
	cr_expect(strstr(e.msg, "more than 128 layers"), "%s", e.msg);
}

Test(oci_manifest, config_defaults)
{
	const char *j = "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{"
			"\"Env\":[\"PATH=/bin\",\"A=b c\"],\"Entrypoint\":[\"/bin/echo\"],"
			"\"Cmd\":[\"hi\",\"there\"],\"WorkingDir\":\"/w\",\"User\":\"1000:1000\"},"
			"\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D(1) "\",\"" D(2) "\"]}}";
	struct oci_config c;
	struct moat_err e = {0};
	cr_assert_eq(oci_config_parse(j, strlen(j), &c, &e), 0, "%s", e.msg);
	cr_expect_str_eq(c.env[1], "A=b c");
	cr_expect_null(c.env[2]);
	cr_expect_str_eq(c.entrypoint[0], "/bin/echo");
	cr_expect_str_eq(c.cmd[1], "there");
	cr_expect_str_eq(c.workdir, "/w");
	cr_expect_str_eq(c.user, "1000:1000");
	cr_expect_eq(c.ndiff, 2);
	cr_expect_str_eq(c.diff_ids[1], D(2));
	cr_expect_str_eq(c.os, "linux");
	oci_config_free(&c);
	/* no config at all: no defaults, still the layers */
	const char *bare = "{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
	cr_assert_eq(oci_config_parse(bare, strlen(bare), &c, &e), 0, "%s", e.msg);
	cr_expect_null(c.env);
	cr_expect_null(c.cmd);
	cr_expect_null(c.user);
	oci_config_free(&c);
	static const struct {
		const char *j, *why;
	} bad[] = {
		{"{\"config\":{}}", "no rootfs"},
		{"{\"rootfs\":{\"type\":\"other\",\"diff_ids\":[]}}", "no rootfs"},
		{"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:1\"]}}",
		 "a diff_id is not sha256"},
		{"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]},\"config\":{\"Env\":\"A=b\"}}",
		 "Env is not an array"},
		{"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]},\"config\":{\"Cmd\":[\"a\",1]}}",
		 "Cmd holds a non-string"},
		{"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]},\"config\":{\"Cmd\":[\"a\\u0000b\"]}}",
		 "not JSON"}, /* jansson refuses the NUL itself */
		{"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]},\"config\":{\"User\":0}}",
		 "User is not a string"},
		{"{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]},\"config\":[]}",
		 "config is not an object"},
		{"{\"os\":7,\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}", "os / architecture"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct moat_err be = {0};
		cr_expect_eq(oci_config_parse(bad[i].j, strlen(bad[i].j), &c, &be), -1, "%s", bad[i].j);
		cr_expect(strstr(be.msg, "image config: ") == be.msg, "%s", be.msg);
		cr_expect(strstr(be.msg, bad[i].why), "%s: %s", bad[i].j, be.msg);
		oci_config_free(&c);
	}
}

/* layout_json.c picks with the same descriptor rules */
Test(oci_manifest, layout_index_shares_the_descriptor_rules)
{
	const char *j = "{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"" D(7) "\",\"size\":7,"
			"\"annotations\":{\"" OCI_REF_NAME "\":\"v1\"}}]}";
	struct oci_desc d;
	char name[64];
	struct moat_err e = {0};
	/* no mediaType: allowed in index.json (some tools omit it) */
	cr_assert_eq(oci_layout_pick(j, strlen(j), "v1", &d, name, sizeof name, &e), 0, "%s", e.msg);
	cr_expect_str_eq(d.digest, D(7));
	cr_expect_str_eq(d.media_type, "");
	cr_expect_str_eq(name, "v1");
	const char *bad = "{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:xyz\",\"size\":7}]}";
	cr_expect_eq(oci_layout_pick(bad, strlen(bad), NULL, &d, name, sizeof name, &e), -1);
	cr_expect(strstr(e.msg, "index.json: descriptor digest \"sha256:xyz\""), "%s", e.msg);
	cr_expect_eq(oci_layout_pick(j, strlen(j), "v2", &d, name, sizeof name, &e), -1);
	cr_expect(strstr(e.msg, "no single image named \"v2\"; it has: \"v1\""), "%s", e.msg);
}
