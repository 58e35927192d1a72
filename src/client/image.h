/* Internals of `moat image` shared by its files (image.c: ls, inspect,
 * rm and the dispatch; image_pull.c: pull and import; tardir.c: a
 * directory streamed as a tar). */
#ifndef MOAT_CLIENT_IMAGE_H
#define MOAT_CLIENT_IMAGE_H

#include <moat/err.h>

#include <stddef.h>
#include <sys/types.h>

/* moat image pull / import: argv[0] is the subcommand; exit status. */
int image_pull(int argc, char **argv);
int image_import(int argc, char **argv);

/* n bytes as "512 B", "1.5 MB" (powers of 1000) into buf. */
void image_size_text(long long n, char *buf, size_t len);

/* Start a child process writing the directory dir as a tar (pax, names
 * relative to dir, regular files, directories and symlinks only) to a
 * pipe. *fd: its read end (the caller closes it), *pid: the child, for
 * tardir_wait. -1 (e filled) when dir cannot be opened or forking fails. */
int tardir_start(const char *dir, int *fd, pid_t *pid, struct moat_err *e);
/* Reap the child; -1 (e filled, naming dir) unless it wrote the whole tar. */
int tardir_wait(pid_t pid, const char *dir, struct moat_err *e);

#endif
