/* Unit tests for src/oci/blobs.c: a blob is in the store only once its
 * digest and size are right; every failure (digest mismatch, more or fewer
 * bytes than announced, over the room the store has, abort) leaves nothing
 * in blobs/ or tmp/, checked by listing the directories on the host. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "base/util.h"
#include "oci_dirs.h"
#include "oci/blobs.h"
#include "oci/digest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

static void setup(void)
{
	snprintf(root, sizeof root, "/tmp/moat-unit-blobs-XXXXXX");
	cr_assert_not_null(mkdtemp(root));
	struct moat_err e = {0};
	cr_assert_eq(oci_blobs_open(root, &e), 0, "%s", e.msg);
}

static void teardown(void)
{
	moat_rm_tree(root);
}

static size_t count(const char *sub)
{
	return oci_dir_count(root, sub);
}

static void assert_empty(void)
{
	cr_assert_eq(count("blobs/sha256"), 0, "a blob was left");
	cr_assert_eq(count("tmp"), 0, "a temp file was left");
}

static void digest_of(const char *s, char out[OCI_DIGEST_LEN + 1])
{
	cr_assert_eq(oci_sha256_buf(s, strlen(s), out), 0);
}

TestSuite(oci_blobs, .init = setup, .fini = teardown);

Test(oci_blobs, right_digest_stored_and_read_back)
{
	char d[OCI_DIGEST_LEN + 1], got[OCI_DIGEST_LEN + 1];
	digest_of("hello blob", d);
	struct moat_err e = {0};
	struct oci_blob_writer *w = oci_blob_begin(root, d, 10, -1, &e);
	cr_assert_not_null(w, "%s", e.msg);
	cr_assert_eq(count("tmp"), 1); /* written aside first */
	cr_assert_eq(count("blobs/sha256"), 0);
	cr_assert_eq(oci_blob_write(w, "hello ", 6, &e), 0, "%s", e.msg);
	cr_assert_eq(oci_blob_write(w, "blob", 4, &e), 0, "%s", e.msg);
	cr_assert_eq(oci_blob_commit(w, got, &e), 0, "%s", e.msg);
	cr_expect_str_eq(got, d);
	cr_expect_eq(count("tmp"), 0);
	cr_expect(oci_blob_has(root, d));
	/* on the host: the file named by the digest, with the bytes */
	char p[256];
	cr_assert_eq(oci_blob_path(root, d, p, sizeof p), 0);
	char want[256];
	snprintf(want, sizeof want, "%s/blobs/sha256/%s", root, d + 7);
	cr_expect_str_eq(p, want);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	cr_expect_eq(st.st_size, 10);
	char *data = NULL;
	size_t len = 0;
	cr_assert_eq(oci_blob_read(root, d, 100, &data, &len, &e), 0, "%s", e.msg);
	cr_expect_eq(len, 10);
	cr_expect_str_eq(data, "hello blob");
	free(data);
	/* smaller than the cap asked for: refused */
	cr_expect_eq(oci_blob_read(root, d, 5, &data, &len, &e), -1);
	cr_expect_eq(e.errnum, EFBIG);
	/* changed on disk: refused when read */
	int fd = open(p, O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, "J", 1, 0), 1);
	close(fd);
	cr_expect_eq(oci_blob_read(root, d, 100, &data, &len, &e), -1);
	cr_expect_eq(e.errnum, EBADMSG);
	cr_expect(strstr(e.msg, "changed on disk"), "%s", e.msg);
	cr_expect_null(data);
	cr_assert_eq(oci_blob_remove(root, d), 0);
	cr_expect(!oci_blob_has(root, d));
	cr_expect_eq(oci_blob_remove(root, d), 0); /* gone already: fine */
	assert_empty();
}

Test(oci_blobs, digest_mismatch_leaves_nothing)
{
	char d[OCI_DIGEST_LEN + 1];
	digest_of("the real bytes", d);
	struct moat_err e = {0};
	struct oci_blob_writer *w = oci_blob_begin(root, d, 14, -1, &e);
	cr_assert_not_null(w, "%s", e.msg);
	cr_assert_eq(oci_blob_write(w, "the fake bytes", 14, &e), 0, "%s", e.msg);
	cr_assert_eq(oci_blob_commit(w, NULL, &e), -1);
	cr_expect_eq(e.errnum, EBADMSG);
	cr_expect(strstr(e.msg, d) && strstr(e.msg, "digest mismatch"), "%s", e.msg);
	cr_expect(!oci_blob_has(root, d));
	assert_empty();
}

Test(oci_blobs, check_then_abort_leaves_nothing)
{
	char d[OCI_DIGEST_LEN + 1];
	digest_of("abc", d);
	struct moat_err e = {0};
	struct oci_blob_writer *w = oci_blob_begin(root, d, 3, -1, &e);
	cr_assert_not_null(w);
	cr_assert_eq(oci_blob_write(w, "abc", 3, &e), 0);
	cr_assert_eq(oci_blob_check(w, &e), 0, "%s", e.msg);
	cr_expect_eq(oci_blob_written(w), 3);
	cr_expect_eq(oci_blob_write(w, "d", 1, &e), -1); /* nothing after the check */
	oci_blob_abort(w); /* a pull that failed on another blob */
	assert_empty();
}

