/* Manifest -> entry stream: see manifest.h. */
#define _GNU_SOURCE
#include "manifest.h"

#include "../base/cleanup.h"
#include "../base/util.h"
#include "../base/walk.h"
#include "../proto/entries.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TOTAL (1ULL << 30)
#define MAX_ENTRIES 100000

struct mctx {
	char *const *allowed;
	struct moat_buf *out;
	uint64_t total;
	size_t entries;
	struct moat_err *e;
};

static int fail(struct mctx *c, int err, const char *where, const char *fmt, const char *arg)
{
	char msg[600];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(msg, sizeof msg, fmt, arg);
#pragma GCC diagnostic pop
	moat_err_set(c->e, MOAT_E_USAGE, 0, "%s: %s", where, msg);
	c->e->errnum = err;
	return -1;
}

static int put(struct mctx *c, const char *where, char type, const char *path, unsigned mode,
	       const void *data, uint64_t size)
{
	if (++c->entries > MAX_ENTRIES)
		return fail(c, EFBIG, where, "more than %s entries", "100000");
	c->total += size;
	if (c->total > MAX_TOTAL)
		return fail(c, EFBIG, where, "the manifest is over %s", "1 GiB");
	struct moat_entry en = {.type = type, .mode = mode & 0777, .mtime = 0, .path = path,
				.path_len = strlen(path), .data = data, .size = size};
	if (moat_entry_put(c->out, &en, c->e) < 0) {
		char m[MOAT_ERR_MSG];
		snprintf(m, sizeof m, "%s", c->e->msg);
		return fail(c, EINVAL, where, "%s", m);
	}
	return 0;
}

/* A host path, resolved, under an allowed directory; NULL after failing. */
static char *host_path(struct mctx *c, const char *where, const char *src)
{
	if (!src || src[0] != '/') {
		fail(c, EINVAL, where, "src must be an absolute host path%s", "");
		return NULL;
	}
	char *real = realpath(src, NULL);
	if (!real) {
		/* a path outside every allowed directory gets the answer of one
		 * that exists: the client (a model, through the MCP door) must
		 * not learn which host files exist */
		int err = errno;
		bool inside = false;
		for (size_t i = 0; !strstr(src, "/..") && c->allowed && c->allowed[i]; i++)
			inside = inside || moat_path_within(src, c->allowed[i]);
		if (inside)
			fail(c, EINVAL, where, "%s", strerror(err));
		else
			fail(c, EACCES, where, "%s is not under an --allow-host-path directory", src);
		return NULL;
	}
	for (size_t i = 0; c->allowed && c->allowed[i]; i++)
		if (moat_path_within(real, c->allowed[i]))
			return real;
	free(real);
	fail(c, EACCES, where, "%s is not under an --allow-host-path directory", src);
	return NULL;
}

