/* Mandatory write-deny inside writable roots (.bashrc, .git/hooks, ...).
 *
 * Targets are the protected names at the top of the root (whether they
 * exist or not), the policy's deny-write paths and missing secrets paths
 * inside the root, and protected names that already exist deeper down
 * (a bounded scan). Two phases, both walking one component at a time
 * without following symlinks (O_PATH|O_NOFOLLOW):
 *
 *  1. pin: every existing real directory on the way to a target (.git,
 *     .claude, sub/) is bound onto itself, read-write. A mount point cannot
 *     be renamed or removed, so `mv .git x && mkdir -p .git/hooks` cannot
 *     move the protection out of the way.
 *  2. protect: the target exists -> bind it read-only onto itself; a
 *     component is a symlink -> mount an empty read-only file over the link
 *     itself (neither followed nor replaceable); a component is missing (or
 *     is another sandbox's placeholder) -> create an empty mode-000
 *     placeholder and mount an empty read-only object over it, so the name
 *     can never be created inside. That object is readable (JAIL_PH_*:
 *     0444 file, 0555 directory): tools inside meet an empty entry, not a
 *     mode-000 one (git: "could not open directory .idea/"). No entry at
 *     all cannot be had: nothing in the kernel refuses one name's creation
 *     in a directory the sandbox may write (docs/SECURITY.md). The host removes placeholders after the
 *     last sandbox using the root ends (jail_protect_cleanup).
 *
 * If the sandbox user could not create the placeholder either (read-only or
 * foreign directory), there is nothing to protect. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/util.h"
#include "../base/walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Existing names deeper in the tree are found by a bounded scan: depth and
 * entry count are capped so a huge tree cannot stall the start. */
#define SCAN_DEPTH 3
#define SCAN_BUDGET 50000

struct target {
	char *rel;      /* relative to the root; trailing '/' = a directory */
	bool create;    /* may create a placeholder (top of the root only) */
	bool mkparents; /* missing parents become real directories (secrets in a
			 * home: ~/.config must stay creatable for .config/gcloud) */
};

struct targets {
	struct target *v;
	size_t n;
	struct moat_strv nested_git; /* rel/.git/commondir that do not exist */
};

static void add_target(struct targets *t, const char *rel, bool create, bool mkparents)
{
	struct target *nv = realloc(t->v, (t->n + 1) * sizeof *nv);
	if (!nv) {
		fputs("moat: out of memory\n", stderr);
		_exit(125);
	}
	t->v = nv;
	t->v[t->n].rel = moat_strdupf("%s", rel);
	t->v[t->n].create = create;
	t->v[t->n].mkparents = mkparents;
	t->n++;
}

static void free_targets(struct targets *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].rel);
	free(t->v);
}

static bool harmless(int err)
{
	return err == EACCES || err == EPERM || err == EROFS;
}

/* What protect_one creates, and what another sandbox may have left. */
static bool is_placeholder(const struct stat *st)
{
	if ((st->st_mode & 07777) != 0)
		return false;
	if (S_ISREG(st->st_mode))
		return st->st_size == 0;
	return S_ISDIR(st->st_mode) || S_ISSOCK(st->st_mode);
}

/* The readable object mounted over a placeholder (JAIL_PH_*), seen again
 * from a later name below it: the very inode, not a look-alike. */
static bool is_ph_mask(const struct stat *st)
{
	struct stat m;
	const char *src = S_ISDIR(st->st_mode) ? JAIL_PH_DIR : JAIL_PH_FILE;
	return stat(src, &m) == 0 && m.st_dev == st->st_dev && m.st_ino == st->st_ino;
}

/* Split rel into components in buf; returns the count. */
static size_t split(const char *rel, char *buf, size_t cap, char **comp, size_t maxc,
		    bool *leaf_dir)
{
	size_t len = strlen(rel);
	if (len == 0 || len >= cap)
		return 0;
	memcpy(buf, rel, len + 1);
	*leaf_dir = buf[len - 1] == '/';
	size_t n = 0;
	char *save = NULL;
	for (char *c = strtok_r(buf, "/", &save); c && n < maxc; c = strtok_r(NULL, "/", &save))
		comp[n++] = c;
	return n;
}

