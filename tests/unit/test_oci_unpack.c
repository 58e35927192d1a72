/* Unit tests for src/oci/unpack.c and pack.c: layer tars written here with
 * libarchive's writer (so the hostile cases are exactly what an image
 * could hold), unpacked into <fresh parent>/layer; what happened is
 * checked on the host with lstat/readdir, not through the unpacker. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

/* entries of the test tables name only the fields they need */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "base/util.h"
#include "oci/unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

/* kind: 'f' file (data), 'd' dir, 'l' symlink (data = target), 'h' hard
 * link (data = target), 'c' char device (rdev), 'b' block, 'p' fifo.
 * xattr: "name=value" or NULL. */
struct tm_ent {
	char kind;
	const char *path;
	const char *data;
	unsigned mode;
	int64_t uid;
	dev_t rdev;
	const char *xattr;
	int64_t size; /* >0: a file of this many zero bytes */
};

struct tbuf {
	unsigned char *p;
	size_t len, cap;
};

static la_ssize_t tb_write(struct archive *a, void *arg, const void *p, size_t n)
{
	struct tbuf *b = arg;
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->p = realloc(b->p, b->cap);
		cr_assert_not_null(b->p);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return (la_ssize_t)n;
}

static struct tbuf mk_tar(const struct tm_ent *m, size_t n, int filter)
{
	struct tbuf b = {0};
	struct archive *a = archive_write_new();
	cr_assert_eq(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
	if (filter)
		cr_assert_eq(archive_write_add_filter(a, filter), ARCHIVE_OK);
	cr_assert_eq(archive_write_set_bytes_in_last_block(a, 1), ARCHIVE_OK);
	cr_assert_eq(archive_write_open2(a, &b, NULL, tb_write, NULL, NULL), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, m[i].path);
		archive_entry_set_mtime(ae, 1600000000 + (time_t)i, 0);
		archive_entry_set_uid(ae, m[i].uid);
		archive_entry_set_gid(ae, m[i].uid);
		unsigned mode = m[i].mode;
		const char *data = NULL;
		int64_t size = 0;
		switch (m[i].kind) {
		case 'f':
			archive_entry_set_filetype(ae, AE_IFREG);
			data = m[i].data ? m[i].data : "";
			size = m[i].size > 0 ? m[i].size : (int64_t)strlen(data);
			mode = mode ? mode : 0644;
			break;
		case 'd':
			archive_entry_set_filetype(ae, AE_IFDIR);
			mode = mode ? mode : 0755;
			break;
		case 'l':
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, m[i].data);
			mode = 0777;
			break;
		case 'h':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, m[i].data);
			mode = 0644;
			break;
		case 'c':
		case 'b':
			archive_entry_set_filetype(ae, m[i].kind == 'c' ? AE_IFCHR : AE_IFBLK);
			archive_entry_set_rdev(ae, m[i].rdev);
			mode = 0600;
			break;
		case 'p':
			archive_entry_set_filetype(ae, AE_IFIFO);
			mode = mode ? mode : 0644;
			break;
		}
		archive_entry_set_perm(ae, mode);
		archive_entry_set_size(ae, size);
		if (m[i].xattr) {
			const char *eq = strchr(m[i].xattr, '=');
			char name[128];
			snprintf(name, sizeof name, "%.*s", (int)(eq - m[i].xattr), m[i].xattr);
			archive_entry_xattr_add_entry(ae, name, eq + 1, strlen(eq + 1));
		}
		cr_assert_eq(archive_write_header(ae ? a : a, ae), ARCHIVE_OK, "%s",
			     archive_error_string(a));
		if (m[i].size > 0) {
			static char zero[65536];
			for (int64_t left = size; left > 0;) {
				size_t k = left > (int64_t)sizeof zero ? sizeof zero : (size_t)left;
				cr_assert_eq(archive_write_data(a, zero, k), (la_ssize_t)k);
				left -= (int64_t)k;
			}
		} else if (size)
			cr_assert_eq(archive_write_data(a, data, (size_t)size), size);
		archive_entry_free(ae);
	}
	cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	return b;
}

