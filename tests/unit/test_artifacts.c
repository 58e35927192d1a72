/* Unit tests for the artifact store (src/serve/artifacts_dir.c) and the
 * name check (artifacts.c): an artifact is in its session's directory
 * only once complete and within its size_max; every failure (too many
 * bytes, abort, a killed daemon's temp file) leaves nothing, checked by
 * listing the directories on the host; what is planted in a session's
 * directory (a symlink, a fifo) is not served. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "base/util.h"
#include "oci/digest.h"
#include "oci_dirs.h"
#include "serve/artifacts.h"
#include "serve/artifacts_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static char root[64], store[128];
static const struct artifacts_backend *be = &artifacts_dir_backend;

static void setup(void)
{
	snprintf(root, sizeof root, "/tmp/moat-unit-artifacts-XXXXXX");
	cr_assert_not_null(mkdtemp(root));
	snprintf(store, sizeof store, "%s/artifacts", root);
	struct core_err e = {0};
	cr_assert_eq(be->init(root, &e), 0, "%s", e.msg);
}

static void teardown(void)
{
	be->shutdown();
	moat_rm_tree(root);
}

TestSuite(artifacts, .init = setup, .fini = teardown);

static void sha_hex(const void *p, size_t n, char out[65])
{
	char d[OCI_DIGEST_LEN + 1];
	cr_assert_eq(oci_sha256_buf(p, n, d), 0);
	memcpy(out, d + 7, 65);
}

static char *read_host(const char *sub, size_t *len)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", store, sub);
	FILE *f = fopen(p, "re");
	if (!f)
		return NULL;
	static char buf[1 << 16];
	*len = fread(buf, 1, sizeof buf - 1, f);
	buf[*len] = '\0';
	fclose(f);
	return buf;
}

static bool host_has(const char *sub)
{
	char p[512];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", store, sub);
	return lstat(p, &st) == 0;
}

static void put(const char *sid, const char *name, const char *data, uint64_t max)
{
	struct core_err e = {0};
	struct artifacts_put *p = be->put_begin(sid, name, max, &e);
	cr_assert_not_null(p, "%s", e.msg);
	cr_assert_eq(be->put_write(p, data, strlen(data), &e), 0, "%s", e.msg);
	struct artifacts_info info;
	cr_assert_eq(be->put_commit(p, &info, &e), 0, "%s", e.msg);
	cr_expect_eq(info.size, strlen(data));
}

Test(artifacts, name_check)
{
	static const char *good[] = {"report.txt", ".hidden", "a..b", "..x", "x..",
				     "r\xc3\xa9sum\xc3\xa9.pdf", "with space", "-dash"};
	struct core_err e = {0};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++)
		cr_expect_eq(artifacts_name_check(good[i], &e), 0, "%s: %s", good[i], e.msg);
	static const struct {
		const char *name, *why;
	} bad[] = {{"", "empty"},
		   {".", "\".\" or \"..\""},
		   {"..", "\".\" or \"..\""},
		   {"a/b", "'/'"},
		   {"../etc/passwd", "'/'"},
		   {"/abs", "'/'"},
		   {"line\nbreak", "control character"},
		   {"tab\there", "control character"},
		   {"del\x7f", "control character"},
		   {"esc\x1b[31m", "control character"},
		   {"bad\xff", "not UTF-8"},
		   {"over\xc0\xaflong", "not UTF-8"}};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		memset(&e, 0, sizeof e);
		cr_expect_eq(artifacts_name_check(bad[i].name, &e), -1, "%s accepted", bad[i].name);
		cr_expect_eq(e.status, 400);
		cr_expect_str_eq(e.code, "invalid_request");
		cr_expect(strstr(e.msg, bad[i].why), "%s: %s", bad[i].name, e.msg);
		cr_expect(strstr(e.msg, "artifact name \""), "%s", e.msg);
	}
	/* the name is quoted, control characters escaped */
	artifacts_name_check("line\nbreak", &e);
	cr_expect(strstr(e.msg, "line\\x0abreak"), "%s", e.msg);
	char longname[300];
	memset(longname, 'a', 255);
	longname[255] = '\0';
	cr_expect_eq(artifacts_name_check(longname, &e), 0, "%s", e.msg);
	longname[255] = 'a';
	longname[256] = '\0';
	cr_expect_eq(artifacts_name_check(longname, &e), -1);
	cr_expect(strstr(e.msg, "255 bytes"), "%s", e.msg);
	cr_expect_eq(artifacts_name_check(NULL, &e), -1);
}

Test(artifacts, session_ids)
{
	cr_expect(artifacts_sid_ok("ses_0123456789abcdef"));
	cr_expect(artifacts_sid_ok("a-B_9"));
	cr_expect(!artifacts_sid_ok(""));
	cr_expect(!artifacts_sid_ok(".tmp"));
	cr_expect(!artifacts_sid_ok(".."));
	cr_expect(!artifacts_sid_ok("a/b"));
	cr_expect(!artifacts_sid_ok("a.b"));
	char l[80];
	memset(l, 'a', 65);
	l[65] = '\0';
	cr_expect(!artifacts_sid_ok(l));
}

