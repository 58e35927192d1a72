/* The directory backend of the artifact store (artifacts_store.h):
 *
 *   <data>/artifacts/            0700, held open as a directory fd
 *   <data>/artifacts/.tmp/       uploads in progress: "<session>.<random>"
 *   <data>/artifacts/<session>/  0700, one regular file per artifact
 *
 * An upload is written to a temp file made with O_EXCL|O_NOFOLLOW under
 * the .tmp directory's fd, hashed on the way, fsync'd, and renamed into
 * its session's directory only when complete and within its size_max:
 * the name shows the old bytes or the new ones, never a part. A kill -9
 * leaves temp files only, which init sweeps. ".tmp" cannot be a session
 * (session ids are [A-Za-z0-9_-]) and no artifact lives in it, so an
 * artifact named ".tmp-x" is not mistaken for a leftover.
 *
 * Each file carries its sha256 in the xattr user.moat.sha256, set on the
 * temp file before the rename (so it is atomic with the bytes); a file
 * without one (a filesystem without user xattrs) is hashed when listed.
 * Everything is opened through directory fds without following symlinks:
 * a symlink or a fifo planted in a session's directory is not an
 * artifact. */
#define _GNU_SOURCE
#include "artifacts.h"
#include "artifacts_store.h"
#include "jfield.h"

#include "../base/cleanup.h"
#include "../base/own.h"
#include "../base/util.h"
#include "../base/walk.h"
#include "../oci/digest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define XATTR_SHA "user.moat.sha256"

static int rootfd = -1; /* <data>/artifacts */
static int tmpfd = -1;  /* <data>/artifacts/.tmp */

struct artifacts_put {
	char tmp[96];   /* name under .tmp */
	char sid[65];
	char name[256];
	int fd;
	uint64_t max, written;
	struct oci_sha256 h;
};

int artifacts_fail(struct core_err *e, int status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cerr_va(e, status, code, fmt, ap);
	va_end(ap);
	return -1;
}

