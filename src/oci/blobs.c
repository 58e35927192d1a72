/* The content-addressed blob store (blobs.h). A blob is streamed into
 * <root>/tmp/<random>, hashed on the way, checked, fsync'd and linked into
 * blobs/sha256/<hex>: link() rather than rename() so that an existing blob
 * of that digest (a concurrent writer's) is kept, atomically. */
#define _GNU_SOURCE
#include "blobs.h"

#include "base/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

struct oci_blob_writer {
	char root[PATH_MAX];
	char tmp[PATH_MAX];
	char expect[OCI_DIGEST_LEN + 1]; /* "" when any */
	char digest[OCI_DIGEST_LEN + 1]; /* once checked */
	int fd;
	int64_t size, max, written;
	bool checked;
	struct oci_sha256 h;
};

static int mkdir_p1(const char *p, struct moat_err *e)
{
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "blob store: mkdir %s", p);
	struct stat st;
	if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
		return moat_err_set(e, MOAT_E_SYSTEM, ENOTDIR, "blob store: %s", p);
	return 0;
}

int oci_blobs_ensure(const char *root, struct moat_err *e)
{
	char p[PATH_MAX];
	if (strlen(root) > PATH_MAX - 100)
		return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "blob store %s", root);
	if (mkdir_p1(root, e) < 0)
		return -1;
	snprintf(p, sizeof p, "%s/blobs", root);
	if (mkdir_p1(p, e) < 0)
		return -1;
	snprintf(p, sizeof p, "%s/blobs/sha256", root);
	if (mkdir_p1(p, e) < 0)
		return -1;
	snprintf(p, sizeof p, "%s/tmp", root);
	return mkdir_p1(p, e);
}

int oci_blobs_open(const char *root, struct moat_err *e)
{
	char p[PATH_MAX];
	if (oci_blobs_ensure(root, e) < 0)
		return -1;
	snprintf(p, sizeof p, "%s/tmp", root);
	/* what a killed writer left: only plain files of ours live here */
	DIR *d = opendir(p);
	if (!d)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "blob store: %s", p);
	struct dirent *de;
	int rc = 0;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
			rc = moat_err_set(e, MOAT_E_SYSTEM, errno, "blob store: cannot remove %s/%s", p,
					  de->d_name);
			break;
		}
	}
	closedir(d);
	return rc;
}

int oci_blob_path(const char *root, const char *digest, char *out, size_t cap)
{
	if (!oci_digest_valid(digest))
		return -1;
	int n = snprintf(out, cap, "%s/blobs/sha256/%s", root, digest + 7);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

bool oci_blob_has(const char *root, const char *digest)
{
	char p[PATH_MAX];
	struct stat st;
	return oci_blob_path(root, digest, p, sizeof p) == 0 && stat(p, &st) == 0 &&
	       S_ISREG(st.st_mode);
}

int oci_blob_remove(const char *root, const char *digest)
{
	char p[PATH_MAX];
	if (oci_blob_path(root, digest, p, sizeof p) < 0) {
		errno = EINVAL;
		return -1;
	}
	if (unlink(p) < 0 && errno != ENOENT)
		return -1;
	return 0;
}

struct oci_blob_writer *oci_blob_begin(const char *root, const char *expect, int64_t size,
				       int64_t max, struct moat_err *e)
{
	if (expect && !oci_digest_valid(expect)) {
		moat_err_set(e, MOAT_E_USAGE, 0, "blob \"%.80s\": not a sha256 digest", expect);
		if (e)
			e->errnum = EINVAL;
		return NULL;
	}
	if (size >= 0 && max >= 0 && size > max) {
		moat_err_set(e, MOAT_E_SYSTEM, EFBIG, "blob %s: %lld bytes, room for %lld",
			     expect ? expect : "", (long long)size, (long long)max);
		return NULL;
	}
	struct oci_blob_writer *w = calloc(1, sizeof *w);
	if (!w) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "blob");
		return NULL;
	}
	w->fd = -1;
	w->size = size;
	w->max = max;
	snprintf(w->root, sizeof w->root, "%s", root);
	if (expect)
		memcpy(w->expect, expect, OCI_DIGEST_LEN + 1);
	for (int tries = 0; tries < 8 && w->fd < 0; tries++) {
		unsigned char rnd[8];
		if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
			break;
		int n = snprintf(w->tmp, sizeof w->tmp, "%s/tmp/", root);
		for (size_t i = 0; i < sizeof rnd && n > 0 && (size_t)n + 3 < sizeof w->tmp; i++)
			n += snprintf(w->tmp + n, sizeof w->tmp - (size_t)n, "%02x", rnd[i]);
		w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (w->fd < 0 && errno != EEXIST)
			break;
	}
	if (w->fd < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno == ENOSPC || errno == EDQUOT ? ENOSPC : errno,
			     "blob store: cannot create a file in %s/tmp", root);
		free(w);
		return NULL;
	}
	if (oci_sha256_init(&w->h) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "blob: sha256");
		oci_blob_abort(w);
		return NULL;
	}
	return w;
}

static const char *wname(const struct oci_blob_writer *w)
{
	return w->expect[0] ? w->expect : "(unnamed)";
}