/* path is opened below dirfd (only its last component is not followed) */
static int read_host_file(struct mctx *c, const char *where, int dirfd, const char *path,
			  char **data, size_t *len, mode_t *mode)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return fail(c, EINVAL, where, "%s: not a readable regular file", path);
	}
	if ((uint64_t)st.st_size > MAX_TOTAL) {
		close(fd);
		return fail(c, EFBIG, where, "%s is too large", path);
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	while (buf && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (!buf)
		return fail(c, EINVAL, where, "%s", "out of memory");
	*data = buf;
	*len = got;
	*mode = st.st_mode;
	return 0;
}

struct copy {
	struct mctx *c;
	const char *where, *host, *rel;
	char *rp;        /* rel + "/" + the entry's path */
	size_t cap;
};

static int copy_one(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct copy *k = arg;
	if (ev != MOAT_WALK_ENTRY)
		return 0;
	size_t rl = strlen(k->rel), need = rl + 1 + en->path_len + 1;
	if (need > MOAT_ENTRY_PATH_MAX + 1)
		return fail(k->c, EINVAL, k->where, "%s: a path inside is too long", k->host);
	if (need > k->cap) {
		char *p = realloc(k->rp, need);
		if (!p)
			return fail(k->c, ENOMEM, k->where, "%s", "out of memory");
		k->rp = p;
		k->cap = need;
	}
	snprintf(k->rp, need, "%s%s%s", k->rel, rl ? "/" : "", en->path);
	const struct stat *st = en->st;
	if (en->other_mount)
		return fail(k->c, EINVAL, k->where, "%s: a mount point inside", k->host);
	if (S_ISDIR(st->st_mode))
		return put(k->c, k->where, 'd', k->rp, st->st_mode, NULL, 0);
	if (S_ISLNK(st->st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(en->dirfd, en->name, t, sizeof t - 1);
		return n > 0 ? put(k->c, k->where, 'l', k->rp, 0777, t, (uint64_t)n) : 0;
	}
	if (!S_ISREG(st->st_mode))
		return 0; /* FIFOs, sockets, devices stay out */
	char *data = NULL;
	size_t len = 0;
	mode_t mode;
	int rc = read_host_file(k->c, k->where, en->dirfd, en->name, &data, &len, &mode);
	if (rc == 0)
		rc = put(k->c, k->where, 'f', k->rp, mode, data, len);
	free(data);
	return rc;
}

/* Copy a host directory tree (src/base/walk.c: through descriptors, no
 * symlink followed, links copied as links, no mount crossed). */
static int copy_dir(struct mctx *c, const char *where, const char *host, const char *rel)
{
	_cleanup_close_ int fd = open(host, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return fail(c, EINVAL, where, "%s: cannot open", host);
	struct copy k = {.c = c, .where = where, .host = host, .rel = rel};
	struct moat_walk_opt o = {.fn = copy_one, .arg = &k};
	struct moat_err we = {0};
	int rc = moat_walk(fd, &o, &we);
	free(k.rp);
	if (rc < 0 && we.msg[0]) /* the walk's own error (the callback's is in c->e) */
		return fail(c, EINVAL, where, "%s", we.msg);
	return rc;
}

static manifest_git_fn git_sink;
static void *git_arg;

void manifest_set_git(manifest_git_fn fn, void *arg)
{
	git_sink = fn;
	git_arg = arg;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/* Validated here; cloned by the sink (src/serve/clone.c: into the
 * workspace, in a throwaway sandbox), never by the daemon itself. */
static int git_entry(struct mctx *c, const char *where, json_t *v, const char *rel)
{
	const char *repo = json_string_value(json_object_get(v, "repo"));
	json_t *refv = json_object_get(v, "ref");
	const char *ref = json_string_value(refv);
	if (!repo || !*repo)
		return fail(c, EINVAL, where, "repo must be a URL or a host path%s", "");
	if (refv && !json_is_null(refv) && (!ref || !*ref || ref[0] == '-'))
		return fail(c, EINVAL, where, "ref must be a branch, tag or commit%s", "");
	/* no name git takes has them, and they would be quoted back raw
	 * (into a terminal, by a client that prints the error) */
	if (has_control(repo) || (ref && has_control(ref)))
		return fail(c, EINVAL, where, "%s contains a control character",
			    has_control(repo) ? "repo" : "ref");
	char *src = NULL;
	if (repo[0] == '/') {
		src = host_path(c, where, repo);
		if (!src)
			return -1;
	} else if (strncmp(repo, "https://", 8) && strncmp(repo, "http://", 7)) {
		return fail(c, EINVAL, where,
			    "repo %s: expected https://, http:// or an absolute host path", repo);
	}
	if (!git_sink) {
		free(src);
		return fail(c, EINVAL, where, "git_repo entries are not cloned here%s", "");
	}
	int rc = git_sink(git_arg, where, rel, repo, src, ref, c->e);
	free(src);
	return rc;
}

static int entries(struct mctx *c, json_t *obj, const char *prefix, const char *where);

static int one(struct mctx *c, const char *key, json_t *v, const char *prefix,
	       const char *where_parent)
{
	char where[1024], rel[PATH_MAX];
	snprintf(where, sizeof where, "%s.%s", where_parent, key);
	const char *k = key;
	if (!strncmp(k, "/workspace/", 11) && !*prefix)
		k += 11;
	while (!strncmp(k, "./", 2))
		k += 2;
	if (snprintf(rel, sizeof rel, "%s%s%s", prefix, *prefix ? "/" : "", k) >= (int)sizeof rel)
		return fail(c, EINVAL, where, "%s", "path too long");
	size_t rl = strlen(rel);
	while (rl > 1 && rel[rl - 1] == '/')
		rel[--rl] = '\0';
	if (!moat_entry_path_ok(rel, rl))
		return fail(c, EINVAL, where,
			    "\"%s\" is not a relative path inside the workspace", key);
	if (!json_is_object(v))
		return fail(c, EINVAL, where, "an entry must be an object with a \"type\"%s", "");
	const char *type = json_string_value(json_object_get(v, "type"));
	if (!type)
		return fail(c, EINVAL, where, "missing \"type\"%s", "");
	static const char *const file_keys[] = {"type", "content", "mode", NULL};
	static const char *const dir_keys[] = {"type", "children", NULL};
	static const char *const local_keys[] = {"type", "src", NULL};
	static const char *const git_keys[] = {"type", "repo", "ref", NULL};
	const char *const *keys = !strcmp(type, "file")		? file_keys
				  : !strcmp(type, "dir")	? dir_keys
				  : !strcmp(type, "git_repo")	? git_keys
				  : !strcmp(type, "local_file") || !strcmp(type, "local_dir")
					  ? local_keys
					  : NULL;
	if (!keys)
		return fail(c, EINVAL, where,
			    "unknown type \"%s\" (file, dir, local_file, local_dir, git_repo)", type);
	const char *kk;
	json_t *vv;
	json_object_foreach(v, kk, vv)
	{
		bool ok = false;
		for (size_t i = 0; keys[i] && !ok; i++)
			ok = !strcmp(kk, keys[i]);
		if (!ok)
			return fail(c, EINVAL, where, "unknown field \"%s\"", kk);
	}
	if (!strcmp(type, "file")) {
		json_t *ct = json_object_get(v, "content");
		json_t *mo = json_object_get(v, "mode");
		if (ct && !json_is_string(ct))
			return fail(c, EINVAL, where, "content must be a string%s", "");
		if (mo && (!json_is_integer(mo) || json_integer_value(mo) < 0 ||
			   json_integer_value(mo) > 0777))
			return fail(c, EINVAL, where, "mode must be an integer up to 0777%s", "");
		return put(c, where, 'f', rel, mo ? (unsigned)json_integer_value(mo) : 0644,
			   ct ? json_string_value(ct) : "", ct ? json_string_length(ct) : 0);
	}
	if (!strcmp(type, "dir")) {
		json_t *ch = json_object_get(v, "children");
		if (ch && !json_is_object(ch))
			return fail(c, EINVAL, where, "children must be an object%s", "");
		if (put(c, where, 'd', rel, 0755, NULL, 0) < 0)
			return -1;
		char w2[1100];
		snprintf(w2, sizeof w2, "%s.children", where);
		return ch ? entries(c, ch, rel, w2) : 0;
	}
	if (!strcmp(type, "git_repo"))
		return git_entry(c, where, v, rel);
	char *src = host_path(c, where, json_string_value(json_object_get(v, "src")));
	if (!src)
		return -1;
	int rc;
	struct stat st;
	if (!strcmp(type, "local_file")) {
		char *data = NULL;
		size_t len = 0;
		mode_t mode;
		rc = read_host_file(c, where, AT_FDCWD, src, &data, &len, &mode);
		if (rc == 0)
			rc = put(c, where, 'f', rel, mode, data, len);
		free(data);
	} else if (stat(src, &st) < 0 || !S_ISDIR(st.st_mode)) {
		rc = fail(c, EINVAL, where, "%s is not a directory", src);
	} else {
		rc = put(c, where, 'd', rel, st.st_mode, NULL, 0);
		if (rc == 0)
			rc = copy_dir(c, where, src, rel);
	}
	free(src);
	return rc;
}

static int entries(struct mctx *c, json_t *obj, const char *prefix, const char *where)
{
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v) if (one(c, k, v, prefix, where) < 0) return -1;
	return 0;
}

int manifest_build(json_t *m, char *const *host_paths, struct moat_buf *out, json_t *env,
		   struct moat_err *e)
{
	struct mctx c = {.allowed = host_paths, .out = out, .e = e};
	if (!json_is_object(m))
		return fail(&c, EINVAL, "manifest", "must be an object%s", "");
	const char *k;
	json_t *v;
	json_object_foreach(m, k, v) if (strcmp(k, "root") && strcmp(k, "entries") &&
					 strcmp(k, "environment")) return fail(&c, EINVAL,
									       "manifest",
									       "unknown field \"%s\"",
									       k);
	json_t *root = json_object_get(m, "root");
	if (root && !json_is_null(root) &&
	    (!json_is_string(root) || strcmp(json_string_value(root), "/workspace") != 0))
		return fail(&c, EINVAL, "manifest.root", "must be \"/workspace\"%s", "");
	json_t *envm = json_object_get(m, "environment");
	if (envm && !json_is_null(envm)) {
		if (!json_is_object(envm))
			return fail(&c, EINVAL, "manifest.environment", "must be an object%s", "");
		json_object_foreach(envm, k, v)
		{
			if (!json_is_string(v) || !*k || strchr(k, '='))
				return fail(&c, EINVAL, "manifest.environment",
					    "\"%s\" must be NAME: \"string\"", k);
			json_object_set(env, k, v);
		}
	}
	json_t *en = json_object_get(m, "entries");
	if (en && !json_is_null(en)) {
		if (!json_is_object(en))
			return fail(&c, EINVAL, "manifest.entries", "must be an object%s", "");
		if (entries(&c, en, "", "manifest.entries") < 0)
			return -1;
	}
	return 0;
}

/* As deep as manifest_build goes (no depth limit of its own: a git_repo
 * below one would be cloned on the event loop); bounded by jansson's
 * parser depth (2048). */
static bool has_git(json_t *entries)
{
	const char *k;
	json_t *v;
	if (!json_is_object(entries))
		return false;
	json_object_foreach(entries, k, v)
	{
		const char *t = json_string_value(json_object_get(v, "type"));
		if ((t && !strcmp(t, "git_repo")) || has_git(json_object_get(v, "children")))
			return true;
	}
	return false;
}

bool manifest_is_slow(json_t *m)
{
	return has_git(json_object_get(m, "entries"));
}
