/* File operations of the API, done by the agent inside the sandbox: the
 * sandbox's mount view, Landlock and seccomp confine them exactly as they
 * confine the sandbox's own processes, so no path, symlink or ".." can
 * reach what the sandbox cannot. On top of that: /proc, /sys and /dev are
 * refused (the agent's own /proc/self would be a way to its memory), every
 * path is resolved by resolve.c (no magic link, no kernel filesystem on
 * the way), every object is then reached by descriptor (openat & co, the
 * last component with O_NOFOLLOW), and only regular files are read or
 * written. See agent.h. */
#define _GNU_SOURCE
#include "agent.h"
#include "resolve.h"

#include "../base/cleanup.h"
#include "../base/util.h"
#include "../base/walk.h"
#include "../patch/patch.h"
#include "../proto/entries.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#define WORKSPACE "/workspace"
#define MAX_READ (256u << 20)
#define MAX_LIST 100000

static dev_t mask_dev;
static bool have_mask_dev;
/* The engine's readable placeholder objects (src/jail/internal.h JAIL_PH_*:
 * an empty 0444 file, an empty 0555 directory), known by inode. */
static ino_t ph_file_ino, ph_dir_ino;

/* A mountinfo path field: octal escapes (\040 ...) decoded in place. */
static void unescape(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
		    p[3] >= '0' && p[3] <= '7') {
			*o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 3;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
}

/* Placeholders are binds of those two objects: a mount whose root within
 * the mask filesystem is /masks/ph or /masks/phdir names them. Found once,
 * at the start (every placeholder is mounted before the agent runs). */
static void find_placeholders(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	while (f && (!ph_file_ino || !ph_dir_ino) && getline(&line, &cap, f) > 0) {
		char *save = NULL, *fld[5];
		int n = 0;
		for (char *t = strtok_r(line, " ", &save); t && n < 5; t = strtok_r(NULL, " ", &save))
			fld[n++] = t;
		if (n < 5)
			continue;
		bool file = strcmp(fld[3], "/masks/ph") == 0, dir = strcmp(fld[3], "/masks/phdir") == 0;
		if (!file && !dir)
			continue;
		unescape(fld[4]);
		struct stat st;
		if (stat(fld[4], &st) < 0 || st.st_dev != mask_dev)
			continue;
		if (file && S_ISREG(st.st_mode) && st.st_size == 0)
			ph_file_ino = st.st_ino;
		else if (dir && S_ISDIR(st.st_mode))
			ph_dir_ino = st.st_ino;
	}
}

