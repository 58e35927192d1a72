/* moat's own binaries, found from the running one. In the build tree they
 * sit side by side (build/moat, build/moat-serve, ...); installed, `moat` is
 * in PREFIX/bin and the others in PREFIX/libexec/moat (see the Makefile's
 * install target and docs/ARCHITECTURE.md). */
#ifndef MOAT_EXE_H
#define MOAT_EXE_H

#include <moat/err.h>

#include <stddef.h>

/* The path of moat's binary `name` (e.g. "moat-client", "moat"), found
 * from /proc/self/exe's directory D: D/name if executable, else
 * D/../libexec/moat/name (moat in bin finding a helper), or, when D is a
 * .../libexec/moat, D/../../bin/name (a helper finding moat); normalised. Fills out (cap bytes) and returns 0; when none is there,
 * -1 with an error listing every place it looked. */
int moat_exe_find(const char *name, char *out, size_t cap, struct moat_err *e);

#endif
