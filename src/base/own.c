/* Files of our own: see own.h. Everything goes through one descriptor, so
 * the check and the chmod apply to the same inode (no chmod by name that a
 * symlink swapped in between could redirect). */
#define _GNU_SOURCE
#include "own.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* fd is ours and of type `type`: give it `mode`. Closes fd on failure. */
static int claim(int fd, const char *name, mode_t type, mode_t mode, struct moat_err *e)
{
	struct stat st;
	int rc = -1;
	if (fstat(fd, &st) < 0)
		moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", name);
	else if ((st.st_mode & S_IFMT) != type)
		moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: not a %s", name,
			     type == S_IFDIR ? "directory" : "regular file");
	else if (st.st_uid != geteuid())
		moat_err_set(e, MOAT_E_SYSTEM, 0,
			     "%s: owned by uid %u, not by moat's user (uid %u): refusing to use it",
			     name, (unsigned)st.st_uid, (unsigned)geteuid());
	else if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)
		moat_err_set(e, MOAT_E_SYSTEM, errno, "%s: set mode %04o", name, (unsigned)mode);
	else
		rc = 0;
	if (rc < 0)
		close(fd);
	return rc < 0 ? -1 : fd;
}

static int opened(int fd, const char *name, struct moat_err *e)
{
	if (fd >= 0)
		return fd;
	if (errno == ELOOP)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "%s: is a symlink: refusing to follow it",
				    name);
	return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", name);
}

int moat_own_file(int dirfd, const char *name, int flags, mode_t mode, struct moat_err *e)
{
	/* O_NONBLOCK: a FIFO planted at the name must not block the open */
	int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
	if (opened(fd, name, e) < 0)
		return -1;
	if (claim(fd, name, S_IFREG, mode, e) < 0)
		return -1;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", name);
		close(fd);
		return -1;
	}
	return fd;
}

int moat_own_tighten(int dirfd, const char *name, mode_t mode, struct moat_err *e)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (opened(fd, name, e) < 0 || claim(fd, name, S_IFREG, mode, e) < 0)
		return -1;
	close(fd);
	return 0;
}

int moat_own_dir(int dirfd, const char *name, mode_t mode, struct moat_err *e)
{
	if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", name);
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOTDIR) {
		/* O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR: tell which */
		struct stat st;
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
			errno = ELOOP;
		else
			errno = ENOTDIR;
	}
	if (opened(fd, name, e) < 0)
		return -1;
	return claim(fd, name, S_IFDIR, mode, e);
}
