/* The end of a tool's stderr, for the error that reports its failure (git
 * for a manifest's clone, newuidmap): the cause is in the tool's words, not
 * only "git checkout failed". Part of that text may come from whatever the
 * tool read (a repository, a server), so it is bounded and escaped: no
 * control byte, terminal escape or invalid UTF-8 reaches a JSON message,
 * a log or a terminal. */
#ifndef MOAT_BASE_TOOLTAIL_H
#define MOAT_BASE_TOOLTAIL_H

#include <stddef.h>

#define MOAT_TAIL_LINES 5   /* the last lines kept */
#define MOAT_TAIL_MAX 600   /* bytes of the quoted result (fits a struct moat_err) */
#define MOAT_TAIL_KEEP 4096 /* bytes of the stream kept while reading it */

/* Quote the end of buf (len bytes) into out (cap bytes, at most
 * MOAT_TAIL_MAX used): its last MOAT_TAIL_LINES non-blank lines, joined
 * with " | ", "... | " first when lines were left out. Control bytes
 * become \t, \r, \xNN; a backslash \\; invalid UTF-8 \xNN; C1 controls
 * and bidirectional overrides \uNNNN. A line cut at the bound ends in
 * "...". out is "" when nothing was written. */
void moat_tail_quote(const char *buf, size_t len, char *out, size_t cap);

/* Read fd to its end (EINTR retried), keeping the last MOAT_TAIL_KEEP
 * bytes, and quote them into out as above. 0, or -1 with errno on a read
 * error (out then quotes what was read). */
int moat_tail_read(int fd, char *out, size_t cap);

#endif
