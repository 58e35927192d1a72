/* Overlay tree -> gzip'd OCI layer tar (oci_pack_layer in unpack.h).
 *
 * Two libarchive writers in a pipe: `tar` (pax) writes into a callback
 * that hashes the tar (the diff_id) and hands it to `gz` (raw format,
 * gzip filter), whose callback hashes what goes to out_fd (the digest).
 * The tree is read with src/base/walk.h: by descriptors, links never
 * followed, other mounts not entered. */
#define _GNU_SOURCE
#include "unpack.h"

#include "base/cleanup.h"
#include "base/util.h"
#include "base/walk.h"

#include <archive.h>
#include <archive_entry.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define PACK_BUF (256u << 10)

struct pack {
	struct archive *tar, *gz;
	struct archive_entry_linkresolver *lr;
	struct oci_sha256 hdiff, hdig;
	int out_fd;
	int64_t size;
	char *buf;
	struct moat_err *e;
	const char *only; /* the one top-level entry packed, or NULL: all */
	bool failed;      /* e filled by the walk's callback */
};

static la_ssize_t gz_write(struct archive *a, void *arg, const void *p, size_t n)
{
	struct pack *k = arg;
	if (oci_sha256_update(&k->hdig, p, n) < 0 || moat_write_all(k->out_fd, p, n) < 0) {
		archive_set_error(a, errno ? errno : EIO, "writing the layer");
		return -1;
	}
	k->size += (int64_t)n;
	return (la_ssize_t)n;
}

static la_ssize_t tar_write(struct archive *a, void *arg, const void *p, size_t n)
{
	struct pack *k = arg;
	if (oci_sha256_update(&k->hdiff, p, n) < 0) {
		archive_set_error(a, ENOMEM, "sha256");
		return -1;
	}
	if (archive_write_data(k->gz, p, n) != (la_ssize_t)n) {
		archive_set_error(a, archive_errno(k->gz), "%s", archive_error_string(k->gz));
		return -1;
	}
	return (la_ssize_t)n;
}

static int tar_err(struct pack *k, const char *path)
{
	return moat_err_set(k->e, MOAT_E_SYSTEM, archive_errno(k->tar) > 0 ? archive_errno(k->tar) : 0,
			    "packing \"%.300s\": %s", path, archive_error_string(k->tar));
}

/* An empty regular file: the OCI form of a whiteout or an opaque marker. */
static int put_marker(struct pack *k, const char *dir, const char *name, const struct stat *st)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s%s%s", dir, *dir ? "/" : "", name) >= (int)sizeof p)
		return moat_err_set(k->e, MOAT_E_USAGE, ENAMETOOLONG, "packing \"%.300s\"", dir);
	struct archive_entry *ae = archive_entry_new();
	if (!ae)
		return moat_err_set(k->e, MOAT_E_SYSTEM, ENOMEM, "pack");
	archive_entry_set_pathname(ae, p);
	archive_entry_set_filetype(ae, AE_IFREG);
	archive_entry_set_perm(ae, 0644);
	archive_entry_set_size(ae, 0);
	archive_entry_set_mtime(ae, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
	int r = archive_write_header(k->tar, ae);
	archive_entry_free(ae);
	return r < ARCHIVE_WARN ? tar_err(k, p) : 0;
}

static bool opaque(int dirfd, const char *name)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	char v[4];
	ssize_t n = fgetxattr(fd, "trusted.overlay.opaque", v, sizeof v);
	if (n == 1 && v[0] == 'y')
		return true;
	n = fgetxattr(fd, "user.overlay.opaque", v, sizeof v);
	return n == 1 && v[0] == 'y';
}

