/* File operations of the API, done by the agent inside the sandbox: the
 * sandbox's mount view, Landlock and seccomp confine them exactly as they
 * confine the sandbox's own processes, so no path, symlink or ".." can
 * reach what the sandbox cannot. On top of that: /proc, /sys and /dev are
 * refused (the agent's own /proc/self would be a way to its memory), and
 * only regular files are read or written. See agent.h. */
#define _GNU_SOURCE
#include "agent.h"

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
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define WORKSPACE "/workspace"
#define MAX_READ (256u << 20)
#define MAX_LIST 100000

static dev_t mask_dev;
static bool have_mask_dev;

void fs_init(void)
{
	/* /proc/timer_list is always covered by the engine's empty mask
	 * file: the device of masks and write-protection placeholders. */
	struct stat st;
	if (stat("/proc/timer_list", &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
		struct statfs sf;
		if (statfs("/proc/timer_list", &sf) == 0 && sf.f_type != PROC_SUPER_MAGIC) {
			mask_dev = st.st_dev;
			have_mask_dev = true;
		}
	}
}

/* Masks and placeholders are the engine's empty, mode-000 file and
 * directory; the sandbox's /tmp and home live on the same filesystem, so
 * the device alone does not tell. */
static bool is_mask(const struct stat *st)
{
	if (!have_mask_dev || st->st_dev != mask_dev || (st->st_mode & 07777) != 0)
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

/* After open: still not a kernel filesystem (a symlink may point there). */
static bool plain_fs(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return false;
	return sf.f_type != PROC_SUPER_MAGIC && sf.f_type != SYSFS_MAGIC &&
	       sf.f_type != DEVPTS_SUPER_MAGIC;
}

static const char *type_name(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

static json_t *entry_json(const char *name, const char *path, const struct stat *st)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:i,s:I}", "name", name, "path", path, "type",
			 type_name(st->st_mode), "size", (json_int_t)st->st_size, "mode",
			 (int)(st->st_mode & 07777), "mtime", (json_int_t)st->st_mtime);
}

/* Open a regular file for reading; answers the error itself. */
static int open_regular(const struct agent_req *r, const char *path, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		agent_fail(r, agent_errno_code(errno), "%s: %s", path, strerror(errno));
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

/* mkdir -p of the directory part of path (or all of it when leaf). */
static int mkdirs(char *path, bool leaf)
{
	for (char *s = path + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		int rc = mkdir(path, 0755);
		int err = errno;
		*s = '/';
		if (rc < 0 && err != EEXIST) {
			errno = err;
			return -1;
		}
	}
	if (leaf && mkdir(path, 0755) < 0 && errno != EEXIST)
		return -1;
	if (leaf) {
		struct stat st;
		if (stat(path, &st) < 0)
			return -1;
		if (!S_ISDIR(st.st_mode)) {
			errno = ENOTDIR;
			return -1;
		}
	}
	return 0;
}

/* Write data to path atomically (temp file + rename), keeping an existing
 * file's mode. The temp file is left for the caller to rename when tmp is
 * given (all-or-nothing patches). */
static int write_file(const char *path, const void *data, size_t len, mode_t mode,
		      char *tmp, size_t tmpcap)
{
	char local[PATH_MAX];
	char *t = tmp ? tmp : local;
	size_t cap = tmp ? tmpcap : sizeof local;
	struct stat st;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			errno = EISDIR;
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			errno = EINVAL;
			return -1;
		}
		mode = st.st_mode & 0777;
	}
	const char *slash = strrchr(path, '/');
	if (snprintf(t, cap, "%.*s/.%s.moat-XXXXXX", (int)(slash - path), path, slash + 1) >=
	    (int)cap) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = mkostemp(t, O_CLOEXEC);
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
			unlink(t);
			errno = err;
			return -1;
		}
		p += n;
		left -= (size_t)n;
	}
	if (fchmod(fd, mode) < 0 || close(fd) < 0) {
		int err = errno;
		unlink(t);
		errno = err;
		return -1;
	}
	if (!tmp && rename(t, path) < 0) {
		int err = errno;
		unlink(t);
		errno = err;
		return -1;
	}
	return 0;
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
	if (mkdirs(path, false) < 0 || write_file(path, data, len, 0644, NULL, 0) < 0) {
		agent_fail(r, agent_errno_code(errno), "%s: %s", path, strerror(errno));
		return;
	}
	agent_reply(r, json_object(), NULL, 0);
}