/* Phase 1: pin the existing real directories leading to a target. */
static int pin_path(int rootfd, const char *root, const char *rel,
		    struct moat_strv *pinned, struct moat_err *e)
{
	char buf[PATH_MAX], *comp[64];
	bool leaf_dir;
	size_t n = split(rel, buf, sizeof buf, comp, 64, &leaf_dir);
	_cleanup_close_ int cur = dup(rootfd);
	if (cur < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "dup");
	char sofar[PATH_MAX] = "";
	for (size_t i = 0; i + 1 < n; i++) {
		size_t l = strlen(sofar);
		snprintf(sofar + l, sizeof sofar - l, "%s%s", l ? "/" : "", comp[i]);
		_cleanup_close_ int fd = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return 0; /* missing: phase 2 masks it */
		struct stat st;
		if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || is_placeholder(&st))
			return 0;
		if (!moat_strv_contains(pinned, sofar)) {
			char what[PATH_MAX];
			snprintf(what, sizeof what, "%s/%s", root, sofar);
			if (jail_mount_pin(fd, what, e) < 0)
				return -1;
			moat_strv_add(pinned, sofar);
			close(fd);
			/* continue below the new mount, not the covered one */
			fd = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "reopen %s", what);
		}
		close(cur);
		cur = steal_fd(&fd);
	}
	return 0;
}

/* Create the placeholder of one target at its first missing component.
 * The mandatory names' file placeholders are hard links of one inode: a
 * fresh inode per name per run is what start-up costs on ext4, whose
 * allocator skips every recently deleted inode (a busy agent leaves
 * thousands). That inode is a unix socket nobody listens on: it can hold
 * no content, so no sandbox that can reach one of the names (a sandbox on
 * an enclosing directory, one allowed to write .git, a name it did not
 * mask) can write through it into the others; opening it fails (ENXIO).
 * We keep it pinned by an O_PATH descriptor for the run, so that cleanup
 * knows it by identity even if its mode was changed and its number cannot
 * be reused meanwhile. The user's deny-write names and filesystems without
 * sockets get empty mode-000 files of their own. Directories (.git,
 * .vscode) cannot be linked. */
struct placer {
	int rootfd;
	bool link; /* share one inode */
	int pin;   /* O_PATH on it, or -1 */
};

/* A unix socket inode at dirfd/name, created mode 000 (the socket's own
 * mode, set before bind: no chmod by name afterwards, which a symlink put
 * there meanwhile would redirect). Returns an O_PATH descriptor on it once
 * checked to be that node, or -1. */
static int make_socket_node(int dirfd, const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/%s", dirfd, name) >=
	    (int)sizeof sa.sun_path)
		return -1;
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	int rc = fchmod(s, 0) == 0 ? bind(s, (struct sockaddr *)&sa, sizeof sa) : -1;
	close(s);
	if (rc < 0)
		return -1;
	int pin = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	/* someone able to write here may have swapped the name already */
	if (pin >= 0 && (fstat(pin, &st) < 0 || !S_ISSOCK(st.st_mode) ||
			 (st.st_mode & 07777) != 0 || st.st_nlink != 1)) {
		close(pin);
		pin = -1;
	}
	return pin;
}