bool artifacts_sid_ok(const char *sid)
{
	size_t n = sid ? strlen(sid) : 0;
	if (n < 1 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = sid[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* A name quoted for a message (names are checked UTF-8, but a message
 * may quote one that failed the check). */
static const char *shown(char *buf, const char *name)
{
	return moat_show(buf, name, strlen(name));
}

static int sys_fail(struct core_err *e, int err, const char *what, const char *sid,
		    const char *name)
{
	char q[MOAT_SHOWN_CAP];
	if (err == ENOSPC || err == EDQUOT)
		return artifacts_fail(e, 507, "insufficient_storage",
				      "artifact \"%s\" of session %s: %s: no space left in the store",
				      shown(q, name), sid, what);
	return artifacts_fail(e, 500, "internal", "artifact \"%s\" of session %s: %s: %s",
			      shown(q, name), sid, what, strerror(err));
}

static void sweep_tmp(const char *prefix)
{
	_cleanup_close_ int fd = dup(tmpfd);
	if (fd < 0)
		return;
	DIR *d = fdopendir(fd);
	if (!d)
		return;
	fd = -1; /* the DIR owns it */
	size_t pl = prefix ? strlen(prefix) : 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (pl && strncmp(de->d_name, prefix, pl))
			continue;
		/* only our temp files live here; a directory is not ours to walk */
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
			fprintf(stderr, "moat serve: artifacts: cannot remove .tmp/%s: %s\n",
				de->d_name, strerror(errno));
	}
	closedir(d);
}

static int dir_init(const char *data_dir, struct core_err *e)
{
	struct moat_err me = {0};
	_cleanup_close_ int dfd = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return artifacts_fail(e, 500, "internal", "artifacts: %s: %s", data_dir,
				      strerror(errno));
	rootfd = moat_own_dir(dfd, "artifacts", 0700, &me);
	if (rootfd < 0)
		return artifacts_fail(e, 500, "internal", "artifacts: %s/%s", data_dir, me.msg);
	tmpfd = moat_own_dir(rootfd, ".tmp", 0700, &me);
	if (tmpfd < 0) {
		close(rootfd);
		rootfd = -1;
		return artifacts_fail(e, 500, "internal", "artifacts: %s/artifacts/%s", data_dir,
				      me.msg);
	}
	sweep_tmp(NULL); /* what a killed daemon's uploads left */
	return 0;
}

static void dir_shutdown(void)
{
	if (tmpfd >= 0)
		close(tmpfd);
	if (rootfd >= 0)
		close(rootfd);
	tmpfd = rootfd = -1;
}

/* The session's directory, made when asked (uploads) or -1 with errno
 * ENOENT when it has none yet. */
static int session_dir(const char *sid, bool make, struct core_err *e)
{
	if (rootfd < 0) {
		errno = EINVAL;
		return artifacts_fail(e, 503, "unavailable", "the artifact store is not open");
	}
	if (make) {
		struct moat_err me = {0};
		int fd = moat_own_dir(rootfd, sid, 0700, &me);
		if (fd < 0)
			return artifacts_fail(e, 500, "internal", "artifacts of session %s: %s", sid,
					      me.msg);
		return fd;
	}
	int fd = openat(rootfd, sid, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno != ENOENT)
		return artifacts_fail(e, 500, "internal", "artifacts of session %s: %s", sid,
				      strerror(errno));
	if (fd < 0)
		artifacts_fail(e, 404, "not_found", "session %s has no artifacts", sid);
	return fd;
}

static struct artifacts_put *dir_put_begin(const char *sid, const char *name, uint64_t size_max,
					   struct core_err *e)
{
	if (tmpfd < 0) {
		artifacts_fail(e, 503, "unavailable", "the artifact store is not open");
		return NULL;
	}
	struct artifacts_put *p = calloc(1, sizeof *p);
	if (!p) {
		artifacts_fail(e, 500, "internal", "out of memory");
		return NULL;
	}
	p->fd = -1;
	p->max = size_max;
	snprintf(p->sid, sizeof p->sid, "%s", sid);
	snprintf(p->name, sizeof p->name, "%s", name);
	int err = EEXIST;
	for (int tries = 0; tries < 8 && p->fd < 0 && err == EEXIST; tries++) {
		unsigned char rnd[8];
		if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
			err = errno ? errno : EIO;
			break;
		}
		int n = snprintf(p->tmp, sizeof p->tmp, "%s.", sid);
		for (size_t i = 0; i < sizeof rnd; i++)
			n += snprintf(p->tmp + n, sizeof p->tmp - (size_t)n, "%02x", rnd[i]);
		p->fd = openat(tmpfd, p->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       0600);
		err = p->fd < 0 ? errno : 0;
	}
	if (p->fd < 0) {
		sys_fail(e, err, "cannot make a temp file", sid, name);
		free(p);
		return NULL;
	}
	if (oci_sha256_init(&p->h) < 0) {
		artifacts_fail(e, 500, "internal", "sha256: out of memory");
		close(p->fd);
		unlinkat(tmpfd, p->tmp, 0);
		free(p);
		return NULL;
	}
	return p;
}

static void dir_put_abort(struct artifacts_put *p)
{
	if (!p)
		return;
	oci_sha256_free(&p->h);
	if (p->fd >= 0)
		close(p->fd);
	if (unlinkat(tmpfd, p->tmp, 0) < 0 && errno != ENOENT)
		fprintf(stderr, "moat serve: artifacts: cannot remove .tmp/%s: %s\n", p->tmp,
			strerror(errno));
	free(p);
}

static int dir_put_write(struct artifacts_put *p, const void *buf, size_t n, struct core_err *e)
{
	char q[MOAT_SHOWN_CAP];
	if (n > p->max - p->written)
		return artifacts_fail(e, 413, "too_large",
				      "artifact \"%s\": more than its size_max of %llu bytes",
				      shown(q, p->name), (unsigned long long)p->max);
	if (oci_sha256_update(&p->h, buf, n) < 0)
		return artifacts_fail(e, 500, "internal", "sha256 failed");
	if (moat_write_all(p->fd, buf, n) < 0)
		return sys_fail(e, errno, "writing", p->sid, p->name);
	p->written += n;
	return 0;
}

static int dir_put_commit(struct artifacts_put *p, struct artifacts_info *out,
			  struct core_err *e)
{
	char digest[OCI_DIGEST_LEN + 1];
	struct stat st;
	int rc = -1;
	_cleanup_close_ int sdfd = -1;
	if (oci_sha256_final(&p->h, digest) < 0) {
		artifacts_fail(e, 500, "internal", "sha256 failed");
		goto out;
	}
	/* the digest goes with the bytes (one rename moves both); a
	 * filesystem without user xattrs is hashed when listed instead */
	if (fsetxattr(p->fd, XATTR_SHA, digest + 7, ARTIFACTS_SHA256_HEX, 0) < 0 &&
	    errno != ENOTSUP && errno != EOPNOTSUPP) {
		sys_fail(e, errno, "setting its digest", p->sid, p->name);
		goto out;
	}
	if (fsync(p->fd) < 0) {
		sys_fail(e, errno, "fsync", p->sid, p->name);
		goto out;
	}
	if (fstat(p->fd, &st) < 0) {
		sys_fail(e, errno, "fstat", p->sid, p->name);
		goto out;
	}
	sdfd = session_dir(p->sid, true, e);
	if (sdfd < 0)
		goto out;
	if (renameat(tmpfd, p->tmp, sdfd, p->name) < 0) {
		char q[MOAT_SHOWN_CAP];
		if (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST)
			artifacts_fail(e, 409, "conflict",
				       "artifact \"%s\": a directory of that name is in the way",
				       shown(q, p->name));
		else
			sys_fail(e, errno, "renaming it into place", p->sid, p->name);
		goto out;
	}
	if (fsync(sdfd) < 0) {
		/* not known to be durable: say so, and do not leave it looking stored */
		int err = errno;
		unlinkat(sdfd, p->name, 0);
		sys_fail(e, err, "fsync of the session's directory", p->sid, p->name);
		goto out;
	}
	out->size = p->written;
	out->created_at = (int64_t)st.st_mtim.tv_sec;
	memcpy(out->sha256, digest + 7, ARTIFACTS_SHA256_HEX + 1);
	rc = 0;
out:
	oci_sha256_free(&p->h);
	close(p->fd);
	p->fd = -1;
	if (rc < 0 && unlinkat(tmpfd, p->tmp, 0) < 0 && errno != ENOENT)
		fprintf(stderr, "moat serve: artifacts: cannot remove .tmp/%s: %s\n", p->tmp,
			strerror(errno));
	free(p);
	return rc;
}

static bool hex64(const char *s)
{
	for (int i = 0; i < ARTIFACTS_SHA256_HEX; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[ARTIFACTS_SHA256_HEX] == '\0';
}

/* The file's sha256: its xattr, else hashed now (and the xattr set, so
 * that this happens once per file). */
static int file_sha(int fd, char out[ARTIFACTS_SHA256_HEX + 1])
{
	ssize_t n = fgetxattr(fd, XATTR_SHA, out, ARTIFACTS_SHA256_HEX);
	if (n == ARTIFACTS_SHA256_HEX) {
		out[n] = '\0';
		if (hex64(out))
			return 0;
	}
	struct oci_sha256 h;
	if (oci_sha256_init(&h) < 0)
		return -1;
	char buf[65536], digest[OCI_DIGEST_LEN + 1];
	off_t off = 0;
	for (;;) {
		ssize_t k = pread(fd, buf, sizeof buf, off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || oci_sha256_update(&h, buf, (size_t)k) < 0) {
			oci_sha256_free(&h);
			return -1;
		}
		if (k == 0)
			break;
		off += k;
	}
	if (oci_sha256_final(&h, digest) < 0)
		return -1;
	memcpy(out, digest + 7, ARTIFACTS_SHA256_HEX + 1);
	(void)!fsetxattr(fd, XATTR_SHA, out, ARTIFACTS_SHA256_HEX, 0); /* a cache only */
	return 0;
}

/* Open an artifact of the session's directory: a regular file, not
 * through a symlink; -1 and errno ENOENT for anything else. */
static int open_artifact(int sdfd, const char *name, struct stat *st)
{
	/* O_NONBLOCK: a fifo planted here must not hang the daemon */
	int fd = openat(sdfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ELOOP || errno == ENXIO)
			errno = ENOENT;
		return -1;
	}
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
		close(fd);
		errno = ENOENT;
		return -1;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

static int dir_get(const char *sid, const char *name, int *fdp, struct artifacts_info *out,
		   struct core_err *e)
{
	char q[MOAT_SHOWN_CAP];
	_cleanup_close_ int sdfd = session_dir(sid, false, e);
	if (sdfd < 0) {
		if (errno == ENOENT)
			artifacts_fail(e, 404, "not_found", "session %s has no artifact \"%s\"", sid,
				       shown(q, name));
		return -1;
	}
	struct stat st;
	_cleanup_close_ int fd = open_artifact(sdfd, name, &st);
	if (fd < 0) {
		if (errno == ENOENT)
			return artifacts_fail(e, 404, "not_found",
					      "session %s has no artifact \"%s\"", sid, shown(q, name));
		return sys_fail(e, errno, "open", sid, name);
	}
	out->size = (uint64_t)st.st_size;
	out->created_at = (int64_t)st.st_mtim.tv_sec;
	if (file_sha(fd, out->sha256) < 0)
		return sys_fail(e, errno ? errno : EIO, "hashing", sid, name);
	if (fdp)
		*fdp = steal_fd(&fd);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static json_t *dir_list(const char *sid, struct core_err *e)
{
	json_t *arr = json_array();
	if (!arr) {
		artifacts_fail(e, 500, "internal", "out of memory");
		return NULL;
	}
	_cleanup_close_ int sdfd = session_dir(sid, false, e);
	if (sdfd < 0) {
		if (errno == ENOENT)
			return arr; /* nothing stored yet */
		json_decref(arr);
		return NULL;
	}
	int dfd = dup(sdfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		sys_fail(e, errno, "listing", sid, "");
		json_decref(arr);
		return NULL;
	}
	struct moat_strv names = {0};
	struct dirent *de;
	while ((de = readdir(d))) {
		struct core_err ne;
		/* what is not a valid name was not stored by us: not listed */
		if (artifacts_name_check(de->d_name, &ne) == 0)
			moat_strv_add(&names, de->d_name);
	}
	closedir(d);
	if (names.n)
		qsort(names.v, names.n, sizeof *names.v, cmp_str);
	for (size_t i = 0; i < names.n; i++) {
		struct stat st;
		char sha[ARTIFACTS_SHA256_HEX + 1];
		_cleanup_close_ int fd = open_artifact(sdfd, names.v[i], &st);
		if (fd < 0 || file_sha(fd, sha) < 0)
			continue; /* gone meanwhile, or not an artifact */
		char when[32];
		struct tm tm;
		time_t t = st.st_mtim.tv_sec;
		if (!gmtime_r(&t, &tm) || !strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm))
			snprintf(when, sizeof when, "1970-01-01T00:00:00Z");
		json_t *o = json_pack("{s:s,s:I,s:s,s:s}", "name", names.v[i], "size",
				      (json_int_t)st.st_size, "created_at", when, "sha256", sha);
		if (o)
			json_array_append_new(arr, o);
	}
	moat_strv_free(&names);
	return arr;
}

static int dir_del(const char *sid, const char *name, struct core_err *e)
{
	char q[MOAT_SHOWN_CAP];
	_cleanup_close_ int sdfd = session_dir(sid, false, e);
	if (sdfd < 0) {
		if (errno == ENOENT)
			artifacts_fail(e, 404, "not_found", "session %s has no artifact \"%s\"", sid,
				       shown(q, name));
		return -1;
	}
	struct stat st;
	if (fstatat(sdfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return artifacts_fail(e, 404, "not_found", "session %s has no artifact \"%s\"", sid,
				      shown(q, name));
	if (unlinkat(sdfd, name, 0) < 0) {
		if (errno == ENOENT)
			return artifacts_fail(e, 404, "not_found",
					      "session %s has no artifact \"%s\"", sid, shown(q, name));
		return sys_fail(e, errno, "delete", sid, name);
	}
	if (fsync(sdfd) < 0)
		fprintf(stderr, "moat serve: artifacts of session %s: fsync: %s\n", sid,
			strerror(errno));
	return 0;
}

static int dir_purge(const char *sid, struct core_err *e)
{
	if (rootfd < 0)
		return artifacts_fail(e, 503, "unavailable", "the artifact store is not open");
	char prefix[80];
	snprintf(prefix, sizeof prefix, "%s.", sid);
	sweep_tmp(prefix);
	if (moat_walk_rm(rootfd, sid, 0) < 0)
		return artifacts_fail(e, 500, "internal", "artifacts of session %s: cannot remove: %s",
				      sid, strerror(errno));
	return 0;
}

const struct artifacts_backend artifacts_dir_backend = {
	.name = "directory",
	.init = dir_init,
	.shutdown = dir_shutdown,
	.put_begin = dir_put_begin,
	.put_write = dir_put_write,
	.put_commit = dir_put_commit,
	.put_abort = dir_put_abort,
	.get = dir_get,
	.list = dir_list,
	.del = dir_del,
	.purge = dir_purge,
};
