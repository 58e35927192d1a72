/* Unit tests for src/base/walk.c: trees deeper than PATH_MAX, symlink
 * loops and links out, unreadable directories, few descriptors, mounts. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "base/util.h"
#include "base/walk.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char base[64];

static void mkbase(void)
{
	snprintf(base, sizeof base, "/tmp/moat-unit-walk-XXXXXX");
	cr_assert_not_null(mkdtemp(base));
}

static void touch_at(int dfd, const char *name, const char *text)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	cr_assert(fd >= 0, "create %s: %s", name, strerror(errno));
	if (text)
		cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* A chain of `levels` directories of 100-character names below dfd, with
 * a file at the bottom; returns nothing, the tree is at dfd/<name>. */
static void chain(int dfd, int levels)
{
	char name[101];
	memset(name, 'n', 100);
	name[100] = '\0';
	int cur = dup(dfd);
	for (int i = 0; i < levels; i++) {
		cr_assert_eq(mkdirat(cur, name, 0755), 0, "level %d: %s", i, strerror(errno));
		int next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		cr_assert(next >= 0);
		close(cur);
		cur = next;
	}
	touch_at(cur, "bottom", "x");
	close(cur);
}

struct count {
	size_t entries, dirs, leaves, max_len, max_depth;
};

static int count_cb(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct count *c = arg;
	cr_assert_eq(strlen(en->path), en->path_len);
	if (ev == MOAT_WALK_LEAVE) {
		c->leaves++;
		return 0;
	}
	c->entries++;
	if (S_ISDIR(en->st->st_mode))
		c->dirs++;
	if (en->path_len > c->max_len)
		c->max_len = en->path_len;
	if (en->depth > c->max_depth)
		c->max_depth = en->depth;
	/* the descriptor really is the parent: the name is there */
	struct stat st;
	cr_assert_eq(fstatat(en->dirfd, en->name, &st, AT_SYMLINK_NOFOLLOW), 0);
	cr_assert_eq(st.st_ino, en->st->st_ino);
	return 0;
}

static bool gone(const char *p)
{
	struct stat st;
	return lstat(p, &st) < 0 && errno == ENOENT;
}

Test(walk, deeper_than_path_max_with_few_descriptors)
{
	mkbase();
	int b = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert(b >= 0);
	chain(b, 300); /* 30,300 bytes of path */
	for (size_t fds = 2; fds <= 512; fds *= 16) {
		struct count c = {0};
		struct moat_walk_opt o = {.fn = count_cb, .arg = &c, .max_fds = fds};
		struct moat_err e = {0};
		cr_assert_eq(moat_walk(b, &o, &e), 0, "%s", e.msg);
		cr_assert_eq(c.dirs, 300);
		cr_assert_eq(c.leaves, 300);
		cr_assert_eq(c.entries, 301);
		cr_assert_eq(c.max_depth, 301);
		cr_assert_gt(c.max_len, PATH_MAX);
	}
	/* the descriptors are given back */
	int probe = dup(0);
	cr_assert_lt(probe, 16);
	close(probe);
	cr_assert_eq(moat_rm_tree(base), 0, "%s", strerror(errno));
	cr_assert(gone(base));
	close(b);
}

/* a bushy tree, walked with 2 descriptors: every directory once, its
 * contents between its ENTRY and its LEAVE */
static void bush(int dfd, int depth)
{
	if (!depth)
		return;
	for (int i = 0; i < 3; i++) {
		char n[8];
		snprintf(n, sizeof n, "d%d", i);
		cr_assert_eq(mkdirat(dfd, n, 0755), 0);
		int fd = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		touch_at(fd, "f", NULL);
		bush(fd, depth - 1);
		close(fd);
	}
}

struct order {
	char open[64][64];
	size_t n, dirs;
};

static int order_cb(enum moat_walk_event ev, const struct moat_walk_ent *en, void *arg)
{
	struct order *o = arg;
	if (ev == MOAT_WALK_ENTRY && S_ISDIR(en->st->st_mode)) {
		snprintf(o->open[o->n++], 64, "%s", en->path);
		o->dirs++;
	} else if (ev == MOAT_WALK_LEAVE) {
		cr_assert_gt(o->n, 0);
		cr_assert_str_eq(o->open[o->n - 1], en->path);
		o->n--;
	} else {
		/* an entry lies below the innermost open directory */
		cr_assert(o->n == 0 || !strncmp(en->path, o->open[o->n - 1],
						strlen(o->open[o->n - 1])));
	}
	return 0;
}

Test(walk, bushy_tree_in_order_with_two_descriptors)
{
	mkbase();
	int b = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bush(b, 4); /* 3 + 9 + 27 + 81 directories */
	struct order ord = {0};
	struct moat_walk_opt o = {.fn = order_cb, .arg = &ord, .max_fds = 2};
	cr_assert_eq(moat_walk(b, &o, NULL), 0);
	cr_assert_eq(ord.dirs, 120);
	cr_assert_eq(ord.n, 0);
	cr_assert_eq(moat_rm_tree(base), 0);
	cr_assert(gone(base));
	close(b);
}

