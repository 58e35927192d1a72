/* Unit tests for src/oci/layout.c: an OCI layout directory written here
 * byte by byte is imported (blobs read from files), exported as a tar and
 * imported again into a second store (small members from memory, a 5 MiB
 * layer streamed from the tar), and the stores compared on the host. Bad
 * archives are refused naming the blob, with the manifest never stored. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "base/util.h"
#include "oci_dirs.h"
#include "oci/blobs.h"
#include "oci/digest.h"
#include "oci/layout.h"
#include "oci/layout_json.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LAYER_LEN (5u << 20) /* over layout.c's in-memory limit: streamed */

static char base[64];
static char dir[128], store_a[128], store_b[128];
static char layer_d[OCI_DIGEST_LEN + 1], config_d[OCI_DIGEST_LEN + 1], man_d[OCI_DIGEST_LEN + 1];
static unsigned char *layer;

static void put(const char *root, const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", root, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0, "%s", path);
	cr_assert_eq(write(fd, p, n), (ssize_t)n);
	close(fd);
}

static void put_blob(const void *p, size_t n, char out[OCI_DIGEST_LEN + 1])
{
	cr_assert_eq(oci_sha256_buf(p, n, out), 0);
	char name[128];
	snprintf(name, sizeof name, "blobs/sha256/%s", out + 7);
	put(dir, name, p, n);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	char *s = NULL;
	cr_assert(vasprintf(&s, f, ap) >= 0);
	va_end(ap);
	return s;
}

/* the layout: one layer image, tag name */
static void write_layout(const char *name)
{
	char p[256];
	snprintf(p, sizeof p, "%s/blobs", dir);
	mkdir(dir, 0755);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/blobs/sha256", dir);
	mkdir(p, 0755);
	put_blob(layer, LAYER_LEN, layer_d);
	char *conf = fmt("{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Cmd\":[\"/bin/sh\"]},"
			 "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%s\"]}}",
			 layer_d);
	put_blob(conf, strlen(conf), config_d);
	char *man = fmt("{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_MANIFEST "\",\"config\":"
			"{\"mediaType\":\"" OCI_MT_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
			"\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
			"\"digest\":\"%s\",\"size\":%u}]}",
			config_d, strlen(conf), layer_d, LAYER_LEN);
	put_blob(man, strlen(man), man_d);
	char *idx = fmt("{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_MT_MANIFEST
			"\",\"digest\":\"%s\",\"size\":%zu,\"annotations\":{\"" OCI_REF_NAME
			"\":\"%s\"}}]}",
			man_d, strlen(man), name);
	put(dir, "index.json", idx, strlen(idx));
	put(dir, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
	free(conf);
	free(man);
	free(idx);
}

static void setup(void)
{
	snprintf(base, sizeof base, "/tmp/moat-unit-layout-XXXXXX");
	cr_assert_not_null(mkdtemp(base));
	snprintf(dir, sizeof dir, "%s/layout", base);
	snprintf(store_a, sizeof store_a, "%s/a", base);
	snprintf(store_b, sizeof store_b, "%s/b", base);
	struct moat_err e = {0};
	cr_assert_eq(oci_blobs_open(store_a, &e), 0, "%s", e.msg);
	cr_assert_eq(oci_blobs_open(store_b, &e), 0, "%s", e.msg);
	layer = malloc(LAYER_LEN);
	cr_assert_not_null(layer);
	uint32_t x = 12345;
	for (size_t i = 0; i < LAYER_LEN; i++) {
		x = x * 1103515245u + 12345u;
		layer[i] = (unsigned char)(x >> 16);
	}
	write_layout("v1");
}

static void teardown(void)
{
	free(layer);
	moat_rm_tree(base);
}


static struct oci_progress last;
static void on_progress(void *arg, const struct oci_progress *p)
{
	(void)arg;
	cr_assert(p->bytes_done <= p->bytes_total, "%lld > %lld", (long long)p->bytes_done,
		  (long long)p->bytes_total);
	last = *p;
}

TestSuite(oci_layout, .init = setup, .fini = teardown);

Test(oci_layout, dir_export_tar_round_trip)
{
	struct oci_image im;
	struct moat_err e = {0};
	cr_assert_eq(oci_import(store_a, dir, NULL, -1, on_progress, NULL, &im, &e), 0, "%s", e.msg);
	cr_expect_str_eq(im.manifest, man_d);
	cr_expect_str_eq(im.name, "v1");
	cr_expect_eq(im.m.nlayers, 1);
	cr_expect_str_eq(im.config.diff_ids[0], layer_d);
	cr_expect_str_eq(im.config.cmd[0], "/bin/sh");
	cr_expect_eq(last.layers_done, 1);
	cr_expect_eq(last.layers_total, 1);
	cr_expect_eq(last.bytes_done, last.bytes_total);
	oci_image_free(&im);
	cr_expect_eq(oci_dir_count(store_a, "blobs/sha256"), 3);
	cr_expect_eq(oci_dir_count(store_a, "tmp"), 0);
	/* export, then into another store from the tar */
	char tar[256];
	snprintf(tar, sizeof tar, "%s/out.tar", base);
	int fd = open(tar, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0);
	cr_assert_eq(oci_export(store_a, man_d, "docker.io/x/y:1", fd, &e), 0, "%s", e.msg);
	close(fd);
	cr_assert_eq(oci_import(store_b, tar, NULL, -1, NULL, NULL, &im, &e), 0, "%s", e.msg);
	cr_expect_str_eq(im.manifest, man_d);
	cr_expect_str_eq(im.name, "docker.io/x/y:1");
	oci_image_free(&im);
	/* the same bytes in both stores: the layer read back byte for byte */
	cr_expect_eq(oci_dir_count(store_b, "blobs/sha256"), 3);
	char pb[256];
	cr_assert_eq(oci_blob_path(store_b, layer_d, pb, sizeof pb), 0);
	int lfd = open(pb, O_RDONLY);
	cr_assert(lfd >= 0);
	unsigned char *back = malloc(LAYER_LEN + 1);
	cr_assert_eq(read(lfd, back, LAYER_LEN + 1), (ssize_t)LAYER_LEN);
	close(lfd);
	cr_expect_eq(memcmp(back, layer, LAYER_LEN), 0);
	free(back);
	/* by name: the right one; a wrong name lists what there is */
	cr_expect_eq(oci_import(store_b, tar, "docker.io/x/y:2", -1, NULL, NULL, &im, &e), -1);
	cr_expect(strstr(e.msg, "no single image named \"docker.io/x/y:2\"; it has: "
				"\"docker.io/x/y:1\""), "%s", e.msg);
}

Test(oci_layout, import_keeps_other_writers_temp_files)
{
	/* another job's blob being written: an import must not remove it */
	char p[256];
	snprintf(p, sizeof p, "%s/tmp/another-writer", store_a);
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	cr_assert(fd >= 0);
	close(fd);
	struct oci_image im;
	struct moat_err e = {0};
	cr_assert_eq(oci_import(store_a, dir, NULL, -1, NULL, NULL, &im, &e), 0, "%s", e.msg);
	oci_image_free(&im);
	struct stat st;
	cr_expect_eq(stat(p, &st), 0, "the import removed another writer's temp file");
}

Test(oci_layout, tampered_layer_refused_manifest_not_stored)
{
	char p[256];
	snprintf(p, sizeof p, "%s/blobs/sha256/%s", dir, layer_d + 7);
	int fd = open(p, O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, "\x01", 1, LAYER_LEN / 2), 1);
	close(fd);
	struct oci_image im;
	struct moat_err e = {0};
	cr_assert_eq(oci_import(store_a, dir, NULL, -1, NULL, NULL, &im, &e), -1);
	cr_expect_eq(e.errnum, EBADMSG);
	cr_expect(strstr(e.msg, layer_d) && strstr(e.msg, "digest mismatch"), "%s", e.msg);
	cr_expect(!oci_blob_has(store_a, man_d), "the manifest went in");
	cr_expect(!oci_blob_has(store_a, layer_d));
	cr_expect_eq(oci_dir_count(store_a, "tmp"), 0);
}