void fs_mkdir(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	if (mkdirs(path, true) < 0) {
		agent_fail(r, errno == ENOTDIR ? "conflict" : agent_errno_code(errno), "%s: %s",
			   path, strerror(errno));
		return;
	}
	agent_reply(r, json_object(), NULL, 0);
}

/* rm -r, not following symlinks, staying on one filesystem (a mount
 * point inside is not emptied: it would fail with EBUSY); any depth
 * (src/base/walk.c). */
static int remove_tree(const char *path)
{
	return moat_walk_rm(AT_FDCWD, path, MOAT_WALK_DEV_ONLY);
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
	struct stat st;
	if (lstat(path, &st) < 0) {
		agent_fail(r, agent_errno_code(errno), "%s: %s", path, strerror(errno));
		return;
	}
	if (is_mask(&st)) {
		agent_fail(r, "forbidden", "%s is protected by the sandbox policy", path);
		return;
	}
	int rc;
	if (!S_ISDIR(st.st_mode))
		rc = unlink(path);
	else if (!recursive)
		rc = rmdir(path);
	else
		rc = remove_tree(path);
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
	struct stat st;
	if (lstat(path, &st) < 0 || is_mask(&st)) {
		agent_fail(r, "not_found", "%s: %s", path,
			   is_mask(&st) ? "No such file or directory" : strerror(errno));
		return;
	}
	const char *base = strrchr(path, '/') + 1;
	json_t *o = entry_json(*base ? base : "/", path, &st);
	if (S_ISLNK(st.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlink(path, t, sizeof t - 1);
		if (n >= 0) {
			t[n] = '\0';
			json_object_set_new(o, "target", json_string(t));
		}
	}
	agent_reply(r, json_pack("{s:o}", "entry", o), NULL, 0);
}

struct lister {
	const char *dir;
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
	json_array_append_new(l->out, entry_json(en->name, p, en->st));
	if (en->depth >= l->depth || under(p, "/proc") || under(p, "/sys") || under(p, "/dev"))
		return MOAT_WALK_SKIP;
	return 0;
}

/* Entries down to depth; what cannot be read (an unreadable directory)
 * is left out and said so in truncated. */
static void list_dir(const char *dir, int dfd, size_t depth, json_t *out, bool *truncated)
{
	struct lister l = {.dir = dir, .depth = depth, .out = out};
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
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		agent_fail(r, errno == ENOTDIR ? "invalid_request" : agent_errno_code(errno),
			   "%s: %s", path, errno == ENOTDIR ? "not a directory" : strerror(errno));
		return;
	}
	if (!plain_fs(fd)) {
		close(fd);
		agent_fail(r, "invalid_path", "%s: outside the sandbox's files", path);
		return;
	}
	json_t *a = json_array();
	bool truncated = false;
	list_dir(path, fd, (size_t)depth, a, &truncated);
	close(fd);
	agent_reply(r, json_pack("{s:o,s:b}", "entries", a, "truncated", truncated), NULL, 0);
}

/* ---- apply_patch ------------------------------------------------------ */

/* A rename over a protected (read-only bound) file would fail with EBUSY
 * half-way through a commit: find it while staging. */
static bool writable_or_missing(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return errno == ENOENT;
	return !is_mask(&st) && access(path, W_OK) == 0;
}

struct change {
	char path[PATH_MAX]; /* file written (the target, after a move) */
	char from[PATH_MAX]; /* file removed ("" if none) */
	char tmp[PATH_MAX];  /* staged content ("" if none) */
	const char *op;
};

static bool patch_path(const struct agent_req *r, const char *p, char *out, size_t cap)
{
	json_t *req = json_pack("{s:s}", "path", p);
	bool ok = resolve(r, req, "path", out, cap);
	json_decref(req);
	return ok;
}

