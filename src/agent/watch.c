/* Directory watches: one inotify instance for the agent, in its poll loop.
 * A watch is a directory (and, recursive, every directory below it, and
 * the ones made later) whose events are queued until a watch_wait takes
 * them. inotify hands out one descriptor per inode, so two watches over
 * the same directory share it: the table below maps a descriptor to each
 * (watch, directory relative to the watch's root) that uses it.
 *
 * Directories are added by descriptor, never by path: each is reached
 * with the resolver (resolve.h) or openat(O_NOFOLLOW) from its parent,
 * then entered with fchdir and watched as "." (inotify_add_watch takes a
 * path only). Bounds: 64 watches, 10000 queued events per watch (then one
 * "overflow"), 8192 inotify descriptors in all (the sandbox's
 * max_inotify_watches quota may be lower: ENOSPC is limit_reached). See
 * agent.h. */
#define _GNU_SOURCE
#include "agent.h"
#include "resolve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_WATCHES 64
#define MAX_EVENTS 10000
#define MAX_WDS 8192
#define MAX_DEPTH 64
#define SCAN_BUDGET 200000 /* entries looked at per added tree: the loop stays live */
#define REPLY_EVENTS 1000           /* events per watch_wait answer */
#define REPLY_BYTES (512u << 10)    /* of JSON (a frame holds 1 MiB) */
#define WATCH_MASK                                                                        \
	(IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB |      \
	 IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct wev {
	char *name; /* relative to the watch's root; NULL for an overflow */
	const char *type;
	json_t *entry;
};

struct watch {
	int id; /* 0 = free slot */
	const struct agent_conn *conn;
	char *root; /* absolute path of the watched directory */
	bool recursive, include_entry, ended, overflow;
	struct wev *q;
	size_t qlen, qcap;
	bool waiting;
	struct agent_req wr;
	int64_t deadline; /* 0 = none */
};

struct wdent {
	int wd; /* -1 = free */
	int watch; /* index in watches */
	char *rel; /* "" = the root */
};

static struct watch watches[MAX_WATCHES];
static struct wdent wds[MAX_WDS];
static size_t nwds; /* slots of wds in use, high-water mark */
static int ifd = -1;
static int next_id = 1;
static size_t scan_left; /* of the tree being added (add_tree) */

static struct watch *find(int id)
{
	for (int i = 0; id > 0 && i < MAX_WATCHES; i++)
		if (watches[i].id == id)
			return &watches[i];
	return NULL;
}

static bool wd_used(int wd)
{
	for (size_t i = 0; i < nwds; i++)
		if (wds[i].wd == wd)
			return true;
	return false;
}

static void wd_drop(size_t i)
{
	int wd = wds[i].wd;
	free(wds[i].rel);
	wds[i].rel = NULL;
	wds[i].wd = -1;
	if (!wd_used(wd) && ifd >= 0)
		inotify_rm_watch(ifd, wd); /* EINVAL once the kernel dropped it: fine */
	while (nwds && wds[nwds - 1].wd < 0)
		nwds--;
}

static int wd_add(int wd, int watch, const char *rel)
{
	size_t i = 0;
	while (i < nwds && wds[i].wd >= 0)
		i++;
	if (i == MAX_WDS) {
		errno = ENOSPC;
		return -1;
	}
	char *r = strdup(rel);
	if (!r)
		return -1;
	wds[i] = (struct wdent){.wd = wd, .watch = watch, .rel = r};
	if (i == nwds)
		nwds++;
	return 0;
}

static char *join(const char *a, const char *b)
{
	char *s = NULL;
	if (asprintf(&s, "%s%s%s", a, *a && *b ? "/" : "", b) < 0)
		return NULL;
	return s;
}

/* The entry of name below the watch's root, if it is (still) there. */
static json_t *event_entry(const struct watch *w, const char *name)
{
	char *full = join(w->root, name);
	if (!full)
		return NULL;
	json_t *o = NULL;
	struct fsr at;
	if (fsr_walk(FSR_ROOT, full, 0, &at) == 0) {
		struct stat st;
		if (strcmp(at.name, ".") != 0 &&
		    fstatat(at.dir, at.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !fs_is_mask(&st)) {
			const char *base = strrchr(full, '/');
			o = entry_make(at.dir, at.name, base ? base + 1 : full, full, &st, false);
		}
		fsr_done(&at);
	}
	free(full);
	return o;
}

/* A name the agent itself makes for a moment (fsops.c tmp_name: a write's
 * or a patch's temp file ".<name>.moat-<12 hex>", an archive's
 * ".moat-stage-<hex>" / ".moat-trash-<hex>"): the watcher sees the write
 * as the rename into place, not the temp file. */
static bool agent_temp(const char *comp, size_t n)
{
	static const char *const tails[] = {".moat-", "moat-stage-", "moat-trash-"};
	if (n < 13 || comp[0] != '.')
		return false;
	for (size_t i = n - 12; i < n; i++)
		if (!strchr("0123456789abcdef", comp[i]) || !comp[i])
			return false;
	for (size_t k = 0; k < 3; k++) {
		size_t tl = strlen(tails[k]);
		if (n - 12 >= tl && !memcmp(comp + n - 12 - tl, tails[k], tl))
			return true;
	}
	return false;
}

static bool hidden_name(const char *name)
{
	for (const char *c = name; *c;) {
		const char *e = strchrnul(c, '/');
		if (agent_temp(c, (size_t)(e - c)))
			return true;
		c = *e ? e + 1 : e;
	}
	return false;
}

static void push(struct watch *w, const char *name, const char *type)
{
	if (w->ended || (name && hidden_name(name)))
		return;
	if (w->qlen && name && w->q[w->qlen - 1].name && !strcmp(type, "write") &&
	    !strcmp(w->q[w->qlen - 1].type, "write") && !strcmp(w->q[w->qlen - 1].name, name))
		return; /* a write in several chunks: told once until taken */
	if (w->overflow)
		return;
	if (w->qlen >= MAX_EVENTS) {
		w->overflow = true;
		name = NULL;
		type = "overflow";
	}
	if (w->qlen == w->qcap) {
		size_t cap = w->qcap ? w->qcap * 2 : 64;
		if (cap > MAX_EVENTS + 1)
			cap = MAX_EVENTS + 1;
		struct wev *nq = realloc(w->q, cap * sizeof *nq);
		if (!nq) {
			w->overflow = true;
			return;
		}
		w->q = nq;
		w->qcap = cap;
	}
	struct wev *e = &w->q[w->qlen];
	e->type = type;
	e->name = name ? strdup(name) : NULL;
	e->entry = NULL;
	if (name && !e->name) {
		w->overflow = true;
		return;
	}
	if (name && w->include_entry && strcmp(type, "remove") && strcmp(type, "rename"))
		e->entry = event_entry(w, name);
	w->qlen++;
}

/* Watch the directory dfd (any kind of descriptor) as rel of watch wi;
 * recursive: everything below too, each entry found told as a "create"
 * when synth (a directory made after the watch: what was put in it
 * before its own watch was in place). 0, or -1 with errno (ENOSPC:
 * a limit; others only for the root). */
static int add_dir(int wi, int dfd, const char *rel, int depth, bool synth)
{
	struct watch *w = &watches[wi];
	if (fsr_refused(dfd))
		return rel[0] ? 0 : (errno = EXDEV, -1);
	if (fchdir(dfd) < 0)
		return rel[0] ? 0 : -1;
	int wd = inotify_add_watch(ifd, ".", WATCH_MASK);
	int err = errno;
	if (chdir("/") < 0) {
		/* nothing of ours depends on the cwd: commands get their own */
	}
	if (wd < 0) {
		if (err == ENOSPC || err == EMFILE || err == ENOMEM || !rel[0]) {
			errno = err == EMFILE || err == ENOMEM ? ENOSPC : err;
			return -1;
		}
		return 0; /* an unreadable directory below: not watched */
	}
	if (wd_add(wd, wi, rel) < 0) {
		err = errno;
		if (!wd_used(wd))
			inotify_rm_watch(ifd, wd);
		errno = err == ENOMEM ? ENOMEM : ENOSPC;
		return -1;
	}
	if (!w->recursive || depth >= MAX_DEPTH)
		return 0;
	int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d) {
		if (lfd >= 0)
			close(lfd);
		return 0;
	}
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!scan_left--) {
			errno = ENOSPC;
			rc = -1;
			break;
		}
		bool maybe_dir = de->d_type == DT_DIR || de->d_type == DT_UNKNOWN;
		if (!maybe_dir && !synth)
			continue;
		struct stat st = {.st_mode = S_IFREG};
		if (maybe_dir &&
		    (fstatat(lfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || fs_is_mask(&st)))
			continue;
		char *sub = join(rel, de->d_name);
		if (!sub) {
			rc = -1;
			break;
		}
		if (synth)
			push(w, sub, "create");
		if (S_ISDIR(st.st_mode)) {
			int sfd = openat(lfd, de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sfd >= 0) {
				rc = add_dir(wi, sfd, sub, depth + 1, synth);
				close(sfd);
			}
		}
		free(sub);
	}
	int e2 = errno;
	closedir(d);
	errno = e2;
	return rc;
}