Test(artifacts, store_dirs_are_private)
{
	struct stat st;
	cr_assert_eq(stat(store, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0700);
	char p[256];
	snprintf(p, sizeof p, "%s/.tmp", store);
	cr_assert_eq(stat(p, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0700);
}

Test(artifacts, upload_is_invisible_until_committed)
{
	struct core_err e = {0};
	struct artifacts_put *p = be->put_begin("ses_a", "out.txt", 100, &e);
	cr_assert_not_null(p, "%s", e.msg);
	cr_expect_eq(oci_dir_count(store, ".tmp"), 1); /* written aside first */
	cr_expect(!host_has("ses_a/out.txt"));
	cr_assert_eq(be->put_write(p, "hello ", 6, &e), 0, "%s", e.msg);
	cr_assert_eq(be->put_write(p, "artifact", 8, &e), 0, "%s", e.msg);
	cr_expect(!host_has("ses_a/out.txt"));
	struct artifacts_info info;
	cr_assert_eq(be->put_commit(p, &info, &e), 0, "%s", e.msg);
	char want[65];
	sha_hex("hello artifact", 14, want);
	cr_expect_str_eq(info.sha256, want);
	cr_expect_eq(info.size, 14);
	cr_expect_eq(oci_dir_count(store, ".tmp"), 0);
	size_t len = 0;
	const char *got = read_host("ses_a/out.txt", &len);
	cr_assert_not_null(got);
	cr_expect_eq(len, 14);
	cr_expect_str_eq(got, "hello artifact");
	struct stat st;
	char path[256];
	snprintf(path, sizeof path, "%s/ses_a/out.txt", store);
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0600);
	snprintf(path, sizeof path, "%s/ses_a", store);
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0700);
	/* get gives the same bytes and digest */
	int fd = -1;
	struct artifacts_info gi;
	cr_assert_eq(be->get("ses_a", "out.txt", &fd, &gi, &e), 0, "%s", e.msg);
	char buf[64] = {0};
	cr_expect_eq(read(fd, buf, sizeof buf), 14);
	close(fd);
	cr_expect_str_eq(buf, "hello artifact");
	cr_expect_str_eq(gi.sha256, want);
	cr_expect_eq(gi.size, 14);
}

Test(artifacts, over_size_max_leaves_nothing)
{
	put("ses_a", "keep.txt", "the old bytes", 100);
	struct core_err e = {0};
	struct artifacts_put *p = be->put_begin("ses_a", "keep.txt", 10, &e);
	cr_assert_not_null(p, "%s", e.msg);
	cr_assert_eq(be->put_write(p, "0123456789", 10, &e), 0, "%s", e.msg);
	cr_expect_eq(be->put_write(p, "X", 1, &e), -1);
	cr_expect_eq(e.status, 413);
	cr_expect_str_eq(e.code, "too_large");
	cr_expect(strstr(e.msg, "keep.txt") && strstr(e.msg, "10 bytes"), "%s", e.msg);
	be->put_abort(p);
	cr_expect_eq(oci_dir_count(store, ".tmp"), 0);
	/* the earlier artifact of that name is untouched */
	size_t len = 0;
	cr_expect_str_eq(read_host("ses_a/keep.txt", &len), "the old bytes");
	cr_expect_eq(oci_dir_count(store, "ses_a"), 1);
}

Test(artifacts, abort_leaves_nothing)
{
	struct core_err e = {0};
	struct artifacts_put *p = be->put_begin("ses_b", "x", 100, &e);
	cr_assert_not_null(p, "%s", e.msg);
	cr_assert_eq(be->put_write(p, "part", 4, &e), 0, "%s", e.msg);
	be->put_abort(p);
	cr_expect_eq(oci_dir_count(store, ".tmp"), 0);
	cr_expect(!host_has("ses_b/x"));
}

Test(artifacts, replace_is_whole)
{
	put("ses_a", "r", "first version", 100);
	put("ses_a", "r", "second", 100);
	size_t len = 0;
	cr_expect_str_eq(read_host("ses_a/r", &len), "second");
	cr_expect_eq(oci_dir_count(store, "ses_a"), 1);
}

Test(artifacts, killed_daemon_temp_files_swept)
{
	char p[256];
	snprintf(p, sizeof p, "%s/.tmp/ses_a.deadbeefdeadbeef", store);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, "half", 4), 4);
	close(fd);
	put("ses_a", ".tmp-lookalike", "a real artifact", 100);
	be->shutdown();
	struct core_err e = {0};
	cr_assert_eq(be->init(root, &e), 0, "%s", e.msg);
	cr_expect_eq(oci_dir_count(store, ".tmp"), 0);
	/* an artifact whose name looks like a temp one is not a leftover */
	size_t len = 0;
	cr_expect_str_eq(read_host("ses_a/.tmp-lookalike", &len), "a real artifact");
}