void fs_init(void)
{
	fsr_init();
	/* /proc/timer_list is always covered by the engine's empty mask
	 * file: the device of masks and write-protection placeholders. */
	struct stat st;
	if (stat("/proc/timer_list", &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
		struct statfs sf;
		if (statfs("/proc/timer_list", &sf) == 0 && sf.f_type != PROC_SUPER_MAGIC) {
			mask_dev = st.st_dev;
			have_mask_dev = true;
			find_placeholders();
		}
	}
}

/* Masks are the engine's empty, mode-000 file and directory, placeholders
 * its readable empty ones (by inode); the sandbox's /tmp and home live on
 * the same filesystem, so the device alone does not tell. */
static bool is_mask(const struct stat *st);

bool fs_is_mask(const struct stat *st)
{
	return is_mask(st);
}

static bool is_mask(const struct stat *st)
{
	if (!have_mask_dev || st->st_dev != mask_dev)
		return false;
	if (st->st_ino && (st->st_ino == ph_file_ino || st->st_ino == ph_dir_ino))
		return true;
	if ((st->st_mode & 07777) != 0)
		return false;
	return S_ISDIR(st->st_mode) ? st->st_nlink <= 2 : S_ISREG(st->st_mode) && st->st_size == 0;
}

static void normalize(char *p)
{
	/* lexical, on an absolute path: "." and "//" go, ".." pops */
	char *out = p, *s = p;
	while (*s) {
		while (*s == '/')
			s++;
		if (!*s)
			break;
		char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);
		if (n == 1 && s[0] == '.') {
		} else if (n == 2 && s[0] == '.' && s[1] == '.') {
			while (out > p && *--out != '/')
				;
		} else {
			*out++ = '/';
			memmove(out, s, n);
			out += n;
		}
		s = e;
	}
	if (out == p)
		*out++ = '/';
	*out = '\0';
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

/* The request's "path" (relative to the workspace or absolute) as an
 * absolute, normalised path; NULL after answering invalid_path. */
static bool resolve(const struct agent_req *r, json_t *req, const char *key, char *out,
		    size_t cap)
{
	json_t *v = json_object_get(req, key);
	const char *p = json_string_value(v);
	if (!p || !*p || strlen(p) != json_string_length(v)) {
		agent_fail(r, "invalid_path", "%s must be a non-empty path without NUL", key);
		return false;
	}
	if (snprintf(out, cap, "%s%s%s", p[0] == '/' ? "" : WORKSPACE, p[0] == '/' ? "" : "/",
		     p) >= (int)cap) {
		agent_fail(r, "invalid_path", "path too long");
		return false;
	}
	normalize(out);
	if (under(out, "/proc") || under(out, "/sys") || under(out, "/dev")) {
		agent_fail(r, "invalid_path", "%s: outside the sandbox's files", out);
		return false;
	}
	return true;
}

bool fs_path(const struct agent_req *r, json_t *req, const char *key, char *out, size_t cap)
{
	return resolve(r, req, key, out, cap);
}

/* After open: still not a kernel filesystem (a symlink may point there). */
static bool plain_fs(int fd)
{
	return !fsr_refused(fd);
}

/* Answer the error of resolving or opening path. */
static void path_fail(const struct agent_req *r, const char *path, int err)
{
	if (err == EXDEV)
		agent_fail(r, "invalid_path",
			   "%s: outside the sandbox's files (a link into /proc, /sys, /dev or "
			   "another kernel filesystem)",
			   path);
	else if (err == ELOOP)
		agent_fail(r, "invalid_path",
			   "%s: too many symbolic links, or one where none may be", path);
	else
		agent_fail(r, agent_errno_code(err), "%s: %s", path, strerror(err));
}

/* Resolve path (see resolve.h); answers the error itself. */
static bool walk(const struct agent_req *r, const char *path, int flags, struct fsr *out)
{
	if (fsr_walk(FSR_ROOT, path, flags, out) == 0)
		return true;
	path_fail(r, path, errno);
	return false;
}

/* See entry_make (entry.c): leaf is the name inside dir. */
static json_t *entry_json(int dir, const char *leaf, const char *name, const char *path,
			  const struct stat *st, bool meta)
{
	return entry_make(dir, leaf, name, path, st, meta);
}

/* Open a regular file for reading; answers the error itself. */
static int open_regular(const struct agent_req *r, const char *path, struct stat *st)
{
	struct fsr w;
	if (!walk(r, path, FSR_FOLLOW, &w))
		return -1;
	/* O_NONBLOCK: a FIFO swapped in does not block us (and is refused) */
	int fd = openat(w.dir, w.name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
	int err = errno;
	fsr_done(&w);
	if (fd < 0) {
		path_fail(r, path, err);
		return -1;
	}
	if (fstat(fd, st) < 0 || !plain_fs(fd) || !S_ISREG(st->st_mode)) {
		bool dir = S_ISDIR(st->st_mode);
		close(fd);
		agent_fail(r, dir ? "is_directory" : "invalid_path",
			   dir ? "%s is a directory" : "%s is not a regular file", path);
		return -1;
	}
	return fd;
}

static int read_all(int fd, size_t size, char **out, size_t *len)
{
	char *buf = malloc(size ? size : 1);
	size_t got = 0;
	if (!buf)
		return -1;
	while (got < size) {
		ssize_t n = read(fd, buf + got, size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* shrank meanwhile */
		got += (size_t)n;
	}
	*out = buf;
	*len = got;
	return 0;
}

void fs_read(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	json_int_t max = json_integer_value(json_object_get(req, "max"));
	if (max <= 0 || max > MAX_READ)
		max = MAX_READ;
	struct stat st;
	int fd = open_regular(r, path, &st);
	if (fd < 0)
		return;
	if (st.st_size > max) {
		close(fd);
		agent_fail(r, "too_large", "%s is %lld bytes, over the limit of %lld", path,
			   (long long)st.st_size, (long long)max);
		return;
	}
	char *buf;
	size_t len;
	if (read_all(fd, (size_t)st.st_size, &buf, &len) < 0) {
		close(fd);
		agent_fail(r, "internal", "out of memory");
		return;
	}
	close(fd);
	agent_reply(r, json_pack("{s:s,s:I}", "path", path, "size", (json_int_t)len), buf, len);
	free(buf);
}

/* A fresh name for a temporary file or directory next to `name`. */
static int tmp_name(char *out, size_t cap, const char *prefix, const char *name)
{
	unsigned char r[6];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		return -1;
	snprintf(out, cap, ".%.200s%s%02x%02x%02x%02x%02x%02x", name, prefix, r[0], r[1], r[2],
		 r[3], r[4], r[5]);
	return 0;
}

/* Write data to name in dir atomically (temp file + rename), keeping an
 * existing file's mode; a symlink there is replaced, not followed. The
 * temp file (in dir) is left for the caller to rename when tmp is given
 * (all-or-nothing patches). */
static int set_meta(int fd, json_t *meta);

static int write_file_meta(int dir, const char *name, const void *data, size_t len,
			   mode_t mode, char *tmp, size_t tmpcap, json_t *meta);

static int write_file(int dir, const char *name, const void *data, size_t len, mode_t mode,
		      char *tmp, size_t tmpcap)
{
	return write_file_meta(dir, name, data, len, mode, tmp, tmpcap, NULL);
}

/* write_file, and the temp file gets meta's xattrs before it is renamed
 * into place (a file is never shown without the metadata it was given). */
static int write_file_meta(int dir, const char *name, const void *data, size_t len,
			   mode_t mode, char *tmp, size_t tmpcap, json_t *meta)
{
	char local[NAME_MAX + 1];
	char *t = tmp ? tmp : local;
	size_t cap = tmp ? tmpcap : sizeof local;
	struct stat st;
	if (!strcmp(name, ".")) {
		errno = EISDIR;
		return -1;
	}
	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode)) {
			errno = EISDIR;
			return -1;
		}
		if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
			errno = EINVAL;
			return -1;
		}
		if (S_ISREG(st.st_mode))
			mode = st.st_mode & 0777;
	}
	int fd = -1;
	for (int i = 0; i < 16 && fd < 0; i++) {
		if (tmp_name(t, cap, ".moat-", name) < 0)
			return -1;
		fd = openat(dir, t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			return -1;
	}
	if (fd < 0)
		return -1;
	const char *p = data;
	size_t left = len;
	while (left) {
		ssize_t n = write(fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;
			close(fd);
			unlinkat(dir, t, 0);
			errno = err;
			return -1;
		}
		p += n;
		left -= (size_t)n;
	}
	if (meta && set_meta(fd, meta) < 0) {
		int err = errno;
		close(fd);
		unlinkat(dir, t, 0);
		errno = err;
		return -1;
	}
	if (fchmod(fd, mode) < 0 || close(fd) < 0) {
		int err = errno;
		unlinkat(dir, t, 0);
		errno = err;
		return -1;
	}
	if (!tmp && renameat(dir, t, dir, name) < 0) {
		int err = errno;
		unlinkat(dir, t, 0);
		errno = err;
		return -1;
	}
	return 0;
}

#define META_KEYS_MAX 64
#define META_VALUE_MAX 4096

/* "metadata": {k: v}, keys [A-Za-z0-9_.-]{1,64}, string values of at most
 * 4 KiB without NUL; answers invalid_request. */
static bool meta_valid(const struct agent_req *r, json_t *meta)
{
	if (!meta)
		return true;
	if (!json_is_object(meta) || json_object_size(meta) > META_KEYS_MAX) {
		agent_fail(r, "invalid_request",
			   "metadata must be an object of at most %d string values", META_KEYS_MAX);
		return false;
	}
	const char *k;
	json_t *v;
	json_object_foreach(meta, k, v) {
		size_t kl = strlen(k);
		bool ok = kl >= 1 && kl <= 64 && kl == strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
								"abcdefghijklmnopqrstuvwxyz"
								"0123456789_.-");
		if (!ok) {
			agent_fail(r, "invalid_request",
				   "metadata key %.80s: 1 to 64 of A-Z a-z 0-9 _ . -", k);
			return false;
		}
		if (!json_is_string(v) || json_string_length(v) > META_VALUE_MAX ||
		    strlen(json_string_value(v)) != json_string_length(v)) {
			agent_fail(r, "invalid_request",
				   "metadata %s: a string of at most %d bytes without NUL", k,
				   META_VALUE_MAX);
			return false;
		}
	}
	return true;
}