void fs_patch(const struct agent_req *r, json_t *req, const void *data, size_t len)
{
	struct moat_err e = {0};
	struct moat_patch pt = {0};
	if (moat_patch_parse(data, len, &pt, &e) < 0) {
		agent_fail(r, "invalid_request", "patch: %s", e.msg);
		return;
	}
	struct change *ch = calloc(pt.n ? pt.n : 1, sizeof *ch);
	if (!ch) {
		moat_patch_free(&pt);
		agent_fail(r, "internal", "out of memory");
		return;
	}
	size_t staged = 0;
	bool failed = false;
	/* 1. compute every new content and stage it next to its target;
	 * nothing visible changes before all of them are ready */
	for (size_t i = 0; i < pt.n && !failed; i++) {
		const struct moat_patch_file *f = &pt.files[i];
		struct change *c = &ch[i];
		if (!patch_path(r, f->path, c->path, sizeof c->path)) {
			failed = true;
			break;
		}
		if (!writable_or_missing(c->path)) {
			agent_fail(r, "patch_failed", "%s: protected by the sandbox policy", f->path);
			failed = true;
			break;
		}
		if (f->move_to) {
			char dst[PATH_MAX];
			if (!patch_path(r, f->move_to, dst, sizeof dst)) {
				failed = true;
				break;
			}
			if (!writable_or_missing(dst)) {
				agent_fail(r, "patch_failed", "%s: protected by the sandbox policy",
					   f->move_to);
				failed = true;
				break;
			}
		}
		if (f->kind == MOAT_PATCH_ADD) {
			c->op = "add";
			char dirpart[PATH_MAX];
			snprintf(dirpart, sizeof dirpart, "%s", c->path);
			if (mkdirs(dirpart, false) < 0 ||
			    write_file(c->path, f->content, f->content_len, 0644, c->tmp,
				       sizeof c->tmp) < 0) {
				agent_fail(r, "patch_failed", "%s: %s", f->path, strerror(errno));
				c->tmp[0] = '\0';
				failed = true;
			}
			staged++;
			continue;
		}
		struct stat st;
		int fd = open(c->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !plain_fs(fd)) {
			agent_fail(r, "patch_failed", "%s: %s", f->path,
				   fd < 0 ? strerror(errno) : "not a regular file");
			if (fd >= 0)
				close(fd);
			failed = true;
			break;
		}
		if (f->kind == MOAT_PATCH_DELETE) {
			close(fd);
			c->op = "delete";
			snprintf(c->from, sizeof c->from, "%s", c->path);
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
		c->op = "update";
		if (f->move_to) {
			c->op = "move";
			snprintf(c->from, sizeof c->from, "%s", c->path);
			if (!patch_path(r, f->move_to, c->path, sizeof c->path)) {
				free(neu);
				failed = true;
				break;
			}
			char dirpart[PATH_MAX];
			snprintf(dirpart, sizeof dirpart, "%s", c->path);
			if (mkdirs(dirpart, false) < 0) {
				agent_fail(r, "patch_failed", "%s: %s", f->move_to, strerror(errno));
				free(neu);
				failed = true;
				break;
			}
		}
		rc = write_file(c->path, neu, neulen, st.st_mode & 0777, c->tmp, sizeof c->tmp);
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
				unlink(ch[i].tmp);
		free(ch);
		moat_patch_free(&pt);
		return;
	}
	/* 2. commit: renames within one directory, then removals */
	json_t *files = json_array();
	for (size_t i = 0; i < pt.n; i++) {
		if (ch[i].tmp[0] && rename(ch[i].tmp, ch[i].path) < 0)
			unlink(ch[i].tmp);
		/* a delete, or the source of a move */
		if (ch[i].from[0] && (!ch[i].tmp[0] || strcmp(ch[i].from, ch[i].path) != 0))
			unlink(ch[i].from);
		json_array_append_new(files, json_pack("{s:s,s:s}", "path",
						       ch[i].from[0] && !ch[i].tmp[0]
							       ? ch[i].from
							       : ch[i].path,
						       "op", ch[i].op));
	}
	free(ch);
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
	if (ev != MOAT_WALK_ENTRY || is_mask(st))
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

static int pack_dir(const char *dir, struct moat_buf *b, struct moat_err *e)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", dir);
	struct packer k = {.b = b, .e = e};
	struct moat_walk_opt o = {.flags = MOAT_WALK_CROSS_MOUNTS, .fn = pack_one, .arg = &k};
	return moat_walk(fd, &o, e);
}

void fs_pack(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!resolve(r, req, "path", path, sizeof path))
		return;
	struct moat_buf b = {0};
	struct moat_err e = {0};
	if (pack_dir(path, &b, &e) < 0) {
		agent_fail(r, e.errnum == EFBIG ? "too_large" : agent_errno_code(e.errnum), "%s",
			   e.msg);
		moat_buf_free(&b);
		return;
	}
	agent_reply(r, json_object(), b.p, b.len);
	moat_buf_free(&b);
}