static int memfd_of(const void *p, size_t n)
{
	int fd = memfd_create("layer", MFD_CLOEXEC);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, p, n), (ssize_t)n);
	cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

static char parent[64], dst[128], outside[128];

static void setup(void)
{
	snprintf(parent, sizeof parent, "/tmp/test_unpack.XXXXXX");
	cr_assert_not_null(mkdtemp(parent));
	snprintf(dst, sizeof dst, "%s/layer", parent);
	snprintf(outside, sizeof outside, "%s-outside", parent);
	cr_assert_eq(mkdir(outside, 0755), 0);
}

static void teardown(void)
{
	moat_rm_tree(parent);
	moat_rm_tree(outside);
}

/* the names in dir, sorted, "a,b,c" */
static void names(const char *dir, char *out, size_t cap)
{
	struct dirent **list;
	int n = scandir(dir, &list, NULL, alphasort);
	cr_assert(n >= 0, "scandir %s", dir);
	out[0] = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
			snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "," : "",
				 list[i]->d_name);
		free(list[i]);
	}
	free(list);
}

static int unpack(const struct tm_ent *m, size_t n, int filter, const struct oci_unpack_opts *o,
		  char diff[OCI_DIGEST_LEN + 1], struct moat_err *e, struct tbuf *tar_out)
{
	struct tbuf t = mk_tar(m, n, filter);
	int fd = memfd_of(t.p, t.len);
	struct oci_unpack_opts def = {.max_bytes = 64u << 20, .max_entries = 1000};
	char d[OCI_DIGEST_LEN + 1];
	int rc = oci_unpack_layer(fd, dst, o ? o : &def, diff ? diff : d, e);
	close(fd);
	if (tar_out)
		*tar_out = t;
	else
		free(t.p);
	return rc;
}

/* a refusal: it says which entry, and nothing is left in parent or outside */
static void refused(const struct tm_ent *m, size_t n, const char *needle)
{
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, n, 0, NULL, NULL, &e, NULL), -1);
	cr_assert(strstr(e.msg, needle), "expected \"%s\" in \"%s\"", needle, e.msg);
	char l[512];
	names(parent, l, sizeof l);
	cr_assert_str_eq(l, "", "left in the parent: %s", l);
	names(outside, l, sizeof l);
	cr_assert_str_eq(l, "", "written outside: %s", l);
}