static void place_file(struct placer *pl, int dirfd, const char *name)
{
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", pl->pin);
	/* from the pinned inode itself, not from its first name */
	if (pl->link && pl->pin >= 0 && linkat(AT_FDCWD, self, dirfd, name, AT_SYMLINK_FOLLOW) == 0)
		return;
	if (pl->link && pl->pin < 0) {
		pl->pin = make_socket_node(dirfd, name);
		if (pl->pin >= 0)
			return;
	}
	int f = openat(dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (f >= 0)
		close(f);
}

static void place_one(struct placer *pl, const char *rel)
{
	int rootfd = pl->rootfd;
	char buf[PATH_MAX], *comp[64];
	bool leaf_dir;
	size_t n = split(rel, buf, sizeof buf, comp, 64, &leaf_dir);
	int cur = dup(rootfd);
	for (size_t i = 0; cur >= 0 && i < n; i++) {
		struct stat st;
		if (fstatat(cur, comp[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    (is_placeholder(&st) || !S_ISDIR(st.st_mode)))
			break; /* a placeholder already (root would go inside), or a file */
		int fd = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			if (i + 1 < n || leaf_dir)
				mkdirat(cur, comp[i], 0);
			else
				place_file(pl, cur, comp[i]);
			break;
		}
		close(cur);
		cur = fd; /* < 0 (a file, a symlink, ...): stop */
	}
	if (cur >= 0)
		close(cur);
}

void jail_protect_parent(struct mop *op)
{
	const char *const *names = op->names;
	_cleanup_close_ int fd = open(op->host, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct placer pl = {.rootfd = fd, .link = true, .pin = -1};
	for (size_t i = 0; names && names[i]; i++)
		place_one(&pl, names[i]);
	pl.link = false;
	for (size_t i = 0; i < op->extra.n; i++)
		place_one(&pl, op->extra.v[i]);
	op->ph_pin = pl.pin;
	struct moat_strv *watch = &op->watch;
	for (size_t i = 0; names && moat_mandatory_deny_existing[i]; i++) {
		struct stat st;
		if (fstatat(fd, moat_mandatory_deny_existing[i], &st, AT_SYMLINK_NOFOLLOW) < 0 &&
		    errno == ENOENT)
			moat_strv_add(watch, moat_mandatory_deny_existing[i]);
	}
}

void jail_protect_sweep(const char *root, const struct moat_strv *watch,
			void (*warn)(void *, const char *), void *arg)
{
	if (!watch->n)
		return;
	_cleanup_close_ int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (size_t i = 0; fd >= 0 && i < watch->n; i++) {
		/* the parent is opened beneath the root without following any
		 * symlink: the sandbox had all run long to plant some */
		char dir[PATH_MAX];
		snprintf(dir, sizeof dir, "%s", watch->v[i]);
		char *slash = strrchr(dir, '/');
		if (!slash)
			continue;
		*slash = '\0';
		const char *leaf = slash + 1;
		struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
		_cleanup_close_ int pfd = (int)syscall(SYS_openat2, fd, dir, &how, sizeof how);
		struct stat st;
		if (pfd < 0 || fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		/* a directory there is the sandbox's (it was missing at the
		 * start): it goes whole, whatever it holds (src/base/walk.c) */
		int r = S_ISDIR(st.st_mode) ? moat_walk_rm(pfd, leaf, MOAT_WALK_OPEN_UP)
					    : unlinkat(pfd, leaf, 0);
		if (r < 0 && errno == EACCES) {
			/* the sandbox made the directory read-only (chmod 555 .git):
			 * we own it, make it writable again */
			char self[64];
			struct stat pst;
			snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
			if (fstat(pfd, &pst) == 0 && chmod(self, (pst.st_mode & 07777) | S_IRWXU) == 0)
				r = S_ISDIR(st.st_mode) ? moat_walk_rm(pfd, leaf, MOAT_WALK_OPEN_UP)
							: unlinkat(pfd, leaf, 0);
		}
		char msg[PATH_MAX + 160];
		if (r == 0)
			snprintf(msg, sizeof msg, "removed %s/%s, which the sandbox created "
				 "(it would redirect git's config and hooks)", root, watch->v[i]);
		else
			snprintf(msg, sizeof msg, "the sandbox created %s/%s and it could not be "
				 "removed (%s): remove it before using git there",
				 root, watch->v[i], strerror(errno));
		if (warn)
			warn(arg, msg);
	}
}

/* Phase 2: make one target read-only (see the top of this file). */
static int protect_one(int rootfd, const char *root, const char *rel, bool create,
		       bool mkparents, struct moat_err *e)
{
	char buf[PATH_MAX], *comp[64];
	bool leaf_dir;
	size_t n = split(rel, buf, sizeof buf, comp, 64, &leaf_dir);
	char what[PATH_MAX];
	snprintf(what, sizeof what, "%s/%s", root, rel);
	_cleanup_close_ int cur = dup(rootfd);
	if (cur < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "dup");
	for (size_t i = 0; i < n; i++) {
		bool last = i + 1 == n;
		struct stat st;
		_cleanup_close_ int fd = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno != ENOENT) {
			if (errno == ENOTDIR || harmless(errno))
				return 0;
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "protect %s", what);
		}
		if (fd < 0 && !create)
			return 0;
		if (fd < 0 && mkparents && !last) {
			/* a real (owner-only) parent, made as the sandbox user */
			if (mkdirat(cur, comp[i], 0700) < 0 && errno != EEXIST)
				return harmless(errno) ? 0 : moat_err_set(e, MOAT_E_SYSTEM, errno,
									 "protect %s", what);
			fd = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "protect %s", what);
			/* pinned like any directory on the way to a protected name */
			if (jail_mount_pin(fd, what, e) < 0)
				return -1;
			close(fd);
			fd = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "protect %s", what);
			close(cur);
			cur = steal_fd(&fd);
			continue;
		}
		if (fd < 0) {
			int r;
			if (!last || leaf_dir) {
				r = mkdirat(cur, comp[i], 0);
			} else {
				r = openat(cur, comp[i], O_CREAT | O_EXCL | O_WRONLY |
							 O_NOFOLLOW | O_CLOEXEC, 0);
				if (r >= 0)
					close(r);
			}
			if (r < 0 && harmless(errno))
				return 0;
			if (r < 0 && errno != EEXIST)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "protect %s", what);
			fd = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "protect %s", what);
			if (fstat(fd, &st) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "stat %s", what);
			return jail_mount_onto(S_ISDIR(st.st_mode) ? JAIL_PH_DIR : JAIL_PH_FILE,
					       fd, what, e);
		}
		if (fstat(fd, &st) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "stat %s", what);
		if (S_ISLNK(st.st_mode))
			return jail_mount_onto(JAIL_EMPTY_FILE, fd, what, e);
		struct stat pst;
		if (fstat(cur, &pst) == 0 && pst.st_dev != st.st_dev &&
		    (is_placeholder(&st) || is_ph_mask(&st)))
			return 0; /* our own mask, from an earlier name (.git/config after .git/hooks) */
		if (is_placeholder(&st)) /* another sandbox's: mask it like ours */
			return jail_mount_onto(S_ISDIR(st.st_mode) ? JAIL_PH_DIR : JAIL_PH_FILE,
					       fd, what, e);
		if (last || !S_ISDIR(st.st_mode))
			return jail_mount_ro_self(fd, what, e);
		close(cur);
		cur = steal_fd(&fd);
	}
	return 0;
}

