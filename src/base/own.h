/* Files and directories of our own on the host (the daemon's store, logs,
 * sockets' directories, moat run's outputs): opened without following a
 * symlink, refused when another user owns them, and given exactly the mode
 * asked for, whatever the umask or an older version left. */
#ifndef MOAT_OWN_H
#define MOAT_OWN_H

#include <moat/err.h>

#include <sys/types.h>

/* The regular file `name` under dirfd, made with `mode` when missing (if
 * flags hold O_CREAT). flags: O_RDONLY/O_WRONLY/O_RDWR, O_APPEND, O_CREAT;
 * O_NOFOLLOW and O_CLOEXEC are always added. Returns the fd or -1. */
int moat_own_file(int dirfd, const char *name, int flags, mode_t mode, struct moat_err *e);

/* Tighten an existing file of ours to `mode`; a missing one is fine. */
int moat_own_tighten(int dirfd, const char *name, mode_t mode, struct moat_err *e);

/* The directory `name` under dirfd, made with `mode` when missing, not
 * through a symlink, ours, set to `mode`. Returns an O_DIRECTORY fd or -1. */
int moat_own_dir(int dirfd, const char *name, mode_t mode, struct moat_err *e);

#endif