static int set_meta(int fd, json_t *meta)
{
	const char *k;
	json_t *v;
	json_object_foreach(meta, k, v) {
		char name[128];
		snprintf(name, sizeof name, "%s%s", ENTRY_META_PREFIX, k);
		if (fsetxattr(fd, name, json_string_value(v), json_string_length(v), 0) < 0) {
			/* no room in the inode's xattr space (ext4: one block for
			 * all of them) is the metadata's size, not a full disk */
			if (errno == ENOSPC || errno == ERANGE)
				errno = E2BIG;
			return -1;
		}
	}
	return 0;
}

/* The filesystem of fd, for a message. */
static const char *fs_kind(int fd, char *buf, size_t cap)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return "this filesystem";
	switch ((unsigned long)sf.f_type) {
	case TMPFS_MAGIC:
		return "tmpfs";
	case OVERLAYFS_SUPER_MAGIC:
		return "overlayfs";
	case EXT4_SUPER_MAGIC:
		return "ext4";
	case BTRFS_SUPER_MAGIC:
		return "btrfs";
	case XFS_SUPER_MAGIC:
		return "xfs";
	default:
		snprintf(buf, cap, "the filesystem of type 0x%lx", (unsigned long)sf.f_type);
		return buf;
	}
}

void fs_write(const struct agent_req *r, json_t *req, const void *data, size_t len)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	if (!strcmp(path, "/") || !strcmp(path, WORKSPACE)) {
		agent_fail(r, "is_directory", "%s is a directory", path);
		return;
	}
	json_t *meta = json_object_get(req, "metadata");
	if (json_is_null(meta))
		meta = NULL;
	if (!meta_valid(r, meta))
		return;
	struct fsr w;
	if (!walk(r, path, FSR_MKDIRS, &w))
		return;
	int rc = write_file_meta(w.dir, w.name, data, len, 0644, NULL, 0,
				 meta && json_object_size(meta) ? meta : NULL);
	int err = errno;
	if (rc < 0) {
		if (err == ENOTSUP) {
			char kb[64];
			agent_fail(r, "invalid_request",
				   "%s: file metadata needs user extended attributes, which %s "
				   "lacks; nothing was written",
				   path, fs_kind(w.dir, kb, sizeof kb));
		} else if (err == E2BIG || err == ERANGE) {
			agent_fail(r, "too_large",
				   "%s: metadata too large for this filesystem; nothing was written",
				   path);
		} else {
			path_fail(r, path, err);
		}
		fsr_done(&w);
		return;
	}
	struct stat st;
	if (fstatat(w.dir, w.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		err = errno;
		fsr_done(&w);
		path_fail(r, path, err);
		return;
	}
	const char *base = strrchr(path, '/') + 1;
	json_t *o = entry_json(w.dir, w.name, base, path, &st, meta != NULL);
	fsr_done(&w);
	agent_reply(r, json_pack("{s:o}", "entry", o), NULL, 0);
}