/* Forget the directory rel of watch wi, and (recursive) those below. */
static void drop_tree(int wi, const char *rel)
{
	size_t n = strlen(rel);
	for (size_t i = 0; i < nwds; i++)
		if (wds[i].wd >= 0 && wds[i].watch == wi && wds[i].rel[0] &&
		    !strncmp(wds[i].rel, rel, n) && (wds[i].rel[n] == '\0' || wds[i].rel[n] == '/'))
			wd_drop(i);
}

static void watch_free(struct watch *w)
{
	int wi = (int)(w - watches);
	for (size_t i = 0; i < nwds; i++)
		if (wds[i].wd >= 0 && wds[i].watch == wi)
			wd_drop(i);
	for (size_t i = 0; i < w->qlen; i++) {
		free(w->q[i].name);
		json_decref(w->q[i].entry);
	}
	free(w->q);
	free(w->root);
	memset(w, 0, sizeof *w);
	bool any = false;
	for (int i = 0; i < MAX_WATCHES; i++)
		any = any || watches[i].id;
	if (!any && ifd >= 0) { /* the instance counts against the sandbox's quota */
		close(ifd);
		ifd = -1;
		nwds = 0;
	}
}

/* Answer the pending wait with what is queued (maybe nothing). */
static void answer(struct watch *w)
{
	json_t *a = json_array();
	size_t k = 0, bytes = 0;
	for (; k < w->qlen && k < REPLY_EVENTS && bytes < REPLY_BYTES; k++) {
		struct wev *e = &w->q[k];
		json_t *o = json_pack("{s:s}", "type", e->type);
		if (e->name)
			json_object_set_new(o, "name", entry_string(e->name));
		if (e->entry) {
			json_object_set_new(o, "entry", e->entry);
			e->entry = NULL;
		}
		free(e->name);
		char *js = json_dumps(o, JSON_COMPACT); /* the reply must fit one frame */
		bytes += (js ? strlen(js) : 0) + 1;
		free(js);
		json_array_append_new(a, o);
	}
	memmove(w->q, w->q + k, (w->qlen - k) * sizeof *w->q);
	w->qlen -= k;
	if (!w->qlen)
		w->overflow = false;
	json_t *r = json_pack("{s:o}", "events", a);
	if (w->ended && !w->qlen)
		json_object_set_new(r, "ended", json_true());
	w->waiting = false;
	struct agent_req req = w->wr;
	agent_reply(&req, r, NULL, 0);
}