static bool skip_dir(const char *name)
{
	return strcmp(name, "node_modules") == 0 || strcmp(name, ".git") == 0;
}

/* Collect protected names that exist below the top of the root. */
static void scan(int dirfd, const char *rel, const char *const *names, int depth,
		 size_t *budget, struct targets *out)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return;
	}
	struct dirent *de;
	while (*budget > 0 && (de = readdir(d))) {
		(*budget)--;
		const char *nm = de->d_name;
		if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
			continue;
		char sub[PATH_MAX];
		snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", nm);
		if (depth > 0 && strcmp(nm, ".git") == 0) {
			/* a nested repository: its commondir is guarded like the
			 * top-level one (read-only if it exists, else watched) */
			char t[PATH_MAX];
			struct stat st;
			snprintf(t, sizeof t, "%s/.git/commondir", rel);
			if (fstatat(dirfd, ".git/commondir", &st, AT_SYMLINK_NOFOLLOW) == 0)
				add_target(out, t, false, false);
			else if (errno == ENOENT)
				moat_strv_add(&out->nested_git, t);
		}
		if (depth > 0) {
			size_t nl = strlen(nm);
			for (size_t i = 0; names[i]; i++)
				if (strncmp(names[i], nm, nl) == 0 &&
				    (names[i][nl] == '\0' || names[i][nl] == '/')) {
					char t[PATH_MAX];
					snprintf(t, sizeof t, "%s/%s", rel, names[i]);
					add_target(out, t, false, false);
				}
		}
		if (depth >= SCAN_DEPTH || skip_dir(nm))
			continue;
		bool isdir = de->d_type == DT_DIR;
		if (de->d_type == DT_UNKNOWN) {
			struct stat st;
			isdir = fstatat(dirfd, nm, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
				S_ISDIR(st.st_mode);
		}
		if (!isdir)
			continue;
		int s = openat(dirfd, nm, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (s < 0)
			continue;
		scan(s, sub, names, depth + 1, budget, out);
		close(s);
	}
	closedir(d);
}

int jail_protect_child(int rootfd, const char *root, const char *const *names,
		       const struct moat_strv *extra, const struct moat_strv *secrets,
		       const struct moat_strv *repos, int opidx, char *report,
		       size_t report_cap, struct moat_err *e)
{
	struct targets t = {0};
	for (size_t i = 0; names && names[i]; i++)
		add_target(&t, names[i], true, false);
	for (size_t i = 0; extra && i < extra->n; i++)
		add_target(&t, extra->v[i], true, false);
	for (size_t i = 0; secrets && i < secrets->n; i++)
		add_target(&t, secrets->v[i], true, true);
	for (size_t i = 0; names && moat_mandatory_deny_existing[i]; i++)
		add_target(&t, moat_mandatory_deny_existing[i], false, false);
	size_t budget = SCAN_BUDGET;
	if (names)
		scan(rootfd, "", names, 0, &budget, &t);
	/* Repositories placed before the start (moat serve's git_repo
	 * entries) may lie deeper than the scan goes: each is scanned as a
	 * nested one from its own directory (opened beneath the root, no
	 * symlink followed), so its .git names and commondir are guarded. */
	for (size_t i = 0; names && repos && i < repos->n; i++) {
		struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
		int rfd = (int)syscall(SYS_openat2, rootfd, repos->v[i], &how, sizeof how);
		if (rfd < 0) {
			moat_strv_free(&t.nested_git);
			free_targets(&t);
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "protect the repository %s/%s",
					    root, repos->v[i]);
		}
		scan(rfd, repos->v[i], names, 1, &budget, &t);
		close(rfd);
	}
	/* A tree too big to scan could hide a nested .git/hooks past the
	 * budget (a hostile run can make it so): fail closed. */
	if (budget == 0) {
		moat_strv_free(&t.nested_git);
		free_targets(&t);
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "%s: more than %d entries within %d levels, so "
				    "protected names below could not all be found; "
				    "use a smaller workspace", root, SCAN_BUDGET, SCAN_DEPTH);
	}
	/* Tell the host which nested commondirs to watch. Too many to report
	 * would leave some unwatched: fail closed. */
	size_t used = 0;
	for (size_t i = 0; i < t.nested_git.n; i++) {
		int n = snprintf(report + used, report_cap - used, "%d:%s", opidx,
				 t.nested_git.v[i]);
		if (n < 0 || (size_t)n + 1 >= report_cap - used) {
			moat_strv_free(&t.nested_git);
			free_targets(&t);
			return moat_err_set(e, MOAT_E_USAGE, 0, "%s: too many nested git "
					    "repositories to guard", root);
		}
		used += (size_t)n + 1;
	}
	moat_strv_free(&t.nested_git);
	struct moat_strv pinned = {0};
	int r = 0;
	for (size_t i = 0; r == 0 && i < t.n; i++)
		r = pin_path(rootfd, root, t.v[i].rel, &pinned, e);
	for (size_t i = 0; r == 0 && i < t.n; i++)
		r = protect_one(rootfd, root, t.v[i].rel, t.v[i].create, t.v[i].mkparents, e);
	moat_strv_free(&pinned);
	free_targets(&t);
	return r;
}