static int unpack_into(const char *root, const void *data, size_t len, struct moat_err *e)
{
	size_t off = 0;
	struct moat_entry en;
	int rc;
	while ((rc = moat_entry_next(data, len, &off, &en, e)) == 1) {
		char p[PATH_MAX];
		if (snprintf(p, sizeof p, "%s/%.*s", root, (int)en.path_len, en.path) >=
		    (int)sizeof p)
			return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "path too long");
		if (mkdirs(p, false) < 0)
			return moat_err_set(e, MOAT_E_USAGE, errno, "%.*s", (int)en.path_len,
					    en.path);
		if (en.type == 'd') {
			if (mkdir(p, en.mode | 0700) < 0 && errno != EEXIST)
				return moat_err_set(e, MOAT_E_USAGE, errno, "%s", p);
		} else if (en.type == 'l') {
			char t[PATH_MAX];
			snprintf(t, sizeof t, "%.*s", (int)en.size, (const char *)en.data);
			unlink(p);
			if (symlink(t, p) < 0)
				return moat_err_set(e, MOAT_E_USAGE, errno, "%s", p);
		} else {
			struct stat st;
			if (lstat(p, &st) == 0 && !S_ISREG(st.st_mode) && unlink(p) < 0)
				return moat_err_set(e, MOAT_E_USAGE, errno, "%s", p);
			if (write_file(p, en.data, en.size, en.mode, NULL, 0) < 0)
				return moat_err_set(e, MOAT_E_USAGE, errno, "%s", p);
		}
	}
	return rc;
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
	if (!replace) {
		char p[PATH_MAX];
		snprintf(p, sizeof p, "%s", path);
		if (mkdirs(p, true) < 0 || unpack_into(path, data, len, &e) < 0) {
			agent_fail(r, agent_errno_code(e.errnum ? e.errnum : errno), "%s",
				   e.msg[0] ? e.msg : strerror(errno));
			return;
		}
		agent_reply(r, json_object(), NULL, 0);
		return;
	}
	/* replace: unpack beside, then swap the contents; the old contents
	 * are removed only once the new ones are in place */
	char stage[PATH_MAX], trash[PATH_MAX];
	snprintf(stage, sizeof stage, "%s/.moat-stage-XXXXXX", path);
	snprintf(trash, sizeof trash, "%s/.moat-trash-XXXXXX", path);
	if (!mkdtemp(stage)) {
		agent_fail(r, agent_errno_code(errno), "%s: %s", path, strerror(errno));
		return;
	}
	struct stat rst;
	if (stat(path, &rst) < 0 || unpack_into(stage, data, len, &e) < 0 || !mkdtemp(trash)) {
		agent_fail(r, agent_errno_code(e.errnum ? e.errnum : errno), "%s",
			   e.msg[0] ? e.msg : strerror(errno));
		remove_tree(stage);
		return;
	}
	const char *sb = strrchr(stage, '/') + 1, *tb = strrchr(trash, '/') + 1;
	DIR *d = opendir(path);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, sb) || !strcmp(de->d_name, tb))
			continue;
		char from[PATH_MAX], to[PATH_MAX];
		snprintf(from, sizeof from, "%s/%s", path, de->d_name);
		snprintf(to, sizeof to, "%s/%s", trash, de->d_name);
		struct stat st;
		if (lstat(from, &st) == 0 && st.st_dev == rst.st_dev)
			rename(from, to); /* mount points (protected names) stay */
	}
	if (d)
		closedir(d);
	d = opendir(stage);
	json_t *skipped = json_array();
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char from[PATH_MAX], to[PATH_MAX];
		snprintf(from, sizeof from, "%s/%s", stage, de->d_name);
		snprintf(to, sizeof to, "%s/%s", path, de->d_name);
		if (rename(from, to) < 0)
			json_array_append_new(skipped, json_string(de->d_name));
	}
	if (d)
		closedir(d);
	remove_tree(stage);
	remove_tree(trash);
	agent_reply(r, json_pack("{s:o}", "skipped", skipped), NULL, 0);
}