static int put_data(struct pack *k, const struct moat_walk_ent *en)
{
	_cleanup_close_ int fd = openat(en->dirfd, en->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return moat_err_set(k->e, MOAT_E_SYSTEM, errno, "packing \"%.300s\"", en->path);
	if (st.st_ino != en->st->st_ino || st.st_dev != en->st->st_dev)
		return moat_err_set(k->e, MOAT_E_SYSTEM, EAGAIN, "packing \"%.300s\": it changed",
				    en->path);
	int64_t left = en->st->st_size;
	while (left > 0) {
		ssize_t n = read(fd, k->buf, left < PACK_BUF ? (size_t)left : PACK_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) /* shrunk meanwhile: the header said more */
			return moat_err_set(k->e, MOAT_E_SYSTEM, n < 0 ? errno : EAGAIN,
					    "packing \"%.300s\"", en->path);
		if (archive_write_data(k->tar, k->buf, (size_t)n) != n)
			return tar_err(k, en->path);
		left -= n;
	}
	return 0;
}

static int pack_entry(struct pack *k, const struct moat_walk_ent *en)
{
	const struct stat *st = en->st;
	char dir[PATH_MAX];
	size_t dlen = en->path_len - strlen(en->name);
	dlen = dlen ? dlen - 1 : 0;
	memcpy(dir, en->path, dlen);
	dir[dlen] = 0;
	if (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0)) {
		char wh[NAME_MAX + 8];
		snprintf(wh, sizeof wh, ".wh.%s", en->name);
		return put_marker(k, dir, wh, st) < 0 ? -1 : 0;
	}
	if (strncmp(en->name, ".wh.", 4) == 0)
		return moat_err_set(k->e, MOAT_E_USAGE, EINVAL,
				    "packing \"%.300s\": a name starting with .wh. has no OCI form",
				    en->path);
	if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
		return moat_err_set(k->e, MOAT_E_USAGE, EPERM,
				    "packing \"%.300s\": a device node refused", en->path);
	if (S_ISSOCK(st->st_mode))
		return 0; /* no tar form; a socket's file means nothing once copied */
	struct archive_entry *ae = archive_entry_new();
	if (!ae)
		return moat_err_set(k->e, MOAT_E_SYSTEM, ENOMEM, "pack");
	archive_entry_copy_stat(ae, st);
	archive_entry_set_pathname(ae, en->path);
	if (S_ISLNK(st->st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(en->dirfd, en->name, t, sizeof t - 1);
		if (n < 0) {
			archive_entry_free(ae);
			return moat_err_set(k->e, MOAT_E_SYSTEM, errno, "packing \"%.300s\"", en->path);
		}
		t[n] = 0;
		archive_entry_set_symlink(ae, t);
	}
	struct archive_entry *spare = NULL;
	if (S_ISREG(st->st_mode))
		archive_entry_linkify(k->lr, &ae, &spare);
	bool data = S_ISREG(st->st_mode) && !archive_entry_hardlink(ae) && st->st_size > 0;
	int r = archive_write_header(k->tar, ae);
	archive_entry_free(ae);
	archive_entry_free(spare);
	if (r < ARCHIVE_WARN)
		return tar_err(k, en->path);
	if (data && put_data(k, en) < 0)
		return -1;
	if (S_ISDIR(st->st_mode) && opaque(en->dirfd, en->name) &&
	    put_marker(k, en->path, ".wh..wh..opq", st) < 0)
		return -1;
	return 0;
}

static int pack_cb(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct pack *k = arg;
	if (ev != MOAT_WALK_ENTRY || en->other_mount)
		return 0;
	if (k->only && en->depth == 1 && strcmp(en->name, k->only))
		return S_ISDIR(en->st->st_mode) ? MOAT_WALK_SKIP : 0;
	if (pack_entry(k, en) < 0) {
		k->failed = true;
		return -1;
	}
	/* a directory we may not list (a sandbox's mode-000 placeholder,
	 * unprivileged): packed empty, with its mode, as fsclone copies it */
	if (S_ISDIR(en->st->st_mode) && geteuid() != 0 &&
	    (en->st->st_mode & (S_IRUSR | S_IXUSR)) != (S_IRUSR | S_IXUSR))
		return MOAT_WALK_SKIP;
	return 0;
}

int oci_pack_layer(int dirfd, int out_fd, char digest[OCI_DIGEST_LEN + 1],
		   char diff_id[OCI_DIGEST_LEN + 1], int64_t *size, struct moat_err *e)
{
	return oci_pack_layer_only(dirfd, NULL, out_fd, digest, diff_id, size, e);
}

int oci_pack_layer_only(int dirfd, const char *only, int out_fd,
			char digest[OCI_DIGEST_LEN + 1], char diff_id[OCI_DIGEST_LEN + 1],
			int64_t *size, struct moat_err *e)
{
	struct pack k = {.out_fd = out_fd, .e = e, .only = only};
	int rc = -1;
	k.buf = malloc(PACK_BUF);
	k.tar = archive_write_new();
	k.gz = archive_write_new();
	k.lr = archive_entry_linkresolver_new();
	if (!k.buf || !k.tar || !k.gz || !k.lr || oci_sha256_init(&k.hdiff) < 0 ||
	    oci_sha256_init(&k.hdig) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "pack");
		goto out;
	}
	archive_entry_linkresolver_set_strategy(k.lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
	if (archive_write_set_format_raw(k.gz) != ARCHIVE_OK ||
	    archive_write_add_filter_gzip(k.gz) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(k.gz, 1) != ARCHIVE_OK ||
	    archive_write_open2(k.gz, &k, NULL, gz_write, NULL, NULL) != ARCHIVE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, archive_errno(k.gz), "pack: %s",
			     archive_error_string(k.gz));
		goto out;
	}
	struct archive_entry *one = archive_entry_new();
	if (!one) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "pack");
		goto out;
	}
	archive_entry_set_pathname(one, "layer.tar");
	archive_entry_set_filetype(one, AE_IFREG);
	int r = archive_write_header(k.gz, one);
	archive_entry_free(one);
	if (r != ARCHIVE_OK || archive_write_set_format_pax_restricted(k.tar) != ARCHIVE_OK ||
	    archive_write_add_filter_none(k.tar) != ARCHIVE_OK ||
	    archive_write_open2(k.tar, &k, NULL, tar_write, NULL, NULL) != ARCHIVE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "pack: %s / %s", archive_error_string(k.gz),
			     archive_error_string(k.tar));
		goto out;
	}
	struct moat_walk_opt wo = {.flags = 0, .fn = pack_cb, .arg = &k};
	struct moat_err we = {0};
	if (moat_walk(dirfd, &wo, &we) < 0) {
		if (!k.failed && e)
			*e = we;
		if (e && !k.failed)
			moat_err_prefix(e, "pack");
		goto out;
	}
	/* hard links whose other names were not seen: nothing left to write
	 * for the tar strategy, but the resolver must be drained */
	struct archive_entry *ae = NULL, *spare = NULL;
	archive_entry_linkify(k.lr, &ae, &spare);
	if (archive_write_close(k.tar) != ARCHIVE_OK) {
		tar_err(&k, "(end)");
		goto out;
	}
	if (archive_write_close(k.gz) != ARCHIVE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, archive_errno(k.gz), "pack: %s",
			     archive_error_string(k.gz));
		goto out;
	}
	if (oci_sha256_final(&k.hdiff, diff_id) < 0 || oci_sha256_final(&k.hdig, digest) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sha256");
		goto out;
	}
	if (size)
		*size = k.size;
	rc = 0;
out:
	if (k.tar)
		archive_write_free(k.tar);
	if (k.gz)
		archive_write_free(k.gz);
	if (k.lr)
		archive_entry_linkresolver_free(k.lr);
	oci_sha256_free(&k.hdiff);
	oci_sha256_free(&k.hdig);
	free(k.buf);
	return rc;
}
