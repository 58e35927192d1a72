/* Unit tests for the agent's path resolver (src/agent/resolve.c), on the
 * host: magic links refused, ordinary links followed, the link limit,
 * directories made on the way, no link where none may be. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "agent/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[64];
static int tfd = -1;

static void setup(void)
{
	fsr_init();
	snprintf(tmp, sizeof tmp, "/tmp/moat-unit-resolve-XXXXXX");
	cr_assert(mkdtemp(tmp));
	tfd = open(tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cr_assert(tfd >= 0);
	cr_assert(mkdirat(tfd, "nd", 0755) == 0);
	int f = openat(tfd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	cr_assert(f >= 0);
	close(f);
	cr_assert(symlinkat("/proc/self/exe", tfd, "exe") == 0);
	cr_assert(symlinkat("/proc/self", tfd, "self") == 0);
	cr_assert(symlinkat("/proc/1/root", tfd, "root1") == 0);
	cr_assert(symlinkat("/dev/fd/0", tfd, "fd0") == 0);
	cr_assert(symlinkat("../exe", tfd, "nd/hop") == 0);
	cr_assert(symlinkat("nd/hop", tfd, "chain") == 0);
	cr_assert(symlinkat("f", tfd, "l") == 0);
	cr_assert(symlinkat("nd", tfd, "ld") == 0);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
	cr_assert(system(cmd) == 0);
	close(tfd);
}

TestSuite(resolve, .init = setup, .fini = teardown);

static int walk_err(const char *path, int flags)
{
	struct fsr r;
	errno = 0;
	int rc = fsr_walk(tfd, path, flags, &r);
	if (rc == 0) {
		fsr_done(&r);
		return 0;
	}
	cr_assert_eq(r.dir, -1);
	return errno;
}

static void same_dir(int fd, const char *rel)
{
	struct stat a, b;
	cr_assert(fstat(fd, &a) == 0);
	cr_assert(fstatat(tfd, rel, &b, 0) == 0);
	cr_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino, "not %s", rel);
}

Test(resolve, magic_links_refused)
{
	const char *const paths[] = {"exe", "self/exe", "self", "root1", "root1/etc",
				     "chain", "nd/hop", "fd0", "self/fd/0", "ld/../exe",
				     "/proc/self/exe", "/proc", "/sys/kernel", "/dev/null",
				     "nd/../self/cwd", NULL};
	for (int i = 0; paths[i]; i++)
		cr_expect_eq(walk_err(paths[i], FSR_FOLLOW), EXDEV, "%s", paths[i]);
	/* through them, also without following the leaf */
	cr_expect_eq(walk_err("self/exe", 0), EXDEV);
	cr_expect_eq(walk_err("root1/tmp/x", FSR_MKDIRS), EXDEV);
	cr_expect_eq(walk_err("/proc/self/root/x", 0), EXDEV);
}

Test(resolve, leaf_link_not_followed_unless_asked)
{
	struct fsr r;
	cr_assert(fsr_walk(tfd, "exe", 0, &r) == 0);
	cr_expect_str_eq(r.name, "exe");
	same_dir(r.dir, ".");
	fsr_done(&r);
	cr_assert(fsr_walk(tfd, "l", FSR_FOLLOW, &r) == 0);
	cr_expect_str_eq(r.name, "f");
	same_dir(r.dir, ".");
	fsr_done(&r);
	cr_assert(fsr_walk(tfd, "ld", FSR_FOLLOW, &r) == 0);
	cr_expect_str_eq(r.name, ".");
	same_dir(r.dir, "nd");
	fsr_done(&r);
	/* an absolute link starts again from the root */
	char t[128];
	snprintf(t, sizeof t, "%s/f", tmp);
	cr_assert(symlinkat(t, tfd, "abs") == 0);
	cr_assert(fsr_walk(tfd, "abs", FSR_FOLLOW, &r) == 0);
	cr_expect_str_eq(r.name, "f");
	same_dir(r.dir, ".");
	fsr_done(&r);
	cr_assert(fsr_walk(tfd, "nd/..", 0, &r) == 0);
	cr_expect_str_eq(r.name, ".");
	same_dir(r.dir, ".");
	fsr_done(&r);
}

Test(resolve, link_limit)
{
	/* c0 -> f, c1 -> c0, ... : 40 links are followed, 41 are not */
	char name[16], target[16];
	cr_assert(symlinkat("f", tfd, "c0") == 0);
	for (int i = 1; i <= 40; i++) {
		snprintf(name, sizeof name, "c%d", i);
		snprintf(target, sizeof target, "c%d", i - 1);
		cr_assert(symlinkat(target, tfd, name) == 0);
	}
	cr_expect_eq(walk_err("c39", FSR_FOLLOW), 0);
	cr_expect_eq(walk_err("c40", FSR_FOLLOW), ELOOP);
	cr_assert(symlinkat("loop2", tfd, "loop1") == 0);
	cr_assert(symlinkat("loop1", tfd, "loop2") == 0);
	cr_expect_eq(walk_err("loop1", FSR_FOLLOW), ELOOP);
}

Test(resolve, mkdirs_and_nolinks)
{
	struct fsr r;
	cr_assert(fsr_walk(tfd, "n1/n2/leaf", FSR_MKDIRS, &r) == 0);
	cr_expect_str_eq(r.name, "leaf");
	same_dir(r.dir, "n1/n2");
	fsr_done(&r);
	struct stat st;
	cr_expect(fstatat(tfd, "n1/n2/leaf", &st, 0) < 0 && errno == ENOENT);
	cr_expect_eq(walk_err("ld/x", FSR_NOLINKS), ELOOP);
	cr_expect_eq(walk_err("ld/x", 0), 0);
	cr_expect_eq(walk_err("l", FSR_NOLINKS), 0); /* the leaf is not followed */
	cr_expect_eq(walk_err("f/x", 0), ENOTDIR);
	cr_expect_eq(walk_err("missing/x", 0), ENOENT);
	cr_expect_eq(walk_err("missing", FSR_FOLLOW), 0);
}
