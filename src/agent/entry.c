/* Entries of the file API (list, stat, write, mkdir, rename, watch): one
 * JSON shape, with owner and group names from the sandbox's own
 * /etc/passwd and /etc/group (not the host's: the agent sees the
 * sandbox's view). See agent.h. */
#define _GNU_SOURCE
#include "agent.h"
#include "idnames.h"
#include "resolve.h"

#include "../base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define NAMES_FILE_MAX (1u << 20) /* bytes of /etc/passwd read at most */
#define NAMES_MAX 4096            /* names kept per file */
#define META_LIST_MAX 65536       /* bytes of an xattr name list */
#define META_VALUE_MAX 4096

/* One of /etc/passwd, /etc/group: what it said when last read. */
struct names {
	const char *file;
	struct idname *v;
	size_t n;
	bool loaded;
	struct timespec mtime;
	ino_t ino;
	off_t size;
	unsigned gen; /* the request it was checked for */
	size_t last;  /* index of the last name found */
};

static struct names users = {.file = "/etc/passwd"}, groups = {.file = "/etc/group"};
static unsigned request_gen = 1;

void entry_new_request(void)
{
	request_gen++;
}

/* Read the file through the resolver (it is the sandbox's: a link to
 * /proc/self/... must not make the agent show its own memory). */
static char *read_names_file(const char *path, struct stat *st, size_t *len)
{
	struct fsr w;
	if (fsr_walk(FSR_ROOT, path, FSR_FOLLOW, &w) < 0)
		return NULL;
	int fd = openat(w.dir, w.name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	fsr_done(&w);
	if (fd < 0)
		return NULL;
	char *buf = NULL;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || fsr_refused(fd) ||
	    !(buf = malloc(NAMES_FILE_MAX + 1))) {
		close(fd);
		return NULL;
	}
	size_t got = 0;
	while (got < NAMES_FILE_MAX) {
		ssize_t n = read(fd, buf + got, NAMES_FILE_MAX - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*len = got;
	return buf;
}

static void parse_names(struct names *t, const char *buf, size_t len)
{
	free(t->v);
	t->n = t->last = 0;
	t->v = calloc(NAMES_MAX, sizeof *t->v);
	if (t->v)
		t->n = idnames_parse(buf, len, t->v, NAMES_MAX);
}

/* Re-read once per request at most, and only when the file changed. */
static void names_refresh(struct names *t)
{
	if (t->gen == request_gen)
		return;
	t->gen = request_gen;
	struct stat st;
	if (t->loaded && stat(t->file, &st) == 0 && st.st_ino == t->ino &&
	    st.st_size == t->size && st.st_mtim.tv_sec == t->mtime.tv_sec &&
	    st.st_mtim.tv_nsec == t->mtime.tv_nsec)
		return;
	size_t len = 0;
	char *buf = read_names_file(t->file, &st, &len);
	t->loaded = true;
	if (!buf) {
		t->n = 0;
		t->ino = 0;
		return;
	}
	t->ino = st.st_ino;
	t->size = st.st_size;
	t->mtime = st.st_mtim;
	parse_names(t, buf, len);
	free(buf);
}

static json_t *id_name(struct names *t, unsigned id)
{
	names_refresh(t);
	/* a listing's entries mostly share one owner: the last hit first */
	if (t->last < t->n && t->v[t->last].id == id)
		return json_string(t->v[t->last].name);
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i].id == id) {
			t->last = i;
			return json_string(t->v[i].name);
		}
	char num[16];
	snprintf(num, sizeof num, "%u", id);
	return json_string(num);
}

static const char *type_name(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

/* s as a JSON string, its bad bytes as U+FFFD. */
static json_t *utf8_string(const char *s, bool *bad)
{
	size_t n = strlen(s);
	char *out = malloc(n * 3 + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		size_t l = moat_utf8_seq((const unsigned char *)s + i, n - i);
		if (!l) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			*bad = true;
			continue;
		}
		memcpy(out + o, s + i, l);
		o += l;
		i += l;
	}
	out[o] = '\0';
	json_t *j = json_string(out);
	free(out);
	return j;
}