static void sha256_hex(const void *p, size_t n, char out[OCI_DIGEST_LEN + 1])
{
	unsigned char md[32];
	unsigned len;
	cr_assert_eq(EVP_Digest(p, n, md, &len, EVP_sha256(), NULL), 1);
	int o = sprintf(out, "sha256:");
	for (int i = 0; i < 32; i++)
		o += sprintf(out + o, "%02x", md[i]);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

TestSuite(oci_unpack, .init = setup, .fini = teardown);

Test(oci_unpack, a_normal_layer_with_its_diff_id)
{
	struct tm_ent m[] = {
		{'d', "./", .mode = 0755},
		{'d', "etc/", .mode = 0750},
		{'f', "etc/hosts", "127.0.0.1 x\n", 0640},
		{'l', "etc/link", "/etc/shadow"},
		{'h', "etc/hosts2", "etc/hosts"},
		{'p', "fifo", .mode = 0620},
		{'f', "deep/er/file", "x"}, /* parents not listed */
	};
	char diff[OCI_DIGEST_LEN + 1], want[OCI_DIGEST_LEN + 1];
	struct moat_err e = {0};
	struct tbuf t;
	cr_assert_eq(unpack(m, N(m), 0, NULL, diff, &e, &t), 0, "%s", e.msg);
	sha256_hex(t.p, t.len, want);
	free(t.p);
	cr_assert_str_eq(diff, want);
	char l[256], p[256];
	names(parent, l, sizeof l);
	cr_assert_str_eq(l, "layer");
	snprintf(p, sizeof p, "%s/etc", dst);
	names(p, l, sizeof l);
	cr_assert_str_eq(l, "hosts,hosts2,link");
	struct stat st, st2;
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0750);
	cr_assert_eq(st.st_mtime, 1600000001); /* set after its children */
	snprintf(p, sizeof p, "%s/etc/hosts", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0640);
	cr_assert_eq(st.st_size, 12);
	cr_assert_eq(st.st_mtime, 1600000002);
	cr_assert_eq(st.st_uid, getuid());
	snprintf(p, sizeof p, "%s/etc/hosts2", dst);
	cr_assert_eq(lstat(p, &st2), 0);
	cr_assert_eq(st.st_ino, st2.st_ino);
	snprintf(p, sizeof p, "%s/etc/link", dst);
	char tgt[64] = "";
	cr_assert_eq(readlink(p, tgt, sizeof tgt - 1), 11);
	cr_assert_str_eq(tgt, "/etc/shadow"); /* written as it is, never followed */
	snprintf(p, sizeof p, "%s/fifo", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISFIFO(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0620);
	snprintf(p, sizeof p, "%s/deep/er/file", dst);
	cr_assert_eq(lstat(p, &st), 0);
}

Test(oci_unpack, gzip_and_zstd_give_the_diff_id_of_the_tar)
{
	struct tm_ent m[] = {{'f', "a", "hello"}, {'d', "d/"}};
	struct tbuf plain = mk_tar(m, N(m), 0);
	char want[OCI_DIGEST_LEN + 1];
	sha256_hex(plain.p, plain.len, want);
	free(plain.p);
	int filters[] = {ARCHIVE_FILTER_GZIP, ARCHIVE_FILTER_ZSTD};
	for (size_t i = 0; i < N(filters); i++) {
		char diff[OCI_DIGEST_LEN + 1];
		struct moat_err e = {0};
		cr_assert_eq(unpack(m, N(m), filters[i], NULL, diff, &e, NULL), 0, "%s", e.msg);
		cr_assert_str_eq(diff, want);
		cr_assert_eq(moat_rm_tree(dst), 0);
	}
}

Test(oci_unpack, dotdot_and_absolute_names_refused)
{
	struct tm_ent a[] = {{'f', "ok", "1"}, {'f', "../escape", "x"}};
	refused(a, N(a), "\"../escape\": \"..\" refused");
	struct tm_ent b[] = {{'f', "a/../../escape", "x"}};
	refused(b, N(b), "\"..\" refused");
	char abs[192];
	snprintf(abs, sizeof abs, "%s/abs", outside);
	struct tm_ent c[] = {{'f', abs, "x"}};
	refused(c, N(c), "absolute name refused");
	struct tm_ent d[] = {{'f', "a//b", "x"}};
	refused(d, N(d), "empty path component");
}

Test(oci_unpack, symlink_then_a_file_through_it_refused)
{
	struct tm_ent m[] = {{'l', "l", outside}, {'f', "l/pwn", "x"}};
	refused(m, N(m), "\"l/pwn\": a parent is not a directory");
	struct tm_ent r[] = {{'l', "up", "../../../../../../.."}, {'f', "up/tmp/pwn", "x"}};
	refused(r, N(r), "\"up/tmp/pwn\"");
	/* a directory entry through it too */
	struct tm_ent d[] = {{'l', "l", outside}, {'d', "l/sub/"}};
	refused(d, N(d), "\"l/sub/\"");
}

Test(oci_unpack, a_file_over_a_symlink_replaces_the_link)
{
	char target[192];
	snprintf(target, sizeof target, "%s/victim", outside);
	struct tm_ent m[] = {{'l', "l", target}, {'f', "l", "mine"}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	struct stat st;
	cr_assert_eq(lstat(target, &st), -1); /* not written through the link */
	char p[192];
	snprintf(p, sizeof p, "%s/l", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISREG(st.st_mode));
}

Test(oci_unpack, hard_links_out_refused_and_shadow_untouched)
{
	struct stat before, after;
	cr_assert_eq(stat("/etc/shadow", &before), 0);
	struct tm_ent a[] = {{'h', "shadow", "/etc/shadow"}};
	refused(a, N(a), "absolute name refused");
	struct tm_ent b[] = {{'h', "shadow", "../../etc/shadow"}};
	refused(b, N(b), "\"..\" refused");
	struct tm_ent c[] = {{'l', "e", "/etc"}, {'h', "shadow", "e/shadow"}};
	refused(c, N(c), "not an entry of this layer");
	struct tm_ent d[] = {{'h', "x", "missing"}};
	refused(d, N(d), "not an entry of this layer");
	struct tm_ent f[] = {{'d', "dir/"}, {'h', "x", "dir"}};
	refused(f, N(f), "hard link to a directory refused");
	cr_assert_eq(stat("/etc/shadow", &after), 0);
	cr_assert_eq(before.st_nlink, after.st_nlink);
	cr_assert_eq(before.st_ctim.tv_sec, after.st_ctim.tv_sec);
	cr_assert_eq(before.st_ctim.tv_nsec, after.st_ctim.tv_nsec);
}

Test(oci_unpack, devices_refused_but_a_whiteout)
{
	struct tm_ent a[] = {{'c', "dev/null", .rdev = makedev(1, 3)}};
	refused(a, N(a), "\"dev/null\": character device refused: 1:3");
	struct tm_ent b[] = {{'b', "sda", .rdev = makedev(8, 0)}};
	refused(b, N(b), "\"sda\": block device refused");
	struct tm_ent c[] = {{'c', "gone", .rdev = makedev(0, 0)}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(c, N(c), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	char p[192];
	struct stat st;
	snprintf(p, sizeof p, "%s/gone", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
}

Test(oci_unpack, set_id_and_sticky_bits_stripped)
{
	struct tm_ent m[] = {{'f', "suid", "x", 04755}, {'f', "sgid", "x", 02755},
			     {'d', "tmp/", .mode = 01777}, {'p', "fifo", .mode = 04666}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	const char *want[][2] = {{"suid", "755"}, {"sgid", "755"}, {"tmp", "777"}, {"fifo", "666"}};
	for (size_t i = 0; i < N(want); i++) {
		char p[192], mode[8];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", dst, want[i][0]);
		cr_assert_eq(lstat(p, &st), 0);
		snprintf(mode, sizeof mode, "%o", st.st_mode & 07777);
		cr_assert_str_eq(mode, want[i][1], "%s: %s", want[i][0], mode);
	}
}

Test(oci_unpack, tar_bombs_bounded)
{
	/* 20 MB of zeros: a few KB once gzip'd */
	struct tm_ent m[] = {{'f', "big", .size = 20 << 20}};
	struct oci_unpack_opts o = {.max_bytes = 1 << 20, .max_entries = 100};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), ARCHIVE_FILTER_GZIP, &o, NULL, &e, NULL), -1);
	cr_assert_eq(e.errnum, EFBIG);
	cr_assert(strstr(e.msg, "max_bytes"), "%s", e.msg);
	char l[256];
	names(parent, l, sizeof l);
	cr_assert_str_eq(l, "");
	/* many small entries */
	struct tm_ent many[50];
	char nm[50][16];
	for (int i = 0; i < 50; i++) {
		snprintf(nm[i], sizeof nm[i], "f%d", i);
		many[i] = (struct tm_ent){'f', nm[i], "x"};
	}
	o = (struct oci_unpack_opts){.max_bytes = 1 << 20, .max_entries = 10};
	cr_assert_eq(unpack(many, N(many), 0, &o, NULL, &e, NULL), -1);
	cr_assert_eq(e.errnum, EFBIG);
	cr_assert(strstr(e.msg, "max_entries"), "%s", e.msg);
	names(parent, l, sizeof l);
	cr_assert_str_eq(l, "");
}

static bool has_xattr(const char *path, const char *name, const char *val)
{
	char v[64];
	ssize_t n = lgetxattr(path, name, v, sizeof v);
	return n == (ssize_t)strlen(val) && memcmp(v, val, (size_t)n) == 0;
}

Test(oci_unpack, whiteouts_and_opaque_directories)
{
	struct tm_ent m[] = {
		{'d', "etc/"}, {'f', "etc/.wh.motd"},
		{'d', "opt/"}, {'f', "opt/.wh..wh..opq"}, {'f', "opt/new", "n"},
		/* the same layer's own entries stay (OCI: whiteouts hide lower layers) */
		{'f', ".wh.a"}, {'f', "a", "mine"},
		{'d', "d/"}, {'f', "d/f", "f"}, {'f', ".wh.d"},
		{'f', ".wh..wh.plnk"}, /* aufs bookkeeping: skipped */
	};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	char p[192], l[256];
	struct stat st;
	snprintf(p, sizeof p, "%s/etc/motd", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
	snprintf(p, sizeof p, "%s/opt", dst);
	cr_assert(has_xattr(p, "user.overlay.opaque", "y"));
	if (geteuid() == 0)
		cr_assert(has_xattr(p, "trusted.overlay.opaque", "y"));
	names(p, l, sizeof l);
	cr_assert_str_eq(l, "new");
	snprintf(p, sizeof p, "%s/a", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISREG(st.st_mode));
	snprintf(p, sizeof p, "%s/d", dst);
	cr_assert(has_xattr(p, "user.overlay.opaque", "y")); /* the lower's d hidden */
	names(dst, l, sizeof l);
	cr_assert_str_eq(l, "a,d,etc,opt");
}

Test(oci_unpack, whiteout_names_that_are_no_part_of_oci_refused)
{
	struct tm_ent a[] = {{'f', ".wh.."}};
	refused(a, N(a), "a whiteout of");
	struct tm_ent b[] = {{'d', ".wh.x/"}};
	refused(b, N(b), "not a regular file refused");
	struct tm_ent c[] = {{'f', ".wh.x/y"}};
	refused(c, N(c), "a parent named .wh.* refused");
}

Test(oci_unpack, later_duplicates_replace_earlier_ones)
{
	struct tm_ent m[] = {{'f', "a", "1"}, {'d', "a/"}, {'f', "a/b", "2"}, {'f', "a", "333"},
			     {'d', "d/", .mode = 0700}, {'d', "d/", .mode = 0711}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	char p[192];
	struct stat st;
	snprintf(p, sizeof p, "%s/a", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISREG(st.st_mode));
	cr_assert_eq(st.st_size, 3);
	snprintf(p, sizeof p, "%s/d", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0711);
}

Test(oci_unpack, only_user_xattrs_kept)
{
	struct tm_ent m[] = {{'f', "u", "x", .xattr = "user.mime=text"},
			     {'f', "t", "x", .xattr = "trusted.overlay.opaque=y"},
			     {'f', "s", "x", .xattr = "security.capability=abc"},
			     {'f', "o", "x", .xattr = "user.overlay.redirect=/etc"}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	char p[192];
	snprintf(p, sizeof p, "%s/u", dst);
	cr_assert(has_xattr(p, "user.mime", "text"));
	const char *none[] = {"t", "s", "o"};
	for (size_t i = 0; i < N(none); i++) {
		snprintf(p, sizeof p, "%s/%s", dst, none[i]);
		char list[256];
		cr_assert_eq(llistxattr(p, list, sizeof list), 0, "%s has xattrs", none[i]);
	}
}

Test(oci_unpack, owners_kept_only_when_asked)
{
	struct tm_ent m[] = {{'f', "a", "x", .uid = 1234}, {'f', "b", "x", .uid = 70000},
			     {'l', "l", "a", .uid = 1234}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	char p[192];
	struct stat st;
	snprintf(p, sizeof p, "%s/a", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert_eq(st.st_uid, getuid());
	if (geteuid() != 0)
		return;
	cr_assert_eq(moat_rm_tree(dst), 0);
	struct oci_unpack_opts o = {.keep_owners = true, .max_bytes = 1 << 20, .max_entries = 10};
	cr_assert_eq(unpack(m, N(m), 0, &o, NULL, &e, NULL), 0, "%s", e.msg);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert_eq(st.st_uid, 1234);
	snprintf(p, sizeof p, "%s/b", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert_eq(st.st_uid, 0); /* beyond 65535 */
	snprintf(p, sizeof p, "%s/l", dst);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert_eq(st.st_uid, 1234);
}

Test(oci_unpack, an_existing_destination_or_garbage_refused)
{
	cr_assert_eq(mkdir(dst, 0755), 0);
	struct tm_ent m[] = {{'f', "a", "x"}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), -1);
	cr_assert_eq(e.errnum, EEXIST);
	cr_assert_eq(rmdir(dst), 0);
	int fd = memfd_of("this is not a tar at all, not even close................", 56);
	char d[OCI_DIGEST_LEN + 1];
	struct oci_unpack_opts o = {.max_bytes = 1 << 20, .max_entries = 10};
	cr_assert_eq(oci_unpack_layer(fd, dst, &o, d, &e), -1);
	close(fd);
	cr_assert(strstr(e.msg, "layer tar"), "%s", e.msg);
	char l[256];
	names(parent, l, sizeof l);
	cr_assert_str_eq(l, "");
}

/* pack: whiteouts and opaque dirs back to OCI's form, and unpack of the
 * result gives the same tree */
Test(oci_unpack, pack_then_unpack_round_trip)
{
	struct tm_ent m[] = {{'d', "etc/"}, {'f', "etc/.wh.motd"}, {'d', "opt/"},
			     {'f', "opt/.wh..wh..opq"}, {'f', "opt/new", "n", 0600},
			     {'l', "opt/l", "new"}, {'h', "opt/h", "opt/new"}};
	struct moat_err e = {0};
	cr_assert_eq(unpack(m, N(m), 0, NULL, NULL, &e, NULL), 0, "%s", e.msg);
	char out[192];
	snprintf(out, sizeof out, "%s/layer.tgz", outside);
	int dfd = open(dst, O_RDONLY | O_DIRECTORY);
	int ofd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert(dfd >= 0 && ofd >= 0);
	char dg[OCI_DIGEST_LEN + 1], di[OCI_DIGEST_LEN + 1];
	int64_t size = 0;
	cr_assert_eq(oci_pack_layer(dfd, ofd, dg, di, &size, &e), 0, "%s", e.msg);
	close(dfd);
	struct stat st;
	cr_assert_eq(fstat(ofd, &st), 0);
	cr_assert_eq(st.st_size, size);
	/* the digest is of the file written */
	unsigned char *buf = malloc((size_t)size);
	cr_assert_eq(pread(ofd, buf, (size_t)size, 0), size);
	char want[OCI_DIGEST_LEN + 1];
	sha256_hex(buf, (size_t)size, want);
	free(buf);
	cr_assert_str_eq(dg, want);
	/* its names, read back with libarchive */
	struct archive *a = archive_read_new();
	archive_read_support_filter_gzip(a);
	archive_read_support_format_tar(a);
	cr_assert_eq(lseek(ofd, 0, SEEK_SET), 0);
	cr_assert_eq(archive_read_open_fd(a, ofd, 65536), ARCHIVE_OK);
	struct archive_entry *ae;
	char seen[512] = "";
	while (archive_read_next_header(a, &ae) == ARCHIVE_OK)
		snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s ", archive_entry_pathname(ae));
	archive_read_free(a);
	cr_assert(strstr(seen, "etc/.wh.motd "), "%s", seen);
	cr_assert(strstr(seen, "opt/.wh..wh..opq "), "%s", seen);
	/* and in again: the same diff_id, the same tree */
	cr_assert_eq(lseek(ofd, 0, SEEK_SET), 0);
	char dst2[160], d2[OCI_DIGEST_LEN + 1];
	snprintf(dst2, sizeof dst2, "%s/again", outside);
	struct oci_unpack_opts o = {.max_bytes = 1 << 20, .max_entries = 100};
	cr_assert_eq(oci_unpack_layer(ofd, dst2, &o, d2, &e), 0, "%s", e.msg);
	close(ofd);
	cr_assert_str_eq(d2, di);
	char p[200], l1[256], l2[256];
	snprintf(p, sizeof p, "%s/opt", dst2);
	names(p, l1, sizeof l1);
	cr_assert_str_eq(l1, "h,l,new");
	cr_assert(has_xattr(p, "user.overlay.opaque", "y"));
	snprintf(p, sizeof p, "%s/etc/motd", dst2);
	cr_assert_eq(lstat(p, &st), 0);
	cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == 0);
	names(dst, l1, sizeof l1);
	names(dst2, l2, sizeof l2);
	cr_assert_str_eq(l1, l2);
}