static void cleanup_one(int rootfd, const char *rel, const struct mop *op)
{
	struct stat pin;
	char buf[PATH_MAX], *comp[64];
	bool leaf_dir;
	size_t n = split(rel, buf, sizeof buf, comp, 64, &leaf_dir);
	int cur = dup(rootfd);
	for (size_t i = 0; cur >= 0 && i < n; i++) {
		struct stat st;
		if (fstatat(cur, comp[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			break;
		bool ours = op && op->ph_pin >= 0 && S_ISSOCK(st.st_mode) &&
			    fstat(op->ph_pin, &pin) == 0 && st.st_dev == pin.st_dev &&
			    st.st_ino == pin.st_ino;
		if (ours || is_placeholder(&st)) {
			/* rmdir fails on a non-empty directory: not ours */
			unlinkat(cur, comp[i], S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
			break;
		}
		if (!S_ISDIR(st.st_mode))
			break;
		int next = openat(cur, comp[i], O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
		close(cur);
		cur = next;
	}
	if (cur >= 0)
		close(cur);
}

void jail_protect_cleanup(const struct mop *op)
{
	_cleanup_close_ int fd = open(op->host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	/* Another sandbox still running on this root holds a shared lock
	 * and still needs the placeholders as mount points. */
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		for (size_t i = 0; op->names && op->names[i]; i++)
			cleanup_one(fd, op->names[i], op);
		for (size_t i = 0; i < op->extra.n; i++)
			cleanup_one(fd, op->extra.v[i], NULL);
		for (size_t i = 0; i < op->secrets.n; i++)
			cleanup_one(fd, op->secrets.v[i], NULL);
	}
}
