/* libFuzzer target: policy files (--policy, docs/policy.md) and Anthropic
 * sandbox-runtime settings (--srt-settings), src/policy/policy_json.c. The
 * first byte picks the kind (bit 0) and whether a second document is
 * loaded over the first (bit 1: sources stack) and the environment built
 * (bit 2); the rest is the JSON, and a second document after a NUL. Checks
 * that a refusal says why and leaves the policy as it was, and that every
 * path taken in is absolute. Reads the host (stat) but writes nothing. */
#include <moat/policy.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void paths_absolute(const struct moat_strv *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i][0] != '/')
			abort();
}

static void load(struct moat_policy *p, const char *json, bool srt)
{
	struct moat_err e = {0};
	size_t before[4] = {p->allow_read.n, p->deny_read.n, p->allow_write.n, p->deny_write.n};
	int rc = srt ? moat_policy_load_srt_string(p, json, "fuzz.json", "/nonexistent-cwd",
						   "/nonexistent-home", &e)
		     : moat_policy_load_json_string(p, json, "fuzz.json", "/nonexistent-cwd",
						    "/nonexistent-home", &e);
	if (rc < 0) {
		if (!e.msg[0])
			abort();
		size_t after[4] = {p->allow_read.n, p->deny_read.n, p->allow_write.n,
				   p->deny_write.n};
		if (memcmp(before, after, sizeof before) != 0)
			abort(); /* nothing half-applied */
	}
	paths_absolute(&p->allow_read);
	paths_absolute(&p->deny_read);
	paths_absolute(&p->allow_write);
	paths_absolute(&p->deny_write);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	char *s = malloc(size + 1);
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	size_t first = strlen(s);
	struct moat_policy p;
	moat_policy_init(&p);
	load(&p, s, data[0] & 1);
	if ((data[0] & 2) && first + 1 < size - 1)
		load(&p, s + first + 1, !(data[0] & 1));
	if (data[0] & 4) {
		char *caller[] = {"PATH=/usr/bin:/bin", "TERM=xterm", "LANG=C.UTF-8",
				  "SECRET=x", "LC_ALL=C", NULL};
		struct moat_strv env = {0};
		struct moat_err e = {0};
		if (moat_policy_build_env(&p, caller, "/home/sandbox", &env, &e) == 0)
			for (size_t i = 0; i < env.n; i++)
				if (!strchr(env.v[i], '='))
					abort();
		moat_strv_free(&env);
	}
	moat_policy_free(&p);
	free(s);
	return 0;
}