Test(artifacts, list_sorted_with_digests)
{
	put("ses_a", "b.txt", "bee", 100);
	put("ses_a", "a.txt", "ay", 100);
	/* a file without the digest xattr (e.g. an older store) is hashed */
	char p[256];
	snprintf(p, sizeof p, "%s/ses_a/c.txt", store);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, "sea", 3), 3);
	close(fd);
	/* not artifacts: a symlink, a fifo, a directory */
	snprintf(p, sizeof p, "%s/ses_a/link", store);
	cr_assert_eq(symlink("/etc/passwd", p), 0);
	snprintf(p, sizeof p, "%s/ses_a/fifo", store);
	cr_assert_eq(mkfifo(p, 0600), 0);
	snprintf(p, sizeof p, "%s/ses_a/dir", store);
	cr_assert_eq(mkdir(p, 0700), 0);
	struct core_err e = {0};
	json_t *l = be->list("ses_a", &e);
	cr_assert_not_null(l, "%s", e.msg);
	cr_assert_eq(json_array_size(l), 3, "%s", json_dumps(l, 0));
	const char *names[] = {"a.txt", "b.txt", "c.txt"}, *data[] = {"ay", "bee", "sea"};
	for (size_t i = 0; i < 3; i++) {
		json_t *o = json_array_get(l, i);
		char want[65];
		sha_hex(data[i], strlen(data[i]), want);
		cr_expect_str_eq(json_string_value(json_object_get(o, "name")), names[i]);
		cr_expect_eq(json_integer_value(json_object_get(o, "size")),
			     (json_int_t)strlen(data[i]));
		cr_expect_str_eq(json_string_value(json_object_get(o, "sha256")), want);
		const char *when = json_string_value(json_object_get(o, "created_at"));
		cr_expect(when && strlen(when) == 20 && when[19] == 'Z', "%s", when);
	}
	json_decref(l);
	/* the hashed one got its xattr (hashed once) */
	char x[80] = {0}, want[65];
	snprintf(p, sizeof p, "%s/ses_a/c.txt", store);
	sha_hex("sea", 3, want);
	cr_expect_eq(getxattr(p, "user.moat.sha256", x, sizeof x - 1), 64);
	cr_expect_str_eq(x, want);
	/* the planted ones are not served */
	int gfd = -1;
	struct artifacts_info info;
	cr_expect_eq(be->get("ses_a", "link", &gfd, &info, &e), -1);
	cr_expect_eq(e.status, 404);
	cr_expect_eq(be->get("ses_a", "fifo", &gfd, &info, &e), -1);
	cr_expect_eq(e.status, 404);
	cr_expect_eq(be->get("ses_a", "dir", &gfd, &info, &e), -1);
	cr_expect_eq(e.status, 404);
	cr_expect_eq(be->del("ses_a", "link", &e), -1);
	cr_expect_eq(e.status, 404);
	/* a session with nothing stored lists empty */
	l = be->list("ses_none", &e);
	cr_assert_not_null(l, "%s", e.msg);
	cr_expect_eq(json_array_size(l), 0);
	json_decref(l);
}

Test(artifacts, get_and_delete_missing)
{
	struct core_err e = {0};
	struct artifacts_info info;
	cr_expect_eq(be->get("ses_x", "nope", NULL, &info, &e), -1);
	cr_expect_eq(e.status, 404);
	cr_expect(strstr(e.msg, "nope") && strstr(e.msg, "ses_x"), "%s", e.msg);
	put("ses_x", "here", "1", 100);
	cr_expect_eq(be->get("ses_x", "nope", NULL, &info, &e), -1);
	cr_expect_eq(e.status, 404);
	cr_expect_eq(be->del("ses_x", "nope", &e), -1);
	cr_expect_eq(e.status, 404);
	cr_expect_eq(be->del("ses_x", "here", &e), 0, "%s", e.msg);
	cr_expect(!host_has("ses_x/here"));
	cr_expect_eq(be->del("ses_x", "here", &e), -1);
	cr_expect_eq(e.status, 404);
}

Test(artifacts, purge_removes_one_session)
{
	put("ses_a", "f", "a's", 100);
	put("ses_b", "f", "b's", 100);
	struct core_err e = {0};
	struct artifacts_put *p = be->put_begin("ses_a", "g", 100, &e);
	cr_assert_not_null(p);
	be->put_abort(p);
	cr_assert_eq(be->purge("ses_a", &e), 0, "%s", e.msg);
	cr_expect(!host_has("ses_a"));
	size_t len = 0;
	cr_expect_str_eq(read_host("ses_b/f", &len), "b's");
	cr_expect_eq(be->purge("ses_a", &e), 0, "%s", e.msg); /* gone already: fine */
	cr_expect_eq(be->purge("ses_never", &e), 0, "%s", e.msg);
}
