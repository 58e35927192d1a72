/* Path resolution without magic links. See resolve.h. */
#define _GNU_SOURCE
#include "resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MAX_LINKS 40 /* the kernel's own limit */

/* The sandbox's /proc, /sys and /dev, whatever is mounted there (a /sys
 * left out of the view may be an empty tmpfs; /dev is a tmpfs). */
static struct {
	dev_t dev;
	ino_t ino;
	bool set;
} kdirs[3];

void fsr_init(void)
{
	static const char *const names[] = {"/proc", "/sys", "/dev"};
	for (int i = 0; i < 3; i++) {
		struct stat st;
		if (stat(names[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			kdirs[i].dev = st.st_dev;
			kdirs[i].ino = st.st_ino;
			kdirs[i].set = true;
		}
	}
}

/* Opened per walk rather than kept: the agent holds no directory. */
static int open_root(void)
{
	return open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
}

static bool refused_st(int fd, const struct stat *st)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return true;
	switch ((uint32_t)sf.f_type) {
	case PROC_SUPER_MAGIC: /* the magic links live here */
	case SYSFS_MAGIC:
	case DEVPTS_SUPER_MAGIC:
	case CGROUP_SUPER_MAGIC:
	case CGROUP2_SUPER_MAGIC:
	case DEBUGFS_MAGIC:
	case TRACEFS_MAGIC:
	case SECURITYFS_MAGIC:
	case SELINUX_MAGIC:
	case SMACK_MAGIC:
	case BPF_FS_MAGIC:
	case NSFS_MAGIC:
	case PSTOREFS_MAGIC:
	case EFIVARFS_MAGIC:
	case BINFMTFS_MAGIC:
	case USBDEVICE_SUPER_MAGIC:
		return true;
	default:
		break;
	}
	for (int i = 0; i < 3; i++)
		if (kdirs[i].set && st->st_dev == kdirs[i].dev && st->st_ino == kdirs[i].ino)
			return true;
	return false;
}

bool fsr_refused(int fd)
{
	struct stat st;
	return fstat(fd, &st) < 0 || refused_st(fd, &st);
}

bool fsr_readonly(int fd)
{
	struct statfs sf;
	return fstatfs(fd, &sf) < 0 || (sf.f_flags & ST_RDONLY);
}

void fsr_done(struct fsr *r)
{
	if (r->dir >= 0)
		close(r->dir);
	r->dir = -1;
}

static int fail(int *cur, int fd, int err)
{
	if (fd >= 0)
		close(fd);
	if (*cur >= 0)
		close(*cur);
	*cur = -1;
	errno = err;
	return -1;
}

static int done(int cur, const char *name, struct fsr *out)
{
	out->dir = cur;
	snprintf(out->name, sizeof out->name, "%s", name);
	return 0;
}

int fsr_walk(int start, const char *path, int flags, struct fsr *out)
{
	/* the rest of the path, in one of two buffers (a link's target
	 * followed by what came after the link goes into the other) */
	char bufs[2][PATH_MAX];
	int which = 0;
	out->dir = -1;
	if (strlen(path) >= PATH_MAX) {
		errno = ENAMETOOLONG;
		return -1;
	}
	snprintf(bufs[0], PATH_MAX, "%s", path);
	char *rest = bufs[0];
	int cur = *rest == '/' || start == FSR_ROOT ? open_root()
						      : fcntl(start, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return -1;
	int links = 0;
	for (;;) {
		while (*rest == '/')
			rest++;
		if (!*rest)
			return done(cur, ".", out);
		char *e = strchrnul(rest, '/');
		size_t n = (size_t)(e - rest);
		if (n > NAME_MAX)
			return fail(&cur, -1, ENAMETOOLONG);
		char comp[NAME_MAX + 1];
		memcpy(comp, rest, n);
		comp[n] = '\0';
		bool slash = *e == '/';
		while (*e == '/')
			e++;
		bool last = !*e;
		rest = e;
		if (!strcmp(comp, ".")) {
			if (last)
				return done(cur, ".", out);
			continue;
		}
		bool dotdot = !strcmp(comp, "..");
		if (last && !slash && !dotdot && !(flags & FSR_FOLLOW))
			return done(cur, comp, out); /* the leaf itself is not followed */
		int fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && !last && (flags & FSR_MKDIRS)) {
			if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
				return fail(&cur, -1, errno);
			fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		}
		if (fd < 0) {
			if (errno == ENOENT && last)
				return done(cur, comp, out);
			return fail(&cur, -1, errno);
		}
		struct stat st;
		if (fstat(fd, &st) < 0)
			return fail(&cur, fd, errno);
		if (refused_st(fd, &st))
			return fail(&cur, fd, EXDEV);
		if (S_ISLNK(st.st_mode)) {
			/* an ordinary link (a magic one is on procfs: refused above) */
			if ((flags & FSR_NOLINKS) || ++links > MAX_LINKS)
				return fail(&cur, fd, ELOOP);
			char t[PATH_MAX];
			ssize_t tl = readlinkat(fd, "", t, sizeof t - 1);
			if (tl <= 0 || tl >= (ssize_t)sizeof t - 1)
				return fail(&cur, fd, tl == 0 ? ENOENT : tl > 0 ? ENAMETOOLONG : errno);
			close(fd);
			t[tl] = '\0';
			char *nb = bufs[which ^ 1];
			if (snprintf(nb, PATH_MAX, "%s%s%s", t, *rest || slash ? "/" : "", rest) >=
			    PATH_MAX)
				return fail(&cur, -1, ENAMETOOLONG);
			which ^= 1;
			rest = nb;
			if (t[0] == '/') {
				close(cur);
				cur = open_root();
				if (cur < 0)
					return -1;
			}
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			close(cur);
			cur = fd;
			if (last)
				return done(cur, ".", out);
			continue;
		}
		if (!last || slash)
			return fail(&cur, fd, ENOTDIR);
		close(fd);
		return done(cur, comp, out);
	}
}
