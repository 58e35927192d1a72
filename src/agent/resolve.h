/* The one path resolver of the agent's API operations (files, list, stat,
 * mkdir, delete, patch, archive pack/unpack, image, exec's cwd).
 *
 * The agent runs as the sandbox and inside its mount view, so a path can
 * only reach the sandbox's own files -- except through a magic link (exe,
 * cwd, root, fd/N, map_files/N of /proc/PID; /proc/self, ...), which the
 * kernel follows to the object itself, wherever it is: /proc/self/exe is
 * the host's moat-agent binary. openat2(RESOLVE_NO_MAGICLINKS) would refuse
 * them, but the sandbox's seccomp filter answers openat2 with ENOSYS (its
 * arguments are out of the filter's reach) and must keep doing so.
 *
 * So the walk is done here, one component at a time with
 * openat(O_PATH|O_NOFOLLOW) from the agent's root (absolute paths) or from
 * a given directory: a symlink is read with readlinkat and continued from
 * the root (absolute target) or the current directory (relative), at most
 * 40 of them (ELOOP); a symlink that lives on procfs or another kernel
 * filesystem is refused, and so is entering one of those filesystems, or
 * the sandbox's /proc, /sys or /dev, at all (EXDEV). ".." is the kernel's
 * (physical, and it stops at the root). The caller opens the leaf itself,
 * relative to the returned directory and with O_NOFOLLOW, so a link
 * swapped in meanwhile fails (ELOOP) instead of being followed. */
#ifndef MOAT_AGENT_RESOLVE_H
#define MOAT_AGENT_RESOLVE_H

#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>

#define FSR_FOLLOW 1  /* follow a symlink at the last component too */
#define FSR_MKDIRS 2  /* create missing directories before the last one (0755) */
#define FSR_NOLINKS 4 /* no symlink anywhere on the way (ELOOP) */

/* A resolved path: the leaf `name` inside the directory `dir` (an O_PATH
 * descriptor); name is "." when the path names a directory that was
 * entered (the root, a followed link to a directory, a trailing ".."). The
 * leaf itself may not exist. */
struct fsr {
	int dir;
	char name[NAME_MAX + 1];
};

/* Learn /proc, /sys and /dev (call once, at start). */
void fsr_init(void);
/* `start` of fsr_walk: the agent's root directory. */
#define FSR_ROOT (-100000)
/* Resolve path (absolute: from the root; else from `start`). 0 with *out
 * filled (fsr_done releases it), or -1 with errno: EXDEV for a magic link
 * or a kernel filesystem on the way, ELOOP, ENOENT, ENOTDIR, ... */
int fsr_walk(int start, const char *path, int flags, struct fsr *out);
void fsr_done(struct fsr *r);
/* fd (any kind, O_PATH too) is on a kernel filesystem, or is the sandbox's
 * /proc, /sys or /dev (or cannot be told: fail closed). */
bool fsr_refused(int fd);
/* fd is on a read-only mount (the engine's protection of a name). */
bool fsr_readonly(int fd);

#endif