int oci_blob_write(struct oci_blob_writer *w, const void *p, size_t n, struct moat_err *e)
{
	if (w->checked)
		return moat_err_set(e, MOAT_E_SYSTEM, EINVAL, "blob %s: write after check", wname(w));
	if (w->size >= 0 && (int64_t)n > w->size - w->written)
		return moat_err_set(e, MOAT_E_SYSTEM, EFBIG,
				    "blob %s: more than the %lld bytes announced", wname(w),
				    (long long)w->size);
	if (w->max >= 0 && (int64_t)n > w->max - w->written)
		return moat_err_set(e, MOAT_E_SYSTEM, EFBIG,
				    "blob %s: more than the %lld bytes of room in the store",
				    wname(w), (long long)w->max);
	if (oci_sha256_update(&w->h, p, n) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EIO, "blob %s: sha256", wname(w));
	const char *c = p;
	size_t left = n;
	while (left > 0) {
		ssize_t k = write(w->fd, c, left);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int err = errno == EDQUOT ? ENOSPC : errno;
			return moat_err_set(e, MOAT_E_SYSTEM, err, "blob %s: writing %s", wname(w),
					    w->tmp);
		}
		c += k;
		left -= (size_t)k;
	}
	w->written += (int64_t)n;
	return 0;
}

int oci_blob_check(struct oci_blob_writer *w, struct moat_err *e)
{
	if (w->checked)
		return 0;
	if (w->size >= 0 && w->written != w->size)
	{
		moat_err_set(e, MOAT_E_SYSTEM, 0, "blob %s: %lld bytes received, %lld announced",
			     wname(w), (long long)w->written, (long long)w->size);
		if (e)
			e->errnum = EBADMSG;
		return -1;
	}
	if (oci_sha256_final(&w->h, w->digest) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EIO, "blob %s: sha256", wname(w));
	if (w->expect[0] && strcmp(w->digest, w->expect) != 0) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "blob %s: digest mismatch (the content is %s)",
			     w->expect, w->digest);
		if (e)
			e->errnum = EBADMSG;
		return -1;
	}
	w->checked = true;
	return 0;
}

int oci_blob_commit(struct oci_blob_writer *w, char digest_out[OCI_DIGEST_LEN + 1],
		    struct moat_err *e)
{
	int rc = -1;
	char dst[PATH_MAX], dir[PATH_MAX];
	_cleanup_close_ int dfd = -1;
	if (oci_blob_check(w, e) < 0)
		goto out;
	if (fsync(w->fd) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno == EDQUOT ? ENOSPC : errno, "blob %s: fsync",
			     w->digest);
		goto out;
	}
	if (oci_blob_path(w->root, w->digest, dst, sizeof dst) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, ENAMETOOLONG, "blob %s", w->digest);
		goto out;
	}
	/* link: an existing blob (same digest, same bytes) stays as it is */
	if (link(w->tmp, dst) < 0 && errno != EEXIST) {
		moat_err_set(e, MOAT_E_SYSTEM, errno == EDQUOT ? ENOSPC : errno,
			     "blob %s: cannot link it into %s", w->digest, dst);
		goto out;
	}
	snprintf(dir, sizeof dir, "%s/blobs/sha256", w->root);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "blob %s: fsync %s", w->digest, dir);
		unlink(dst); /* not durable: as if never written */
		goto out;
	}
	if (digest_out)
		memcpy(digest_out, w->digest, OCI_DIGEST_LEN + 1);
	rc = 0;
out:
	oci_blob_abort(w);
	return rc;
}

void oci_blob_abort(struct oci_blob_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp[0])
		unlink(w->tmp);
	oci_sha256_free(&w->h);
	free(w);
}

int64_t oci_blob_written(const struct oci_blob_writer *w)
{
	return w->written;
}

int oci_blob_read(const char *root, const char *digest, size_t max, char **data, size_t *len,
		  struct moat_err *e)
{
	char p[PATH_MAX];
	*data = NULL;
	*len = 0;
	if (oci_blob_path(root, digest, p, sizeof p) < 0) {
		moat_err_set(e, MOAT_E_USAGE, 0, "blob \"%.80s\": not a sha256 digest", digest);
		if (e)
			e->errnum = EINVAL;
		return -1;
	}
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "blob %s", digest);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "blob %s", digest);
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max)
		return moat_err_set(e, MOAT_E_SYSTEM, EFBIG, "blob %s: %lld bytes, at most %zu read",
				    digest, (long long)st.st_size, max);
	_cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "blob %s", digest);
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return moat_err_set(e, MOAT_E_SYSTEM, k < 0 ? errno : EIO, "blob %s: read",
					    digest);
		got += (size_t)k;
	}
	buf[got] = '\0';
	char d[OCI_DIGEST_LEN + 1];
	if (oci_sha256_buf(buf, got, d) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EIO, "blob %s: sha256", digest);
	if (strcmp(d, digest) != 0) {
		moat_err_set(e, MOAT_E_SYSTEM, 0, "blob %s: changed on disk (its content is %s)",
			     digest, d);
		if (e)
			e->errnum = EBADMSG;
		return -1;
	}
	*data = steal_ptr(&buf);
	*len = got;
	return 0;
}
