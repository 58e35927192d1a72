/* The names of uids and gids, from the text of a passwd(5) or group(5)
 * file: the sandbox's own /etc/passwd and /etc/group, which the sandbox
 * (or its image) wrote. Pure; fuzzed (tests/fuzz/fuzz_idnames.c). */
#ifndef MOAT_AGENT_IDNAMES_H
#define MOAT_AGENT_IDNAMES_H

#include <stddef.h>

#define IDNAME_MAX 32 /* useradd's limit */

struct idname {
	unsigned id;
	char name[IDNAME_MAX + 1]; /* NUL-terminated, valid UTF-8 ('?' for bad bytes) */
};

/* Lines "name:x:id:..." of buf (len bytes, no NUL needed) into v, at most
 * cap of them, in file order; a line without a name, with a name longer
 * than IDNAME_MAX or a NUL or an id that is not a decimal number up to
 * UINT_MAX is skipped. Returns how many were stored. */
size_t idnames_parse(const char *buf, size_t len, struct idname *v, size_t cap);

#endif