Test(oci_blobs, sizes_never_trusted)
{
	char d[OCI_DIGEST_LEN + 1];
	digest_of("12345", d);
	struct moat_err e = {0};
	/* more than announced: refused at the write that passes it */
	struct oci_blob_writer *w = oci_blob_begin(root, d, 4, -1, &e);
	cr_assert_not_null(w);
	cr_assert_eq(oci_blob_write(w, "1234", 4, &e), 0);
	cr_expect_eq(oci_blob_write(w, "5", 1, &e), -1);
	cr_expect_eq(e.errnum, EFBIG);
	cr_expect(strstr(e.msg, "more than the 4 bytes announced"), "%s", e.msg);
	oci_blob_abort(w);
	assert_empty();
	/* fewer: refused at the commit */
	w = oci_blob_begin(root, d, 6, -1, &e);
	cr_assert_not_null(w);
	cr_assert_eq(oci_blob_write(w, "12345", 5, &e), 0);
	cr_expect_eq(oci_blob_commit(w, NULL, &e), -1);
	cr_expect_eq(e.errnum, EBADMSG);
	cr_expect(strstr(e.msg, "5 bytes received, 6 announced"), "%s", e.msg);
	assert_empty();
}

Test(oci_blobs, size_cap_the_store_room)
{
	char d[OCI_DIGEST_LEN + 1];
	digest_of("0123456789", d);
	struct moat_err e = {0};
	/* announced over the room: refused before a byte */
	cr_expect_null(oci_blob_begin(root, d, 10, 9, &e));
	cr_expect_eq(e.errnum, EFBIG);
	cr_expect(strstr(e.msg, "room for 9"), "%s", e.msg);
	assert_empty();
	/* size unknown (-1): the room caps the bytes as they come */
	struct oci_blob_writer *w = oci_blob_begin(root, NULL, -1, 8, &e);
	cr_assert_not_null(w, "%s", e.msg);
	cr_assert_eq(oci_blob_write(w, "01234567", 8, &e), 0);
	cr_expect_eq(oci_blob_write(w, "8", 1, &e), -1);
	cr_expect_eq(e.errnum, EFBIG);
	cr_expect(strstr(e.msg, "room in the store"), "%s", e.msg);
	oci_blob_abort(w);
	assert_empty();
	/* exactly the room: fine; unnamed blob gets its computed digest */
	w = oci_blob_begin(root, NULL, -1, 10, &e);
	cr_assert_not_null(w);
	cr_assert_eq(oci_blob_write(w, "0123456789", 10, &e), 0);
	char got[OCI_DIGEST_LEN + 1];
	cr_assert_eq(oci_blob_commit(w, got, &e), 0, "%s", e.msg);
	cr_expect_str_eq(got, d);
	cr_expect_eq(count("blobs/sha256"), 1);
}

Test(oci_blobs, bad_digests_refused)
{
	struct moat_err e = {0};
	cr_expect_null(oci_blob_begin(root, "sha256:abc", 1, -1, &e));
	cr_expect_eq(e.errnum, EINVAL);
	cr_expect(strstr(e.msg, "\"sha256:abc\": not a sha256 digest"), "%s", e.msg);
	char p[256];
	cr_expect_eq(oci_blob_path(root, "sha256:../../etc/passwd", p, sizeof p), -1);
	cr_expect_eq(oci_blob_path(root, "md5:0123", p, sizeof p), -1);
	cr_expect(!oci_blob_has(root, "sha256:../x"));
	char *data;
	size_t len;
	cr_expect_eq(oci_blob_read(root, "sha256:zz", 10, &data, &len, &e), -1);
	cr_expect_eq(e.errnum, EINVAL);
	assert_empty();
}

Test(oci_blobs, open_empties_tmp_only)
{
	char d[OCI_DIGEST_LEN + 1];
	digest_of("kept", d);
	struct moat_err e = {0};
	struct oci_blob_writer *w = oci_blob_begin(root, d, 4, -1, &e);
	cr_assert_not_null(w);
	cr_assert_eq(oci_blob_write(w, "kept", 4, &e), 0);
	cr_assert_eq(oci_blob_commit(w, NULL, &e), 0);
	/* a killed writer's leftover */
	char p[256];
	snprintf(p, sizeof p, "%s/tmp/deadbeef", root);
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	cr_assert(fd >= 0);
	close(fd);
	cr_assert_eq(oci_blobs_open(root, &e), 0, "%s", e.msg);
	cr_expect_eq(count("tmp"), 0);
	cr_expect(oci_blob_has(root, d));
}