static void settle(void)
{
	int64_t now = agent_now_ms();
	for (int i = 0; i < MAX_WATCHES; i++) {
		struct watch *w = &watches[i];
		if (w->id && w->waiting &&
		    (w->qlen || w->ended || (w->deadline && now >= w->deadline)))
			answer(w);
	}
}

void watch_start(const struct agent_req *r, json_t *req)
{
	char path[PATH_MAX];
	if (!fs_path(r, req, "path", path, sizeof path))
		return;
	int wi = -1;
	for (int i = 0; i < MAX_WATCHES && wi < 0; i++)
		if (!watches[i].id)
			wi = i;
	if (wi < 0) {
		agent_fail(r, "limit_reached", "too many watches (%d)", MAX_WATCHES);
		return;
	}
	struct fsr at;
	int fd = -1;
	if (fsr_walk(FSR_ROOT, path, FSR_FOLLOW, &at) < 0) {
		int err = errno;
		if (err == EXDEV || err == ELOOP)
			agent_fail(r, "invalid_path", "%s: outside the sandbox's files", path);
		else
			agent_fail(r, agent_errno_code(err), "%s: %s", path, strerror(err));
		return;
	}
	fd = openat(at.dir, at.name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	int err = errno;
	fsr_done(&at);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || fs_is_mask(&st)) {
		if (fd >= 0)
			close(fd);
		agent_fail(r, fd >= 0 || err == ENOENT || err == ENOTDIR ? "not_found"
					  : agent_errno_code(err),
			   "%s: %s", path, fd >= 0 ? "No such file or directory" : strerror(err));
		return;
	}
	if (!S_ISDIR(st.st_mode) || fsr_refused(fd)) {
		close(fd);
		agent_fail(r, "invalid_path", "%s: %s", path,
			   S_ISDIR(st.st_mode) ? "outside the sandbox's files"
					       : "not a directory (a file)");
		return;
	}
	if (ifd < 0 && (ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
		err = errno;
		close(fd);
		agent_fail(r, err == EMFILE || err == ENFILE ? "limit_reached" : "internal",
			   "inotify: %s", strerror(err));
		return;
	}
	struct watch *w = &watches[wi];
	*w = (struct watch){.id = next_id++, .conn = r->conn, .root = strdup(path),
			    .recursive = json_is_true(json_object_get(req, "recursive")),
			    .include_entry = json_is_true(json_object_get(req, "include_entry"))};
	if (next_id > 1000000000)
		next_id = 1;
	scan_left = SCAN_BUDGET;
	int rc = w->root ? add_dir(wi, fd, "", 0, false) : -1;
	err = w->root ? errno : ENOMEM;
	close(fd);
	if (rc < 0) {
		watch_free(w);
		if (err == ENOSPC)
			agent_fail(r, "limit_reached",
				   "%s: too many directories watched (the sandbox's inotify "
				   "watch limit)",
				   path);
		else
			agent_fail(r, agent_errno_code(err), "%s: %s", path, strerror(err));
		return;
	}
	agent_reply(r, json_pack("{s:i}", "watch_id", w->id), NULL, 0);
}

void watch_wait(const struct agent_req *r, json_t *req)
{
	int id = (int)json_integer_value(json_object_get(req, "watch_id"));
	json_int_t t = json_integer_value(json_object_get(req, "timeout_ms"));
	bool poll_now = json_is_true(json_object_get(req, "poll"));
	struct watch *w = find(id);
	if (!w) {
		agent_fail(r, "not_found", "no watch %d", id);
		return;
	}
	if (w->waiting) /* one pending wait per watch: the older one ends */
		answer(w);
	w->waiting = true;
	w->wr = *r;
	w->deadline = t > 0 ? agent_now_ms() + t : poll_now ? agent_now_ms() : 0;
	settle();
}

void watch_stop(const struct agent_req *r, json_t *req)
{
	int id = (int)json_integer_value(json_object_get(req, "watch_id"));
	struct watch *w = find(id);
	if (!w) {
		agent_fail(r, "not_found", "no watch %d", id);
		return;
	}
	if (w->waiting) {
		w->ended = true;
		answer(w);
	}
	watch_free(w);
	agent_reply(r, json_object(), NULL, 0);
}

void watch_cancel(const struct agent_conn *c, json_int_t call)
{
	for (int i = 0; i < MAX_WATCHES; i++)
		if (watches[i].id && watches[i].waiting && watches[i].wr.conn == c &&
		    watches[i].wr.id == call)
			watches[i].waiting = false;
}

void watch_conn_gone(const struct agent_conn *c)
{
	for (int i = 0; i < MAX_WATCHES; i++) {
		struct watch *w = &watches[i];
		if (!w->id)
			continue;
		if (w->waiting && w->wr.conn == c)
			w->waiting = false;
		/* nobody else knows its id: a restarted daemon makes new ones */
		if (w->conn == c)
			watch_free(w);
	}
}

size_t watch_pollfds(struct pollfd *pfd, size_t cap)
{
	if (ifd < 0 || !cap)
		return 0;
	pfd[0] = (struct pollfd){.fd = ifd, .events = POLLIN};
	return 1;
}

static const char *event_type(uint32_t m)
{
	if (m & (IN_CREATE | IN_MOVED_TO))
		return "create";
	if (m & IN_MODIFY)
		return "write";
	if (m & IN_DELETE)
		return "remove";
	if (m & IN_MOVED_FROM)
		return "rename";
	if (m & IN_ATTRIB)
		return "chmod";
	return NULL;
}

static void one_event(const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) { /* the kernel's queue: events were lost */
		for (int i = 0; i < MAX_WATCHES; i++)
			if (watches[i].id)
				push(&watches[i], NULL, "overflow");
		return;
	}
	size_t hw = nwds; /* directories added below are not this event's */
	for (size_t i = 0; i < hw; i++) {
		if (wds[i].wd != ev->wd)
			continue;
		struct watch *w = &watches[wds[i].watch];
		bool root = !wds[i].rel[0];
		if (ev->mask & IN_IGNORED) {
			if (root)
				w->ended = true;
			wds[i].wd = -1; /* the kernel dropped it already */
			free(wds[i].rel);
			wds[i].rel = NULL;
			continue;
		}
		if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
			if (root) {
				w->ended = true;
				int wi = wds[i].watch;
				for (size_t j = 0; j < hw; j++)
					if (wds[j].wd >= 0 && wds[j].watch == wi)
						wd_drop(j);
			}
			continue; /* a directory below: its parent told it */
		}
		const char *type = event_type(ev->mask);
		if (!type || !ev->len)
			continue;
		char *name = join(wds[i].rel, ev->name);
		if (!name)
			continue;
		push(w, name, type);
		if (w->recursive && (ev->mask & IN_ISDIR)) {
			if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
				char *full = join(w->root, name);
				struct fsr at;
				if (full && fsr_walk(FSR_ROOT, full, 0, &at) == 0) {
					int sfd = openat(at.dir, at.name,
							 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
					fsr_done(&at);
					if (sfd >= 0) {
						scan_left = SCAN_BUDGET;
						if (add_dir(wds[i].watch, sfd, name, 1, true) < 0 &&
						    errno == ENOSPC)
							push(w, NULL, "overflow");
						close(sfd);
					}
				}
				free(full);
			} else if (ev->mask & IN_MOVED_FROM) {
				drop_tree(wds[i].watch, name);
			}
		}
		free(name);
	}
	while (nwds && wds[nwds - 1].wd < 0)
		nwds--;
}

void watch_events(const struct pollfd *pfd, size_t n)
{
	bool mine = false;
	for (size_t k = 0; k < n; k++)
		mine = mine || (ifd >= 0 && pfd[k].fd == ifd && pfd[k].revents);
	if (!mine)
		return;
	_Alignas(struct inotify_event) char buf[65536];
	for (int round = 0; round < 64 && ifd >= 0; round++) {
		ssize_t len = read(ifd, buf, sizeof buf);
		if (len < 0 && errno == EINTR)
			continue;
		if (len <= 0)
			break;
		for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= len;) {
			const struct inotify_event *ev = (const void *)(buf + off);
			one_event(ev);
			off += (ssize_t)(sizeof *ev + ev->len);
		}
	}
	settle();
}

int watch_next_timeout(void)
{
	int64_t now = agent_now_ms(), next = -1;
	for (int i = 0; i < MAX_WATCHES; i++)
		if (watches[i].id && watches[i].waiting && watches[i].deadline &&
		    (next < 0 || watches[i].deadline < next))
			next = watches[i].deadline;
	if (next < 0)
		return -1;
	return next <= now ? 0 : (int)(next - now > 1000000 ? 1000000 : next - now);
}

void watch_timers(void)
{
	settle();
}
