/* apply_patch: parse patches in the Codex / OpenAI Agents SDK format
 * ("*** Begin Patch" ... "*** End Patch") or unified diffs (git diff,
 * diff -u: the same sections, exact) and compute updated file contents.
 * Pure code: no I/O, so the caller validates paths, reads and writes files,
 * and can check every section before changing anything (all or nothing). */
#ifndef MOAT_PATCH_H
#define MOAT_PATCH_H

#include <stdbool.h>
#include <stddef.h>

#include <moat/err.h>

#define MOAT_PATCH_MAX_LEN (16u << 20) /* whole patch text */
#define MOAT_PATCH_MAX_LINE (1u << 20) /* one line of it */

enum moat_patch_kind { MOAT_PATCH_ADD, MOAT_PATCH_DELETE, MOAT_PATCH_UPDATE };

struct moat_patch_hunk; /* private to patch.c */

struct moat_patch_file {
	enum moat_patch_kind kind;
	char *path;    /* as written after "*** Add File: " etc. (trimmed) */
	char *move_to; /* UPDATE with "*** Move to: ", else NULL */
	char *content; /* ADD: each '+' line + "\n" (NUL-terminated); else NULL */
	size_t content_len;
	/* UPDATE: the hunks, in a private representation */
	struct moat_patch_hunk *hunks;
	size_t nhunks;
	size_t line; /* patch line of the section's "*** ... File:" header */
	/* From a unified diff: hunks at their line numbers (an offset allowed,
	 * no fuzz), context compared exactly, line ends kept as written; an
	 * ADD must not overwrite a file, a DELETE's hunks must match the
	 * whole file (the caller applies them and expects nothing left). */
	bool exact;
	unsigned mode; /* 0644 or 0755 from the diff's mode lines; 0: keep / default */
};

struct moat_patch {
	struct moat_patch_file *files;
	size_t n;
};

/* Parse the whole patch text: apply_patch when its first line is
 * "*** Begin Patch", else a unified diff. Errors (MOAT_E_USAGE) name the
 * line number (and for a diff the file) and quote the offending line. On
 * failure *out is left empty ({NULL, 0}). */
int moat_patch_parse(const char *text, size_t len, struct moat_patch *out,
		     struct moat_err *e);

/* Compute the new content of an UPDATE file from its old content. Lines are
 * matched like Codex: exactly, then ignoring trailing whitespace, then
 * leading and trailing whitespace, then with Unicode dashes/quotes/spaces
 * folded to ASCII. Context lines keep the file's text; CRLF files stay CRLF;
 * the result ends with a newline unless it is empty; an update with no
 * hunks (a pure Move to) keeps the bytes exactly. *out is malloc'd and
 * NUL-terminated (not counted in *out_len). On failure e says
 * "<path>: could not find context ..." quoting the lines that did not match,
 * and *out is not touched. An exact section (a unified diff's, also a
 * DELETE) is applied as its hunks' line numbers say, nothing loosened; a
 * hunk that does not match says "<path>: hunk N (@@ ... @@ at patch line
 * L) does not match ...". */
int moat_patch_apply(const struct moat_patch_file *f, const char *old,
		     size_t old_len, char **out, size_t *out_len,
		     struct moat_err *e);

void moat_patch_free(struct moat_patch *p);

#endif