/* mkdir -p of path; the leaf left open as *dirfd when asked for. */
static int make_dirs(const struct agent_req *r, const char *path, int *dirfd)
{
	struct fsr w;
	if (!walk(r, path, FSR_FOLLOW | FSR_MKDIRS, &w))
		return -1;
	int rc = strcmp(w.name, ".") && mkdirat(w.dir, w.name, 0755) < 0 && errno != EEXIST ? -1 : 0;
	int fd = rc < 0 ? -1 : openat(w.dir, w.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int err = errno;
	fsr_done(&w);
	if (fd < 0) {
		if (err == ENOTDIR)
			agent_fail(r, "conflict", "%s: %s", path, strerror(err));
		else
			path_fail(r, path, err);
		return -1;
	}
	if (!plain_fs(fd)) {
		close(fd);
		path_fail(r, path, EXDEV);
		return -1;
	}
	if (dirfd)
		*dirfd = fd;
	else
		close(fd);
	return 0;
}

/* {path, exist_ok (default true), parents (default true)} ->
 * {"created", "entry"}. */
void fs_mkdir(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	bool exist_ok = !json_is_false(json_object_get(req, "exist_ok"));
	bool parents = !json_is_false(json_object_get(req, "parents"));
	struct fsr w;
	if (!walk(r, path, FSR_FOLLOW | (parents ? FSR_MKDIRS : 0), &w))
		return;
	bool created = false;
	struct stat st;
	int rc = fstatat(w.dir, w.name, &st, AT_SYMLINK_NOFOLLOW);
	if (rc < 0 && errno == ENOENT) {
		rc = mkdirat(w.dir, w.name, 0755);
		created = rc == 0;
		if (rc < 0 && errno == EEXIST) /* made meanwhile */
			rc = 0;
		if (rc == 0)
			rc = fstatat(w.dir, w.name, &st, AT_SYMLINK_NOFOLLOW);
	}
	int err = errno;
	if (rc < 0) {
		fsr_done(&w);
		path_fail(r, path, err);
		return;
	}
	if (is_mask(&st)) {
		fsr_done(&w);
		agent_fail(r, "forbidden", "%s is protected by the sandbox policy", path);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		fsr_done(&w);
		/* /v1 has always said conflict; the callers of the newer
		 * contract (exist_ok/parents given) get invalid_path */
		bool v1 = !json_object_get(req, "exist_ok") && !json_object_get(req, "parents");
		agent_fail(r, v1 ? "conflict" : "invalid_path",
			   "%s exists and is a %s, not a directory", path,
			   S_ISLNK(st.st_mode) ? "symbolic link" : "file");
		return;
	}
	int fd = openat(w.dir, w.name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	bool refused = fd < 0 || !plain_fs(fd);
	if (fd >= 0)
		close(fd);
	if (refused) {
		fsr_done(&w);
		path_fail(r, path, EXDEV);
		return;
	}
	if (!created && !exist_ok) {
		fsr_done(&w);
		agent_fail(r, "already_exists", "%s already exists", path);
		return;
	}
	const char *base = strrchr(path, '/') + 1;
	json_t *o = entry_json(w.dir, w.name, *base ? base : "/", path, &st, false);
	fsr_done(&w);
	agent_reply(r, json_pack("{s:b,s:o}", "created", created, "entry", o), NULL, 0);
}

static bool mount_point(int dir, const char *name);

/* A name the engine protects, as a rename's source or destination: a mask
 * or placeholder, on a read-only mount, a mount point (the protected names
 * and the directories pinned on the way to them), or (missing) in a
 * read-only directory. */
static bool rename_protected(const struct fsr *at)
{
	struct stat st;
	if (fsr_readonly(at->dir))
		return true;
	if (fstatat(at->dir, at->name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return false; /* missing: made in a writable directory */
	if (is_mask(&st) || mount_point(at->dir, at->name))
		return true;
	int fd = openat(at->dir, at->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	bool ro = fd < 0 || fsr_readonly(fd);
	if (fd >= 0)
		close(fd);
	return ro;
}

void fs_rename(const struct agent_req *r, json_t *req)
{
	char src[PATH_MAX], dst[PATH_MAX];
	if (!resolve(r, req, "src", src, sizeof src) || !resolve(r, req, "dst", dst, sizeof dst))
		return;
	static const char *const fixed[] = {"/", WORKSPACE};
	for (int i = 0; i < 2; i++)
		if (!strcmp(src, fixed[i]) || !strcmp(dst, fixed[i])) {
			agent_fail(r, "invalid_path", "refusing to rename %s", fixed[i]);
			return;
		}
	struct fsr a, b = {.dir = -1};
	if (!walk(r, src, 0, &a))
		return;
	if (!walk(r, dst, 0, &b)) {
		fsr_done(&a);
		return;
	}
	struct stat st;
	const char *code = NULL;
	char msg[64] = "";
	int err = 0;
	if (!strcmp(a.name, ".") || !strcmp(b.name, ".")) {
		code = "invalid_path";
		snprintf(msg, sizeof msg, "a path ending in a directory link or ..");
	} else if (fstatat(a.dir, a.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		err = errno;
	} else if (is_mask(&st)) { /* a protected name not there: as delete does */
		code = "forbidden";
	} else if (rename_protected(&a) || rename_protected(&b)) {
		code = "forbidden";
	} else if (renameat2(a.dir, a.name, b.dir, b.name, 0) < 0) {
		err = errno;
	}
	if (code || err) {
		fsr_done(&a);
		fsr_done(&b);
		if (code && !strcmp(code, "forbidden"))
			agent_fail(r, code, "%s -> %s: protected by the sandbox policy", src, dst);
		else if (code)
			agent_fail(r, code, "%s -> %s: %s", src, dst, msg);
		else if (err == EXDEV)
			agent_fail(r, "invalid_request", "%s -> %s: on different filesystems", src,
				   dst);
		else if (err == EEXIST || err == ENOTEMPTY)
			agent_fail(r, "conflict", "%s is a non-empty directory", dst);
		else if (err == EISDIR || err == ENOTDIR)
			agent_fail(r, "conflict", "%s -> %s: %s", src, dst, strerror(err));
		else if (err == EINVAL)
			agent_fail(r, "invalid_path", "%s -> %s: a directory into itself", src, dst);
		else
			path_fail(r, err == ENOENT ? src : dst, err);
		return;
	}
	int rc = fstatat(b.dir, b.name, &st, AT_SYMLINK_NOFOLLOW);
	err = errno;
	if (rc < 0) {
		fsr_done(&a);
		fsr_done(&b);
		path_fail(r, dst, err);
		return;
	}
	const char *base = strrchr(dst, '/') + 1;
	json_t *o = entry_json(b.dir, b.name, base, dst, &st, false);
	fsr_done(&a);
	fsr_done(&b);
	agent_reply(r, json_pack("{s:o}", "entry", o), NULL, 0);
}

/* rm -r, not following symlinks, staying on one filesystem (a mount
 * point inside is not emptied: it would fail with EBUSY); any depth
 * (src/base/walk.c). */
static int remove_tree(int dirfd, const char *name)
{
	return moat_walk_rm(dirfd, name, MOAT_WALK_DEV_ONLY);
}

void fs_delete(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	if (!strcmp(path, "/") || !strcmp(path, WORKSPACE)) {
		agent_fail(r, "invalid_path", "refusing to delete %s itself", path);
		return;
	}
	bool recursive = json_is_true(json_object_get(req, "recursive"));
	struct fsr w;
	if (!walk(r, path, 0, &w))
		return;
	struct stat st;
	if (fstatat(w.dir, w.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		path_fail(r, path, errno);
		fsr_done(&w);
		return;
	}
	if (is_mask(&st)) {
		fsr_done(&w);
		agent_fail(r, "forbidden", "%s is protected by the sandbox policy", path);
		return;
	}
	int rc;
	if (!strcmp(w.name, ".")) {
		rc = -1;
		errno = EINVAL;
	} else if (!S_ISDIR(st.st_mode)) {
		rc = unlinkat(w.dir, w.name, 0);
	} else if (!recursive) {
		rc = unlinkat(w.dir, w.name, AT_REMOVEDIR);
	} else {
		rc = remove_tree(w.dir, w.name);
	}
	int err = errno;
	fsr_done(&w);
	errno = err;
	if (rc < 0) {
		if (errno == ENOTEMPTY || errno == EEXIST)
			agent_fail(r, "conflict", "%s is a non-empty directory (use recursive)",
				   path);
		else
			agent_fail(r, agent_errno_code(errno), "%s: %s", path, strerror(errno));
		return;
	}
	agent_reply(r, json_object(), NULL, 0);
}

void fs_stat(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	struct fsr w;
	if (!walk(r, path, 0, &w))
		return;
	struct stat st;
	if (fstatat(w.dir, w.name, &st, AT_SYMLINK_NOFOLLOW) < 0 || is_mask(&st)) {
		int err = errno;
		fsr_done(&w);
		if (err == EXDEV || err == ELOOP)
			path_fail(r, path, err);
		else
			agent_fail(r, "not_found", "%s: %s", path,
				   is_mask(&st) ? "No such file or directory" : strerror(err));
		return;
	}
	const char *base = strrchr(path, '/') + 1;
	json_t *o = entry_json(w.dir, w.name, *base ? base : "/", path, &st,
			       json_is_true(json_object_get(req, "metadata")));
	if (S_ISLNK(st.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(w.dir, w.name, t, sizeof t - 1);
		if (n >= 0) {
			t[n] = '\0';
			json_object_set_new(o, "target", json_string(t));
		}
	}
	fsr_done(&w);
	agent_reply(r, json_pack("{s:o}", "entry", o), NULL, 0);
}

/* A directory on another mount that is a kernel filesystem (/proc, /sys,
 * /dev/pts below a listed "/"): shown at most, never entered. */
static bool kernel_dir(const struct moat_walk_ent *en)
{
	if (!S_ISDIR(en->st->st_mode) || !en->other_mount)
		return false;
	int fd = openat(en->dirfd, en->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	bool k = fd < 0 || !plain_fs(fd);
	if (fd >= 0)
		close(fd);
	return k;
}

/* A listing's JSON must fit one frame (MOAT_FRAME_JSON_MAX, 1 MiB): past
 * this many bytes of entries it is cut and said so (truncated). */
#define LIST_JSON_BUDGET (960u << 10)

struct lister {
	const char *dir;
	bool meta;
	size_t bytes;
	size_t depth;
	json_t *out;
	bool truncated;
};

static int list_one(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct lister *l = arg;
	if (ev != MOAT_WALK_ENTRY || is_mask(en->st))
		return MOAT_WALK_SKIP;
	if (json_array_size(l->out) >= MAX_LIST) {
		l->truncated = true;
		errno = 0;
		return -1;
	}
	_cleanup_free_ char *p = moat_strdupf("%s/%s", strcmp(l->dir, "/") ? l->dir : "",
					      en->path);
	json_t *e = entry_json(en->dirfd, en->name, en->name, p, en->st, l->meta);
	char *js = e ? json_dumps(e, JSON_COMPACT) : NULL;
	l->bytes += (js ? strlen(js) : 0) + 1;
	free(js);
	if (l->bytes > LIST_JSON_BUDGET) {
		json_decref(e);
		l->truncated = true;
		errno = 0;
		return -1;
	}
	json_array_append_new(l->out, e);
	if (en->depth >= l->depth || under(p, "/proc") || under(p, "/sys") || under(p, "/dev") ||
	    kernel_dir(en))
		return MOAT_WALK_SKIP;
	return 0;
}

/* Entries down to depth; what cannot be read (an unreadable directory)
 * is left out and said so in truncated. */
static void list_dir(const char *dir, int dfd, size_t depth, json_t *out, bool *truncated,
		     bool meta)
{
	struct lister l = {.dir = dir, .meta = meta, .depth = depth, .out = out};
	struct moat_walk_opt o = {.flags = MOAT_WALK_KEEP_GOING | MOAT_WALK_CROSS_MOUNTS,
				  .fn = list_one, .arg = &l};
	if (moat_walk(dfd, &o, NULL) < 0)
		l.truncated = true;
	*truncated = l.truncated;
}

void fs_list(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	json_int_t depth = json_integer_value(json_object_get(req, "depth"));
	if (depth <= 0)
		depth = 1;
	if (depth > 64)
		depth = 64;
	struct fsr w;
	if (!walk(r, path, FSR_FOLLOW, &w))
		return;
	int fd = openat(w.dir, w.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int err = errno;
	fsr_done(&w);
	if (fd < 0) {
		if (err == ENOTDIR)
			agent_fail(r, "invalid_request", "%s: not a directory", path);
		else
			path_fail(r, path, err);
		return;
	}
	if (!plain_fs(fd)) {
		close(fd);
		agent_fail(r, "invalid_path", "%s: outside the sandbox's files", path);
		return;
	}
	json_t *a = json_array();
	bool truncated = false;
	list_dir(path, fd, (size_t)depth, a, &truncated,
		 json_is_true(json_object_get(req, "metadata")));
	close(fd);
	agent_reply(r, json_pack("{s:o,s:b}", "entries", a, "truncated", truncated), NULL, 0);
}

/* ---- apply_patch ------------------------------------------------------ */

/* A rename over a protected (read-only bound) file would fail with EBUSY
 * half-way through a commit: find it while staging. */
static bool writable_or_missing(const struct fsr *at)
{
	struct stat st;
	if (fstatat(at->dir, at->name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT && !fsr_readonly(at->dir);
	if (is_mask(&st))
		return false;
	int fd = openat(at->dir, at->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	bool ok = fd >= 0 && !fsr_readonly(fd) &&
		  (S_ISLNK(st.st_mode) || faccessat(at->dir, at->name, W_OK, 0) == 0);
	if (fd >= 0)
		close(fd);
	return ok;
}

struct change {
	char path[PATH_MAX]; /* file written (the target, after a move) */
	char from[PATH_MAX]; /* file removed ("" if none) */
	struct fsr at;       /* where path is */
	struct fsr fromat;   /* where from is */
	char tmp[NAME_MAX + 1]; /* staged content, in at.dir ("" if none) */
	const char *op;
};

/* c's file becomes the one it removes (a delete, or a move's source):
 * from and fromat take over path and at. */
static void change_from(struct change *c, const char *op)
{
	c->op = op;
	snprintf(c->from, sizeof c->from, "%s", c->path);
	c->fromat = c->at;
	c->at.dir = -1;
}

static bool patch_path(const struct agent_req *r, const char *p, char *out, size_t cap)
{
	json_t *req = json_pack("{s:s}", "path", p);
	bool ok = resolve(r, req, "path", out, cap);
	json_decref(req);
	return ok;
}

/* Where a patch's path is (its leaf not followed); answers the error. */
static bool patch_walk(const struct agent_req *r, const char *shown, const char *path,
		       int flags, struct fsr *out)
{
	if (fsr_walk(FSR_ROOT, path, flags, out) == 0)
		return true;
	if (errno == EXDEV || errno == ELOOP)
		path_fail(r, path, errno);
	else
		agent_fail(r, "patch_failed", "%s: %s", shown, strerror(errno));
	return false;
}

/* Open a patch's file for reading, through links (none magic). */
static int patch_open(const char *path)
{
	struct fsr w;
	if (fsr_walk(FSR_ROOT, path, FSR_FOLLOW, &w) < 0)
		return -1;
	int fd = openat(w.dir, w.name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
	int err = errno;
	fsr_done(&w);
	errno = err;
	return fd;
}

static void changes_free(struct change *ch, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		fsr_done(&ch[i].at);
		fsr_done(&ch[i].fromat);
	}
	free(ch);
}

void fs_patch(const struct agent_req *r, json_t *req, const void *data, size_t len)
{
	struct moat_err e = {0};
	struct moat_patch pt = {0};
	if (moat_patch_parse(data, len, &pt, &e) < 0) {
		agent_fail(r, "invalid_request", "patch: %s", e.msg);
		return;
	}
	size_t nch = pt.n ? pt.n : 1;
	struct change *ch = calloc(nch, sizeof *ch);
	if (!ch) {
		moat_patch_free(&pt);
		agent_fail(r, "internal", "out of memory");
		return;
	}
	for (size_t i = 0; i < nch; i++)
		ch[i].at.dir = ch[i].fromat.dir = -1;
	size_t staged = 0;
	bool failed = false;
	agent_hold(r, true); /* a refusal goes out once its staged files are gone */
	/* 1. compute every new content and stage it next to its target;
	 * nothing visible changes before all of them are ready */
	for (size_t i = 0; i < pt.n && !failed; i++) {
		const struct moat_patch_file *f = &pt.files[i];
		struct change *c = &ch[i];
		if (!patch_path(r, f->path, c->path, sizeof c->path) ||
		    !patch_walk(r, f->path, c->path, f->kind == MOAT_PATCH_ADD ? FSR_MKDIRS : 0,
				&c->at)) {
			failed = true;
			break;
		}
		if (!writable_or_missing(&c->at)) {
			agent_fail(r, "patch_failed", "%s: protected by the sandbox policy", f->path);
			failed = true;
			break;
		}
		struct fsr dst = {.dir = -1};
		if (f->move_to) {
			char dpath[PATH_MAX];
			bool ok = patch_path(r, f->move_to, dpath, sizeof dpath) &&
				  patch_walk(r, f->move_to, dpath, FSR_MKDIRS, &dst);
			if (ok && !writable_or_missing(&dst)) {
				agent_fail(r, "patch_failed", "%s: protected by the sandbox policy",
					   f->move_to);
				ok = false;
			}
			fsr_done(&dst);
			if (!ok) {
				failed = true;
				break;
			}
		}
		if (f->kind == MOAT_PATCH_ADD) {
			struct stat ex;
			c->op = "add";
			/* a diff's new file (git apply's rule): not over another */
			if (f->exact && fstatat(c->at.dir, c->at.name, &ex, AT_SYMLINK_NOFOLLOW) == 0) {
				agent_fail(r, "patch_failed", "%s: already exists (the diff creates it)",
					   f->path);
				failed = true;
				break;
			}
			if (write_file(c->at.dir, c->at.name, f->content, f->content_len,
				       f->mode ? f->mode : 0644, c->tmp, sizeof c->tmp) < 0) {
				agent_fail(r, "patch_failed", "%s: %s", f->path, strerror(errno));
				c->tmp[0] = '\0';
				failed = true;
			}
			staged++;
			continue;
		}
		struct stat st;
		int fd = patch_open(c->path);
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !plain_fs(fd)) {
			int err = errno;
			if (fd < 0 && (err == EXDEV || err == ELOOP))
				path_fail(r, c->path, err);
			else
				agent_fail(r, "patch_failed", "%s: %s", f->path,
					   fd < 0 ? strerror(err) : "not a regular file");
			if (fd >= 0)
				close(fd);
			failed = true;
			break;
		}
		if (f->kind == MOAT_PATCH_DELETE && !f->exact) {
			close(fd);
			change_from(c, "delete");
			staged++;
			continue;
		}
		char *old;
		size_t oldlen;
		if (st.st_size > MAX_READ || read_all(fd, (size_t)st.st_size, &old, &oldlen) < 0) {
			close(fd);
			agent_fail(r, "patch_failed", "%s: too large", f->path);
			failed = true;
			break;
		}
		close(fd);
		char *neu = NULL;
		size_t neulen = 0;
		int rc = moat_patch_apply(f, old, oldlen, &neu, &neulen, &e);
		free(old);
		if (rc < 0) {
			agent_fail(r, "patch_failed", "%s", e.msg);
			failed = true;
			break;
		}
		if (f->kind == MOAT_PATCH_DELETE) { /* a diff's: it removed every line */
			free(neu);
			if (neulen) {
				agent_fail(r, "patch_failed",
					   "%s: the diff deletes it but does not remove all of its lines",
					   f->path);
				failed = true;
				break;
			}
			change_from(c, "delete");
			staged++;
			continue;
		}
		c->op = "update";
		if (f->move_to) {
			change_from(c, "move");
			if (!patch_path(r, f->move_to, c->path, sizeof c->path) ||
			    !patch_walk(r, f->move_to, c->path, FSR_MKDIRS, &c->at)) {
				free(neu);
				failed = true;
				break;
			}
			/* a diff's rename (git apply's rule, as for a new file):
			 * not over another file */
			struct stat ex;
			if (f->exact &&
			    fstatat(c->at.dir, c->at.name, &ex, AT_SYMLINK_NOFOLLOW) == 0) {
				agent_fail(r, "patch_failed",
					   "%s: already exists (the diff renames %s to it)",
					   f->move_to, f->path);
				free(neu);
				failed = true;
				break;
			}
		}
		rc = write_file(c->at.dir, c->at.name, neu, neulen,
				f->mode ? f->mode : st.st_mode & 0777, c->tmp, sizeof c->tmp);
		/* a diff's mode change (write_file keeps a file's own mode) */
		if (rc == 0 && f->mode && fchmodat(c->at.dir, c->tmp, f->mode, 0) < 0)
			rc = -1;
		free(neu);
		staged++;
		if (rc < 0) {
			agent_fail(r, "patch_failed", "%s: %s", f->move_to ? f->move_to : f->path,
				   strerror(errno));
			c->tmp[0] = '\0';
			failed = true;
		}
	}
	if (failed) {
		for (size_t i = 0; i < staged; i++)
			if (ch[i].tmp[0])
				unlinkat(ch[i].at.dir, ch[i].tmp, 0);
		changes_free(ch, nch);
		moat_patch_free(&pt);
		agent_hold(r, false);
		return;
	}
	agent_hold(r, false);
	/* 2. commit: renames within one directory, then removals */
	json_t *files = json_array();
	for (size_t i = 0; i < pt.n; i++) {
		struct change *c = &ch[i];
		if (c->tmp[0] && renameat(c->at.dir, c->tmp, c->at.dir, c->at.name) < 0)
			unlinkat(c->at.dir, c->tmp, 0);
		/* a delete, or the source of a move */
		if (c->from[0] && (!c->tmp[0] || strcmp(c->from, c->path) != 0))
			unlinkat(c->fromat.dir, c->fromat.name, 0);
		json_array_append_new(files, json_pack("{s:s,s:s}", "path",
						       c->from[0] && !c->tmp[0] ? c->from : c->path,
						       "op", c->op));
	}
	changes_free(ch, nch);
	moat_patch_free(&pt);
	agent_reply(r, json_pack("{s:o}", "files", files), NULL, 0);
}

/* ---- trees in and out (entry streams) ---------------------------------- */

struct packer {
	struct moat_buf *b;
	uint64_t total;
	struct moat_err *e;
};

/* Every entry goes in, or the whole pack fails: no half tree. */
static int pack_one(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct packer *k = arg;
	const struct stat *st = en->st;
	if (ev != MOAT_WALK_ENTRY || is_mask(st) || kernel_dir(en))
		return MOAT_WALK_SKIP;
	char shown[MOAT_SHOWN_CAP];
	if (en->path_len > MOAT_ENTRY_PATH_MAX)
		return moat_err_set(k->e, MOAT_E_USAGE, ENAMETOOLONG,
				    "%s: a path longer than %u bytes",
				    moat_show(shown, en->path, en->path_len), MOAT_ENTRY_PATH_MAX);
	struct moat_entry en2 = {.mode = st->st_mode & 0777, .mtime = st->st_mtime,
				 .path = en->path, .path_len = en->path_len};
	_cleanup_free_ char *content = NULL;
	char target[PATH_MAX];
	if (S_ISDIR(st->st_mode)) {
		en2.type = 'd';
	} else if (S_ISLNK(st->st_mode)) {
		ssize_t n = readlinkat(en->dirfd, en->name, target, sizeof target - 1);
		if (n <= 0)
			return moat_err_set(k->e, MOAT_E_SYSTEM, errno, "%s: readlink",
					    moat_show(shown, en->path, en->path_len));
		en2.type = 'l';
		en2.data = target;
		en2.size = (uint64_t)n;
	} else if (S_ISREG(st->st_mode)) {
		k->total += (uint64_t)st->st_size;
		if (k->total > MAX_READ)
			return moat_err_set(k->e, MOAT_E_USAGE, EFBIG, "the tree is over %u MiB",
					    MAX_READ >> 20);
		_cleanup_close_ int fd = openat(en->dirfd, en->name, O_RDONLY | O_CLOEXEC |
						O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
		size_t got = 0;
		if (fd < 0 && errno == EACCES)
			return 0; /* made unreadable (chmod 000): the sandbox's choice */
		if (fd >= 0 && !plain_fs(fd))
			return 0;
		if (fd < 0 || read_all(fd, (size_t)st->st_size, &content, &got) < 0)
			return moat_err_set(k->e, MOAT_E_SYSTEM, errno, "%s: %s",
					    moat_show(shown, en->path, en->path_len),
					    strerror(errno));
		en2.type = 'f';
		en2.data = content;
		en2.size = got;
	} else {
		return 0; /* sockets, fifos, devices stay out */
	}
	return moat_entry_put(k->b, &en2, k->e) < 0 ? -1 : 0;
}

/* Pack the directory dfd (taken over). */
static int pack_dir(int dfd, struct moat_buf *b, struct moat_err *e)
{
	_cleanup_close_ int fd = dfd;
	struct packer k = {.b = b, .e = e};
	struct moat_walk_opt o = {.flags = MOAT_WALK_CROSS_MOUNTS, .fn = pack_one, .arg = &k};
	return moat_walk(fd, &o, e);
}

void fs_pack(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	struct fsr w;
	if (!walk(r, path, FSR_FOLLOW, &w))
		return;
	int fd = openat(w.dir, w.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int err = errno;
	fsr_done(&w);
	if (fd < 0) {
		path_fail(r, path, err);
		return;
	}
	if (!plain_fs(fd)) {
		close(fd);
		path_fail(r, path, EXDEV);
		return;
	}
	struct moat_buf b = {0};
	struct moat_err e = {0};
	if (pack_dir(fd, &b, &e) < 0) {
		agent_fail(r, e.errnum == EFBIG ? "too_large" : agent_errno_code(e.errnum), "%s",
			   e.msg);
		moat_buf_free(&b);
		return;
	}
	agent_reply(r, json_object(), b.p, b.len);
	moat_buf_free(&b);
}

/* Unpack into the directory root: every entry is reached from root one
 * component at a time and no symlink is followed on the way (a link the
 * stream made, or one swapped in meanwhile, ends the unpack). */
static int unpack_into(int root, const void *data, size_t len, struct moat_err *e)
{
	size_t off = 0;
	struct moat_entry en;
	int rc;
	while ((rc = moat_entry_next(data, len, &off, &en, e)) == 1) {
		char p[PATH_MAX];
		snprintf(p, sizeof p, "%.*s", (int)en.path_len, en.path);
		struct fsr w;
		if (fsr_walk(root, p, FSR_MKDIRS | FSR_NOLINKS, &w) < 0)
			return moat_err_set(e, MOAT_E_USAGE, errno, "%s: %s", p,
					    errno == ELOOP || errno == EXDEV ? "below a symlink"
									      : strerror(errno));
		int ok = 0;
		if (en.type == 'd') {
			if (mkdirat(w.dir, w.name, en.mode | 0700) < 0 && errno != EEXIST)
				ok = -1;
		} else if (en.type == 'l') {
			char t[PATH_MAX];
			snprintf(t, sizeof t, "%.*s", (int)en.size, (const char *)en.data);
			unlinkat(w.dir, w.name, 0);
			if (symlinkat(t, w.dir, w.name) < 0)
				ok = -1;
		} else {
			struct stat st;
			if (fstatat(w.dir, w.name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    !S_ISREG(st.st_mode) && unlinkat(w.dir, w.name, 0) < 0)
				ok = -1;
			else if (write_file(w.dir, w.name, en.data, en.size, en.mode, NULL, 0) < 0)
				ok = -1;
		}
		int err = errno;
		fsr_done(&w);
		if (ok < 0)
			return moat_err_set(e, MOAT_E_USAGE, err, "%s", p);
	}
	return rc;
}

/* name (in dir) is a mount point: a pinned or protected directory. */
static bool mount_point(int dir, const char *name)
{
	struct statx a, b;
	if (statx(dir, "", AT_EMPTY_PATH, STATX_MNT_ID, &a) < 0 ||
	    statx(dir, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_MNT_ID, &b) < 0)
		return false; /* what is not there can be created */
	if (!(a.stx_mask & b.stx_mask & STATX_MNT_ID))
		return a.stx_dev_major != b.stx_dev_major || a.stx_dev_minor != b.stx_dev_minor;
	return a.stx_mnt_id != b.stx_mnt_id;
}

/* Would writing the entry rel below root meet a protected name (a
 * read-only mount or a placeholder, the engine's write protection: the
 * mandatory names, nested repositories' ones, deny-write paths)? With
 * replace, a top-level name that is a mount point cannot be swapped either.
 * The offending prefix of rel goes to what. */
static bool entry_protected(int root, const char *rel, bool replace, char *what, size_t cap)
{
	int cur = fcntl(root, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return true;
	bool bad = fsr_readonly(cur);
	snprintf(what, cap, "%s", bad ? "." : "");
	const char *s = rel;
	for (int i = 0; !bad && *s; i++) {
		const char *slash = strchrnul(s, '/');
		char comp[NAME_MAX + 1];
		snprintf(comp, sizeof comp, "%.*s", (int)(slash - s), s);
		snprintf(what, cap, "%.*s", (int)(slash - rel), rel);
		int fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			break; /* missing: made in a directory checked writable */
		struct stat st;
		bad = fstat(fd, &st) < 0 || is_mask(&st) || fsr_readonly(fd) ||
		      (replace && i == 0 && mount_point(cur, comp));
		if (bad || !S_ISDIR(st.st_mode)) {
			close(fd);
			break;
		}
		close(cur);
		cur = fd;
		s = *slash ? slash + 1 : slash;
	}
	close(cur);
	return bad;
}

/* Refuse the whole stream, before anything is applied, when one of its
 * entries would land on a protected name (answered as forbidden). */
static bool check_protected(const struct agent_req *r, int root, const void *data, size_t len,
			    bool replace)
{
	size_t off = 0;
	struct moat_entry en;
	struct moat_err e = {0};
	while (moat_entry_next(data, len, &off, &en, &e) == 1) {
		char rel[PATH_MAX], what[PATH_MAX];
		snprintf(rel, sizeof rel, "%.*s", (int)en.path_len, en.path);
		if (entry_protected(root, rel, replace, what, sizeof what)) {
			agent_fail(r, "forbidden",
				   "%s: protected by the sandbox policy (%s is read-only or a "
				   "protected mount); nothing was applied",
				   rel, what);
			return false;
		}
	}
	return true;
}

/* A fresh directory in root; its name in name, an fd to it returned. */
static int make_tmpdir(int root, const char *prefix, char *name, size_t cap)
{
	for (int i = 0; i < 16; i++) {
		if (tmp_name(name, cap, prefix, "") < 0)
			return -1;
		if (mkdirat(root, name, 0700) == 0)
			return openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (errno != EEXIST)
			return -1;
	}
	return -1;
}

void fs_unpack(const struct agent_req *r, json_t *req, const void *data, size_t len)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	struct moat_err e = {0};
	/* validate the whole stream before the first write */
	size_t off = 0;
	struct moat_entry en;
	int rc;
	while ((rc = moat_entry_next(data, len, &off, &en, &e)) == 1)
		;
	if (rc < 0) {
		agent_fail(r, "invalid_request", "%s", e.msg);
		return;
	}
	bool replace = json_is_true(json_object_get(req, "replace"));
	int root;
	if (make_dirs(r, path, &root) < 0)
		return;
	if (!check_protected(r, root, data, len, replace)) {
		close(root);
		return;
	}
	if (!replace) {
		if (unpack_into(root, data, len, &e) < 0)
			agent_fail(r, agent_errno_code(e.errnum ? e.errnum : errno), "%s",
				   e.msg[0] ? e.msg : strerror(errno));
		else
			agent_reply(r, json_object(), NULL, 0);
		close(root);
		return;
	}
	/* replace: unpack beside, then swap the contents; the old contents
	 * are removed only once the new ones are in place */
	char stage[NAME_MAX + 1], trash[NAME_MAX + 1];
	struct stat rst;
	int sfd = fstat(root, &rst) < 0 ? -1 : make_tmpdir(root, "moat-stage-", stage, sizeof stage);
	if (sfd < 0) {
		agent_fail(r, agent_errno_code(errno), "%s: %s", path, strerror(errno));
		close(root);
		return;
	}
	int tfd = -1;
	if (unpack_into(sfd, data, len, &e) < 0 ||
	    (tfd = make_tmpdir(root, "moat-trash-", trash, sizeof trash)) < 0) {
		agent_fail(r, agent_errno_code(e.errnum ? e.errnum : errno), "%s",
			   e.msg[0] ? e.msg : strerror(errno));
		close(sfd);
		remove_tree(root, stage);
		close(root);
		return;
	}
	int lfd = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d && lfd >= 0)
		close(lfd);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, stage) || !strcmp(de->d_name, trash))
			continue;
		struct stat st;
		if (fstatat(root, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    st.st_dev == rst.st_dev)
			renameat(root, de->d_name, tfd, de->d_name); /* mount points stay */
	}
	if (d)
		closedir(d);
	lfd = openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d && lfd >= 0)
		close(lfd);
	json_t *skipped = json_array();
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (renameat(sfd, de->d_name, root, de->d_name) < 0)
			json_array_append_new(skipped, json_string(de->d_name));
	}
	if (d)
		closedir(d);
	close(sfd);
	close(tfd);
	remove_tree(root, stage);
	remove_tree(root, trash);
	close(root);
	agent_reply(r, json_pack("{s:o}", "skipped", skipped), NULL, 0);
}