static json_t *b64(const char *s)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = strlen(s);
	char *out = malloc((n + 2) / 3 * 4 + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)u[i] << 16 | (i + 1 < n ? (unsigned)u[i + 1] << 8 : 0) |
			     (i + 2 < n ? u[i + 2] : 0);
		out[o++] = tab[v >> 18 & 63];
		out[o++] = tab[v >> 12 & 63];
		out[o++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? tab[v & 63] : '=';
	}
	out[o] = '\0';
	json_t *j = json_string(out);
	free(out);
	return j;
}

/* The user.moat.* xattrs of a file or directory (others have none: user
 * xattrs are not allowed on symlinks and devices). */
static json_t *read_meta(int dir, const char *name, const struct stat *st)
{
	json_t *m = json_object();
	if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode))
		return m;
	int fd = openat(dir, name,
			O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
				(S_ISDIR(st->st_mode) ? O_DIRECTORY : 0));
	if (fd < 0)
		return m; /* unreadable: no metadata shown */
	char *list = malloc(META_LIST_MAX);
	ssize_t ln = list ? flistxattr(fd, list, META_LIST_MAX) : -1;
	const size_t pl = strlen(ENTRY_META_PREFIX);
	for (ssize_t i = 0; i < ln;) {
		const char *k = list + i;
		size_t kl = strnlen(k, (size_t)(ln - i));
		i += (ssize_t)kl + 1;
		if (kl <= pl || strncmp(k, ENTRY_META_PREFIX, pl) != 0)
			continue;
		char v[META_VALUE_MAX + 1];
		ssize_t vn = fgetxattr(fd, k, v, META_VALUE_MAX);
		if (vn < 0)
			continue;
		v[vn] = '\0';
		bool bad = false;
		json_t *js = utf8_string(v, &bad);
		if (js && strlen(v) == (size_t)vn)
			json_object_set_new(m, k + pl, js);
		else
			json_decref(js);
	}
	free(list);
	close(fd);
	return m;
}

json_t *entry_string(const char *s)
{
	bool bad = false;
	return utf8_string(s, &bad);
}

json_t *entry_make(int dir, const char *name, const char *shown, const char *path,
		   const struct stat *st, bool with_meta)
{
	bool bad = false;
	json_t *o = json_object();
	if (!o)
		return NULL;
	json_object_set_new(o, "name", utf8_string(shown, &bad));
	if (bad)
		json_object_set_new(o, "name_raw_b64", b64(shown));
	json_object_set_new(o, "path", utf8_string(path, &bad));
	json_object_set_new(o, "type", json_string(type_name(st->st_mode)));
	json_object_set_new(o, "size", json_integer((json_int_t)st->st_size));
	json_object_set_new(o, "mode", json_integer((json_int_t)(st->st_mode & 07777)));
	json_object_set_new(o, "mtime", json_integer((json_int_t)st->st_mtim.tv_sec));
	json_object_set_new(o, "mtime_ns", json_integer((json_int_t)st->st_mtim.tv_nsec));
	json_object_set_new(o, "uid", json_integer((json_int_t)st->st_uid));
	json_object_set_new(o, "gid", json_integer((json_int_t)st->st_gid));
	json_object_set_new(o, "owner", id_name(&users, st->st_uid));
	json_object_set_new(o, "group", id_name(&groups, st->st_gid));
	if (dir >= 0 && S_ISLNK(st->st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(dir, name, t, sizeof t - 1);
		if (n >= 0) {
			t[n] = '\0';
			bool tb = false;
			json_object_set_new(o, "symlink_target", utf8_string(t, &tb));
		}
	}
	if (with_meta && dir >= 0)
		json_object_set_new(o, "metadata", read_meta(dir, name, st));
	return o;
}
