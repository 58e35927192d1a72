/* Mandatory write-deny inside writable roots (.bashrc, .git/hooks, ...).
 *
 * For each protected relative name we walk its components without
 * following symlinks (O_PATH|O_NOFOLLOW, one component at a time):
 *  - the whole path exists: bind it read-only onto itself;
 *  - a component is a symlink: mount an empty read-only file over the link
 *    itself, so it can neither be followed nor replaced;
 *  - a component is missing: create an empty mode-000 placeholder there and
 *    mount an empty read-only object over it. A name that is a mount point
 *    cannot be created, renamed or unlinked inside the sandbox, so a file
 *    created later can never appear. The host removes placeholders after
 *    the last sandbox using the root ends (jail_protect_cleanup).
 * If the sandbox user could not create the placeholder either (read-only or
 * foreign directory), there is nothing to protect. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <stdbool.h>
#include <unistd.h>

static bool harmless(int err)
{
	return err == EACCES || err == EPERM || err == EROFS;
}

static int protect_one(int rootfd, const char *root, const char *rel, bool create,
		       struct moat_err *e)
{
	char buf[PATH_MAX];
	size_t len = strlen(rel);
	if (len == 0 || len >= sizeof buf)
		return 0;
	memcpy(buf, rel, len + 1);
	bool leaf_dir = buf[len - 1] == '/';
	while (len && buf[len - 1] == '/')
		buf[--len] = '\0';

	_cleanup_close_ int cur = dup(rootfd);
	if (cur < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "dup");
	char *save = NULL;
	char *comp = strtok_r(buf, "/", &save);
	while (comp) {
		char *next = strtok_r(NULL, "/", &save);
		bool last = next == NULL;
		char what[PATH_MAX];
		snprintf(what, sizeof what, "%s/%s", root, rel);
		_cleanup_close_ int fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && !create)
			return 0;
		if (fd < 0 && errno == ENOENT) {
			bool dir = !last || leaf_dir;
			int r;
			if (dir) {
				r = mkdirat(cur, comp, 0);
			} else {
				r = openat(cur, comp, O_CREAT | O_EXCL | O_WRONLY |
						      O_NOFOLLOW | O_CLOEXEC, 0);
				if (r >= 0)
					close(r);
			}
			if (r < 0 && harmless(errno))
				return 0;
			if (r < 0 && errno != EEXIST)
				return moat_err_set(e, MOAT_E_SYSTEM, errno,
						    "protect %s", what);
			fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno,
						    "protect %s", what);
			struct stat st;
			if (fstat(fd, &st) < 0)
				return moat_err_set(e, MOAT_E_SYSTEM, errno, "stat %s", what);
			return jail_mount_onto(S_ISDIR(st.st_mode) ? JAIL_EMPTY_DIR
								   : JAIL_EMPTY_FILE,
					       fd, what, e);
		}
		if (fd < 0) {
			if (errno == ENOTDIR || harmless(errno))
				return 0;
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "protect %s", what);
		}
		struct stat st;
		if (fstat(fd, &st) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "stat %s", what);
		if (S_ISLNK(st.st_mode))
			return jail_mount_onto(JAIL_EMPTY_FILE, fd, what, e);
		if (last || !S_ISDIR(st.st_mode))
			return jail_mount_ro_self(fd, what, e);
		close(cur);
		cur = steal_fd(&fd);
		comp = next;
	}
	return 0;
}

/* Existing protected names below the top of a root (nested repositories,
 * sub-projects) are protected too, found by a bounded scan: depth and
 * entry count are capped so a huge tree cannot stall the start. */
#define SCAN_DEPTH 3
#define SCAN_BUDGET 20000

static bool skip_dir(const char *name)
{
	return strcmp(name, "node_modules") == 0 || strcmp(name, ".git") == 0;
}

static int scan(int dirfd, const char *path, const char *const *names, int depth,
		size_t *budget, struct moat_err *e)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	int r = 0;
	struct dirent *de;
	while (r == 0 && *budget > 0 && (de = readdir(d))) {
		(*budget)--;
		const char *n = de->d_name;
		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		if (depth > 0) {
			size_t nl = strlen(n);
			for (size_t i = 0; names[i] && r == 0; i++)
				if (strncmp(names[i], n, nl) == 0 &&
				    (names[i][nl] == '\0' || names[i][nl] == '/'))
					r = protect_one(dirfd, path, names[i], false, e);
		}
		if (r == 0 && depth < SCAN_DEPTH && !skip_dir(n)) {
			bool isdir = de->d_type == DT_DIR;
			if (de->d_type == DT_UNKNOWN) {
				struct stat st;
				isdir = fstatat(dirfd, n, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
					S_ISDIR(st.st_mode);
			}
			if (!isdir)
				continue;
			int sub = openat(dirfd, n, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0)
				continue;
			char p[PATH_MAX];
			snprintf(p, sizeof p, "%s/%s", path, n);
			r = scan(sub, p, names, depth + 1, budget, e);
			close(sub);
		}
	}
	closedir(d);
	return r;
}

int jail_protect_child(int rootfd, const char *root, const char *const *names,
		       const struct moat_strv *extra, struct moat_err *e)
{
	for (size_t i = 0; names && names[i]; i++)
		if (protect_one(rootfd, root, names[i], true, e) < 0)
			return -1;
	for (size_t i = 0; extra && i < extra->n; i++)
		if (protect_one(rootfd, root, extra->v[i], true, e) < 0)
			return -1;
	size_t budget = SCAN_BUDGET;
	if (names && scan(rootfd, root, names, 0, &budget, e) < 0)
		return -1;
	return 0;
}

/* A placeholder is what protect_one creates: mode 000, empty. */
static bool is_placeholder(int dirfd, const char *name, const struct stat *st)
{
	if ((st->st_mode & 07777) != 0)
		return false;
	if (S_ISREG(st->st_mode))
		return st->st_size == 0;
	if (!S_ISDIR(st->st_mode))
		return false;
	/* an empty directory: rmdir below fails with ENOTEMPTY otherwise */
	(void)dirfd;
	(void)name;
	return true;
}

static void cleanup_one(int rootfd, const char *rel)
{
	char buf[PATH_MAX];
	size_t len = strlen(rel);
	if (len == 0 || len >= sizeof buf)
		return;
	memcpy(buf, rel, len + 1);
	int cur = dup(rootfd);
	if (cur < 0)
		return;
	char *save = NULL;
	for (char *comp = strtok_r(buf, "/", &save); comp;
	     comp = strtok_r(NULL, "/", &save)) {
		struct stat st;
		if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) < 0)
			break;
		if (is_placeholder(cur, comp, &st)) {
			unlinkat(cur, comp, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
			break;
		}
		if (!S_ISDIR(st.st_mode))
			break;
		int next = openat(cur, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
		close(cur);
		cur = next;
		if (cur < 0)
			return;
	}
	close(cur);
}

void jail_protect_cleanup(const char *root, const char *const *names,
			  const struct moat_strv *extra)
{
	_cleanup_close_ int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	/* Another sandbox still running on this root holds a shared lock
	 * and still needs the placeholders as mount points. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return;
	for (size_t i = 0; names && names[i]; i++)
		cleanup_one(fd, names[i]);
	for (size_t i = 0; extra && i < extra->n; i++)
		cleanup_one(fd, extra->v[i]);
}
