/* Small shared helpers: string vectors, size/number parsing, paths, files.
 * Functions that can fail return 0 / -1 and fill a struct moat_err. */
#ifndef MOAT_UTIL_H
#define MOAT_UTIL_H

#include <moat/err.h>
#include <moat/strv.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parse "512M", "2G", "1048576", "1.5G" (binary units K/M/G/T, optional
 * trailing "B"/"iB"). Zero and overflow are errors. */
int moat_parse_size(const char *s, uint64_t *out, struct moat_err *e);

/* Parse a positive decimal (fractions allowed), e.g. "1.5" -> 1500 when
 * scale = 1000. Rejects 0, negatives, junk and values over max (scaled). */
int moat_parse_scaled(const char *s, uint64_t scale, uint64_t max,
		      uint64_t *out, struct moat_err *e);

/* Round a non-negative double to the nearest integer (no libm needed). */
static inline uint64_t moat_round_u64(double x)
{
	return (uint64_t)(x + 0.5);
}

/* Parse a positive integer in [1, max]. */
int moat_parse_uint(const char *s, uint64_t max, uint64_t *out,
		    struct moat_err *e);

/* Make `p` absolute: "~" and "~/x" expand against home, relative paths
 * against base. Result is lexically normalised ("." "..", "//" removed)
 * but symlinks are not resolved. Returns a malloc'd string or NULL. */
char *moat_path_absolute(const char *p, const char *base, const char *home,
			 struct moat_err *e);

/* Lexically normalise an absolute path in place. */
void moat_path_normalize(char *p);

/* true when `path` equals `dir` or lies below it (lexical, normalised). */
bool moat_path_within(const char *path, const char *dir);

/* Quote untrusted bytes for a one-line message: at most MOAT_SHOWN bytes
 * of p, non-printables, '"' and '\\' as \\xNN, "..." when cut. out needs
 * MOAT_SHOWN_CAP bytes. Returns out. */
#define MOAT_SHOWN 200
#define MOAT_SHOWN_CAP (MOAT_SHOWN * 4 + 4)
const char *moat_show(char *out, const char *p, size_t len);

/* malloc'd printf; aborts on OOM (only used for small strings). */
char *moat_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Write the whole string to a file (O_WRONLY, no create). */
int moat_write_file(const char *path, const char *s, struct moat_err *e);

/* write(2) all of buf to fd, retrying short writes and EINTR; 0 or -1. */
int moat_write_all(int fd, const void *buf, size_t len);

/* rm -rf of a directory of ours (walk.c: through directory descriptors,
 * any depth, no symlink followed, no mount crossed); directories made
 * unreadable (mode 000) or read-only inside are opened up first (we own
 * them). Removes all it can; 0 when it is gone, -1 with errno if not. */
int moat_rm_tree(const char *dir);

/* Read up to cap-1 bytes of a file into buf (NUL-terminated). */
int moat_read_file(const char *path, char *buf, size_t cap, struct moat_err *e);

#endif