Test(walk, links_are_never_followed)
{
	mkbase();
	char outside[128], tree[128];
	snprintf(outside, sizeof outside, "%s/outside", base);
	snprintf(tree, sizeof tree, "%s/tree", base);
	cr_assert_eq(mkdir(outside, 0755), 0);
	cr_assert_eq(mkdir(tree, 0755), 0);
	int o = open(outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	touch_at(o, "keep", "host");
	int t = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_eq(mkdirat(t, "a", 0755), 0);
	cr_assert_eq(symlinkat(".", t, "self"), 0);
	cr_assert_eq(symlinkat("..", t, "a/up"), 0);
	cr_assert_eq(symlinkat("loop2", t, "loop1"), 0);
	cr_assert_eq(symlinkat("loop1", t, "loop2"), 0);
	cr_assert_eq(symlinkat(outside, t, "a/out"), 0);
	cr_assert_eq(mkfifoat(t, "a/fifo", 0644), 0);
	struct count c = {0};
	struct moat_walk_opt wo = {.fn = count_cb, .arg = &c};
	cr_assert_eq(moat_walk(t, &wo, NULL), 0);
	cr_assert_eq(c.dirs, 1);
	cr_assert_eq(c.entries, 7);
	/* a mode-000 and a read-only directory: opened up, removed */
	cr_assert_eq(mkdirat(t, "a/locked", 0755), 0);
	touch_at(t, "a/locked/x", NULL);
	cr_assert_eq(fchmodat(t, "a/locked", 0, 0), 0);
	cr_assert_eq(fchmodat(t, "a", 0500, 0), 0);
	cr_assert_eq(moat_rm_tree(tree), 0, "%s", strerror(errno));
	cr_assert(gone(tree));
	struct stat st;
	cr_assert_eq(fstatat(o, "keep", &st, 0), 0, "the file behind a link was removed");
	close(t);
	close(o);
	cr_assert_eq(moat_rm_tree(base), 0);
}

Test(walk, rm_of_a_missing_name_or_a_file)
{
	mkbase();
	int b = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_eq(moat_walk_rm(b, "nothing", 0), 0);
	touch_at(b, "file", "x");
	cr_assert_eq(symlinkat(base, b, "link"), 0);
	cr_assert_eq(moat_walk_rm(b, "file", 0), 0);
	cr_assert_eq(moat_walk_rm(b, "link", 0), 0); /* the link, not the target */
	struct stat st;
	cr_assert_eq(fstat(b, &st), 0);
	cr_assert_eq(fstatat(b, "link", &st, AT_SYMLINK_NOFOLLOW), -1);
	close(b);
	cr_assert_eq(moat_rm_tree(base), 0);
	cr_assert(gone(base));
}

/* A mount inside the tree (made in a private mount namespace of a child,
 * as root): the walk does not enter it, removal leaves it and says EBUSY. */
Test(walk, never_crosses_a_mount)
{
	mkbase();
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(77);
		char m[128], p[160];
		snprintf(m, sizeof m, "%s/m", base);
		if (mkdir(m, 0755) < 0 || mount("tmpfs", m, "tmpfs", 0, "size=1M") < 0)
			_exit(77);
		snprintf(p, sizeof p, "%s/inside", m);
		int fd = open(p, O_WRONLY | O_CREAT, 0644);
		close(fd);
		/* a bind of a directory onto itself: the same device, another
		 * mount */
		snprintf(p, sizeof p, "%s/b", base);
		if (mkdir(p, 0755) < 0 || mount(p, p, NULL, MS_BIND, NULL) < 0)
			_exit(77);
		snprintf(p, sizeof p, "%s/b/inside", base);
		close(open(p, O_WRONLY | O_CREAT, 0644));
		snprintf(p, sizeof p, "%s/plain", base);
		close(open(p, O_WRONLY | O_CREAT, 0644));
		int b = open(base, O_RDONLY | O_DIRECTORY);
		struct count c = {0};
		struct moat_walk_opt o = {.fn = count_cb, .arg = &c};
		if (moat_walk(b, &o, NULL) < 0 || c.entries != 3)
			_exit(1); /* m, b, plain: nothing inside m or b */
		int r = moat_walk_rm(AT_FDCWD, base, 0);
		if (r == 0 || errno != EBUSY)
			_exit(2);
		struct stat st;
		snprintf(p, sizeof p, "%s/m/inside", base);
		if (stat(p, &st) < 0)
			_exit(3);
		snprintf(p, sizeof p, "%s/b/inside", base);
		if (stat(p, &st) < 0)
			_exit(4);
		snprintf(p, sizeof p, "%s/plain", base);
		if (stat(p, &st) == 0)
			_exit(5);
		_exit(0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77) {
		moat_rm_tree(base);
		cr_skip_test("no private mount namespace here (not root)");
	}
	cr_assert_eq(WEXITSTATUS(st), 0, "step %d failed", WEXITSTATUS(st));
	/* the child's mounts went with it: now everything goes */
	cr_assert_eq(moat_rm_tree(base), 0, "%s", strerror(errno));
	cr_assert(gone(base));
}
