/* libFuzzer target: layer unpack (src/oci/unpack.c) of a hostile tar.
 * The first byte picks the run: bit 0 gzips the rest first (libarchive's
 * own writer), bit 1 keeps the tar's owners. Each run unpacks into
 * <fresh parent>/layer; afterwards the parent holds nothing but the
 * complete layer (success) or nothing at all (failure), and the layer
 * holds no device but a 0/0 whiteout, no set-id or sticky bit, and no
 * file the tar did not put below it (nothing followed out). */
#define _GNU_SOURCE
#include "oci/unpack.h"

#include "base/util.h"

#include <archive.h>
#include <archive_entry.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char base[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	snprintf(base, sizeof base, "/tmp/fuzz_unpack.XXXXXX");
	if (!mkdtemp(base))
		abort();
	return 0;
}

static int check_ent(const char *p, const struct stat *st, int type, struct FTW *f)
{
	if ((S_ISCHR(st->st_mode) && st->st_rdev != makedev(0, 0)) || S_ISBLK(st->st_mode)) {
		fprintf(stderr, "device node %s\n", p);
		abort();
	}
	if (!S_ISDIR(st->st_mode) && (st->st_mode & 07000)) {
		fprintf(stderr, "set-id bit on %s\n", p);
		abort();
	}
	if (S_ISDIR(st->st_mode) && (st->st_mode & 07000)) {
		fprintf(stderr, "set-id/sticky bit on directory %s\n", p);
		abort();
	}
	return 0;
}

/* the names in dir, but for want (NULL: none) */
static void expect_only(const char *dir, const char *want)
{
	DIR *d = opendir(dir);
	if (!d)
		abort();
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!want || strcmp(de->d_name, want) != 0) {
			fprintf(stderr, "left in %s: %s\n", dir, de->d_name);
			abort();
		}
	}
	closedir(d);
}

static la_ssize_t mem_write(struct archive *a, void *arg, const void *p, size_t n)
{
	return write(*(int *)arg, p, n) == (ssize_t)n ? (la_ssize_t)n : -1;
}

/* the bytes through gzip (the raw format: one stream, no tar around) */
static void gzip_into(int fd, const uint8_t *p, size_t n)
{
	struct archive *a = archive_write_new();
	struct archive_entry *ae = archive_entry_new();
	if (!a || !ae || archive_write_set_format_raw(a) != ARCHIVE_OK ||
	    archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open2(a, &fd, NULL, mem_write, NULL, NULL) != ARCHIVE_OK)
		abort();
	archive_entry_set_pathname(ae, "x");
	archive_entry_set_filetype(ae, AE_IFREG);
	if (archive_write_header(a, ae) != ARCHIVE_OK ||
	    (n && archive_write_data(a, p, n) != (la_ssize_t)n) || archive_write_close(a) != ARCHIVE_OK)
		abort();
	archive_entry_free(ae);
	archive_write_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int fd = memfd_create("layer", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	if (data[0] & 1)
		gzip_into(fd, data + 1, size - 1);
	else if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1))
		abort();
	if (lseek(fd, 0, SEEK_SET) != 0)
		abort();
	char parent[128], dst[160];
	snprintf(parent, sizeof parent, "%s/p.XXXXXX", base);
	if (!mkdtemp(parent))
		abort();
	snprintf(dst, sizeof dst, "%s/layer", parent);
	struct oci_unpack_opts o = {.keep_owners = (data[0] & 2) != 0,
				    .max_bytes = 8u << 20,
				    .max_entries = 2000};
	char diff_id[OCI_DIGEST_LEN + 1];
	struct moat_err e = {0};
	int rc = oci_unpack_layer(fd, dst, &o, diff_id, &e);
	close(fd);
	if (rc < 0 && !e.msg[0])
		abort(); /* a refusal says why */
	if (rc == 0 && !oci_digest_valid(diff_id))
		abort();
	expect_only(parent, rc == 0 ? "layer" : NULL);
	expect_only(base, strrchr(parent, '/') + 1); /* nothing beside the parent */
	if (rc == 0 && nftw(dst, check_ent, 16, FTW_PHYS) != 0)
		abort();
	if (moat_rm_tree(parent) < 0)
		abort();
	return 0;
}