Test(oci_layout, room_refused)
{
	struct oci_image im;
	struct moat_err e = {0};
	cr_assert_eq(oci_import(store_a, dir, NULL, LAYER_LEN / 2, NULL, NULL, &im, &e), -1);
	cr_expect_eq(e.errnum, EFBIG, "%s", e.msg);
	cr_expect(!oci_blob_has(store_a, man_d));
	cr_expect(!oci_blob_has(store_a, layer_d));
	cr_expect_eq(oci_dir_count(store_a, "tmp"), 0);
}

Test(oci_layout, not_an_archive_named)
{
	char p[256];
	snprintf(p, sizeof p, "%s/empty", base);
	mkdir(p, 0755);
	struct oci_image im;
	struct moat_err e = {0};
	cr_assert_eq(oci_import(store_a, p, NULL, -1, NULL, NULL, &im, &e), -1);
	cr_expect(strstr(e.msg, "neither an OCI layout") && strstr(e.msg, p), "%s", e.msg);
	/* a blob the manifest names is missing */
	snprintf(p, sizeof p, "%s/blobs/sha256/%s", dir, layer_d + 7);
	cr_assert_eq(unlink(p), 0);
	cr_assert_eq(oci_import(store_a, dir, NULL, -1, NULL, NULL, &im, &e), -1);
	cr_expect(strstr(e.msg, layer_d) && strstr(e.msg, "missing"), "%s", e.msg);
	cr_expect(!oci_blob_has(store_a, man_d));
}
