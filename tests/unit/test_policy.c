/* Unit tests for src/policy: defaults, presets, native JSON and srt policy
 * files, environment building and finalize() validation. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <moat/err.h>
#include <moat/policy.h>
#include <moat/strv.h>
#include "base/util.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define assert_has(hay, needle)                                                \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))
#define assert_hasnt(hay, needle)                                              \
	cr_assert(strstr((hay), (needle)) == NULL,                             \
		  "did not expect \"%s\" in \"%s\"", (needle), (hay))
#define assert_in(sv, s)                                                       \
	cr_assert(moat_strv_contains((sv), (s)), "\"%s\" missing from %s", (s), \
		  #sv)
#define assert_not_in(sv, s)                                                   \
	cr_assert(!moat_strv_contains((sv), (s)), "\"%s\" unexpected in %s", \
		  (s), #sv)

#define CWD "/work/cwd"
#define HOME "/home/tester"

/* ---- helpers -------------------------------------------------------------- */

static int rm_cb(const char *path, const struct stat *st, int flag,
		 struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* A fresh, realpath'd temporary directory; remove with tmp_rm(). */
static char *tmp_dir(void)
{
	char t[] = "/tmp/moat-ut-XXXXXX";
	cr_assert_not_null(mkdtemp(t), "mkdtemp: %s", strerror(errno));
	char *r = realpath(t, NULL);
	cr_assert_not_null(r);
	return r;
}

static void tmp_rm(char *dir)
{
	nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
}

static char *mkdir_in(const char *base, const char *rel)
{
	char *p = moat_strdupf("%s/%s", base, rel);
	cr_assert_eq(mkdir(p, 0755), 0, "mkdir %s: %s", p, strerror(errno));
	return p;
}

static char *touch_in(const char *base, const char *rel)
{
	char *p = moat_strdupf("%s/%s", base, rel);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f, "create %s", p);
	fclose(f);
	return p;
}

static char *symlink_in(const char *base, const char *rel, const char *target)
{
	char *p = moat_strdupf("%s/%s", base, rel);
	cr_assert_eq(symlink(target, p), 0, "symlink %s: %s", p, strerror(errno));
	return p;
}

static void strv_copy(struct moat_strv *dst, const struct moat_strv *src)
{
	for (size_t i = 0; i < src->n; i++)
		moat_strv_add(dst, src->v[i]);
}

static void policy_copy(struct moat_policy *dst, const struct moat_policy *src)
{
	*dst = *src;
	dst->workspace = src->workspace ? strdup(src->workspace) : NULL;
	struct moat_strv *d[] = {&dst->allow_read, &dst->deny_read, &dst->allow_write,
				 &dst->deny_write, &dst->net_allow, &dst->net_deny,
				 &dst->env, &dst->warnings, &dst->hidden, &dst->origins};
	const struct moat_strv *s[] = {&src->allow_read, &src->deny_read,
				       &src->allow_write, &src->deny_write,
				       &src->net_allow, &src->net_deny,
				       &src->env, &src->warnings, &src->hidden,
				       &src->origins};
	for (size_t i = 0; i < sizeof d / sizeof *d; i++) {
		memset(d[i], 0, sizeof *d[i]);
		strv_copy(d[i], s[i]);
	}
}

static void assert_strv_eq(const struct moat_strv *a, const struct moat_strv *b,
			   const char *what)
{
	cr_assert_eq(a->n, b->n, "%s: %zu entries vs %zu", what, a->n, b->n);
	for (size_t i = 0; i < a->n; i++)
		cr_assert_str_eq(a->v[i], b->v[i], "%s[%zu]", what, i);
}

static void assert_policy_eq(const struct moat_policy *a, const struct moat_policy *b)
{
	if (a->workspace || b->workspace) {
		cr_assert(a->workspace && b->workspace, "workspace set on one side");
		cr_assert_str_eq(a->workspace, b->workspace);
	}
	cr_assert_eq(a->workspace_write, b->workspace_write);
	cr_assert_eq(a->fs_base, b->fs_base);
	cr_assert_eq(a->net, b->net);
	cr_assert_eq(a->memory, b->memory);
	cr_assert_eq(a->pids, b->pids);
	cr_assert_eq(a->cpu_milli, b->cpu_milli);
	cr_assert_eq(a->timeout_ms, b->timeout_ms);
	cr_assert_eq(a->allow_degraded, b->allow_degraded);
	cr_assert_eq(a->finalized, b->finalized);
	assert_strv_eq(&a->allow_read, &b->allow_read, "allow_read");
	assert_strv_eq(&a->deny_read, &b->deny_read, "deny_read");
	assert_strv_eq(&a->allow_write, &b->allow_write, "allow_write");
	assert_strv_eq(&a->deny_write, &b->deny_write, "deny_write");
	assert_strv_eq(&a->net_allow, &b->net_allow, "net_allow");
	assert_strv_eq(&a->net_deny, &b->net_deny, "net_deny");
	assert_strv_eq(&a->env, &b->env, "env");
	assert_strv_eq(&a->warnings, &b->warnings, "warnings");
}

static int load_native(struct moat_policy *p, const char *json, struct moat_err *e)
{
	return moat_policy_load_json_string(p, json, "pol.json", CWD, HOME, e);
}

static int load_srt(struct moat_policy *p, const char *json, struct moat_err *e)
{
	return moat_policy_load_srt_string(p, json, "srt.json", CWD, HOME, e);
}

/* Load must fail; the message must name the file and each of the needles. */
static void native_fails(const char *json, const char *needle)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, json, &e), -1, "accepted: %s", json);
	cr_assert_eq(e.kind, MOAT_E_USAGE, "%s", json);
	cr_assert_eq(strncmp(e.msg, "pol.json", 8), 0, "no file name: %s", e.msg);
	assert_has(e.msg, needle);
	moat_policy_free(&p);
}

static void srt_fails(const char *json, const char *needle)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_srt(&p, json, &e), -1, "accepted: %s", json);
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	cr_assert_eq(strncmp(e.msg, "srt.json", 8), 0, "no file name: %s", e.msg);
	assert_has(e.msg, needle);
	moat_policy_free(&p);
}

static const char *env_get(const struct moat_strv *env, const char *name)
{
	size_t n = strlen(name);
	const char *found = NULL;
	for (size_t i = 0; i < env->n; i++)
		if (strncmp(env->v[i], name, n) == 0 && env->v[i][n] == '=') {
			cr_assert_null(found, "%s set twice", name);
			found = env->v[i] + n + 1;
		}
	return found;
}

/* ---- defaults and modes ----------------------------------------------------- */

Test(policy, defaults)
{
	struct moat_policy p;
	memset(&p, 0xa5, sizeof p);
	moat_policy_init(&p);
	cr_assert_null(p.workspace);
	cr_assert(p.workspace_write);
	cr_assert_eq(p.fs_base, MOAT_FS_SYSTEM);
	cr_assert_eq(p.net, MOAT_NET_NONE);
	struct moat_strv *lists[] = {&p.allow_read, &p.deny_read, &p.allow_write,
				     &p.deny_write, &p.net_allow, &p.net_deny,
				     &p.env, &p.warnings};
	for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
		cr_assert_eq(lists[i]->n, 0, "list %zu not empty", i);
		cr_assert_null(lists[i]->v);
	}
	cr_assert_eq(p.memory, 0);
	cr_assert_eq(p.pids, 0);
	cr_assert_eq(p.cpu_milli, 0);
	cr_assert_eq(p.timeout_ms, 0);
	cr_assert_not(p.allow_degraded);
	cr_assert_not(p.finalized);
	moat_policy_free(&p);
}

Test(policy, free_resets)
{
	struct moat_policy p;
	moat_policy_init(&p);
	p.workspace = strdup("/x");
	moat_strv_add(&p.allow_read, "/a");
	moat_strv_add(&p.env, "A=1");
	moat_strv_add(&p.warnings, "w");
	moat_policy_free(&p);
	cr_assert_null(p.workspace);
	cr_assert_eq(p.allow_read.n, 0);
	cr_assert_null(p.env.v);
	moat_policy_free(&p); /* twice is harmless */
}

Test(policy, mode_read_only)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	p.net = MOAT_NET_HOST;
	cr_assert_eq(moat_policy_set_mode(&p, "read-only", &e), 0);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_READ);
	cr_assert_not(p.workspace_write);
	cr_assert_eq(p.net, MOAT_NET_NONE);
	moat_policy_free(&p);
}

Test(policy, mode_workspace_write)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	p.workspace_write = false;
	p.net = MOAT_NET_HOST;
	cr_assert_eq(moat_policy_set_mode(&p, "workspace-write", &e), 0);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_READ);
	cr_assert(p.workspace_write);
	cr_assert_eq(p.net, MOAT_NET_NONE);
	moat_policy_free(&p);
}

Test(policy, mode_danger_full_access)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_set_mode(&p, "read-only", &e), 0);
	cr_assert_eq(moat_policy_set_mode(&p, "danger-full-access", &e), 0);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_WRITE);
	cr_assert(p.workspace_write);
	cr_assert_eq(p.net, MOAT_NET_HOST);
	moat_policy_free(&p);
}

Test(policy, mode_bogus)
{
	static const char *const bad[] = {"bogus", "", "READ-ONLY", "read-only ",
					  "workspace_write", NULL};
	for (size_t i = 0; bad[i]; i++) {
		struct moat_policy p;
		moat_policy_init(&p);
		struct moat_err e = {0};
		cr_assert_eq(moat_policy_set_mode(&p, bad[i], &e), -1, "'%s'", bad[i]);
		cr_assert_eq(e.kind, MOAT_E_USAGE);
		char q[64];
		snprintf(q, sizeof q, "'%s'", bad[i]);
		assert_has(e.msg, q);
		assert_has(e.msg, "danger-full-access");
		/* unchanged */
		cr_assert_eq(p.fs_base, MOAT_FS_SYSTEM);
		cr_assert(p.workspace_write);
		cr_assert_eq(p.net, MOAT_NET_NONE);
		moat_policy_free(&p);
	}
}

/* ---- native JSON ------------------------------------------------------------ */

static const char full_policy[] =
	"{\n"
	"  \"mode\": \"read-only\",\n"
	"  \"workspace\": \"proj\",\n"
	"  \"filesystem\": {\n"
	"    \"allow_read\": [\"/opt/data\", \"~/.cache\", \"rel/dir\"],\n"
	"    \"deny_read\": [\"/opt/data/secret\"],\n"
	"    \"allow_write\": [\"/var/tmp/out\", \"~/build\"],\n"
	"    \"deny_write\": [\"/var/tmp/out/keep\", \"./x/../y\"],\n"
	"    \"workspace_write\": true\n"
	"  },\n"
	"  \"network\": {\n"
	"    \"mode\": \"host\",\n"
	"    \"allow\": [\"example.com\", \"*.github.com\"],\n"
	"    \"deny\": [\"evil.example.com\"]\n"
	"  },\n"
	"  \"limits\": {\"memory\": \"512M\", \"pids\": 128, \"cpus\": 1.5, \"timeout\": 30},\n"
	"  \"env\": [\"FOO=bar\", \"EDITOR\", \"EMPTY=\"],\n"
	"  \"allow_degraded\": true\n"
	"}\n";

Test(json, full_policy_every_field)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, full_policy, &e), 0, "%s", e.msg);

	cr_assert_str_eq(p.workspace, CWD "/proj");
	/* "mode": read-only then filesystem.workspace_write wins */
	cr_assert(p.workspace_write);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_READ);

	cr_assert_eq(p.allow_read.n, 3);
	cr_assert_str_eq(p.allow_read.v[0], "/opt/data");
	cr_assert_str_eq(p.allow_read.v[1], HOME "/.cache");
	cr_assert_str_eq(p.allow_read.v[2], CWD "/rel/dir");
	cr_assert_eq(p.deny_read.n, 1);
	cr_assert_str_eq(p.deny_read.v[0], "/opt/data/secret");
	cr_assert_eq(p.allow_write.n, 2);
	cr_assert_str_eq(p.allow_write.v[0], "/var/tmp/out");
	cr_assert_str_eq(p.allow_write.v[1], HOME "/build");
	cr_assert_eq(p.deny_write.n, 2);
	cr_assert_str_eq(p.deny_write.v[0], "/var/tmp/out/keep");
	cr_assert_str_eq(p.deny_write.v[1], CWD "/y");

	cr_assert_eq(p.net, MOAT_NET_HOST);
	cr_assert_eq(p.net_allow.n, 2);
	cr_assert_str_eq(p.net_allow.v[0], "example.com");
	cr_assert_str_eq(p.net_allow.v[1], "*.github.com");
	cr_assert_eq(p.net_deny.n, 1);
	cr_assert_str_eq(p.net_deny.v[0], "evil.example.com");

	cr_assert_eq(p.memory, 512ULL << 20);
	cr_assert_eq(p.pids, 128);
	cr_assert_eq(p.cpu_milli, 1500);
	cr_assert_eq(p.timeout_ms, 30000);

	cr_assert_eq(p.env.n, 3);
	cr_assert_str_eq(p.env.v[0], "FOO=bar");
	cr_assert_str_eq(p.env.v[1], "EDITOR");
	cr_assert_str_eq(p.env.v[2], "EMPTY=");
	cr_assert(p.allow_degraded);
	cr_assert_eq(p.warnings.n, 0);
	cr_assert_not(p.finalized);
	moat_policy_free(&p);
}

Test(json, mode_and_workspace_write_false)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\"mode\": \"danger-full-access\","
				     " \"workspace\": \"/abs/ws/\","
				     " \"filesystem\": {\"workspace_write\": false}}", &e),
		     0, "%s", e.msg);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_WRITE);
	cr_assert_eq(p.net, MOAT_NET_HOST);
	cr_assert_not(p.workspace_write);
	cr_assert_str_eq(p.workspace, "/abs/ws");
	/* network.mode none overrides the preset's host network */
	cr_assert_eq(load_native(&p, "{\"network\": {\"mode\": \"none\"}}", &e), 0);
	cr_assert_eq(p.net, MOAT_NET_NONE);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_WRITE);
	cr_assert_str_eq(p.workspace, "/abs/ws");
	moat_policy_free(&p);
}

Test(json, memory_integer_and_units)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\"limits\": {\"memory\": 1048576}}", &e), 0, "%s", e.msg);
	cr_assert_eq(p.memory, 1048576);
	cr_assert_eq(load_native(&p, "{\"limits\": {\"memory\": \"1.5G\"}}", &e), 0);
	cr_assert_eq(p.memory, 3ULL << 29);
	cr_assert_eq(load_native(&p, "{\"limits\": {\"memory\": 1}}", &e), 0);
	cr_assert_eq(p.memory, 1);
	moat_policy_free(&p);
}

Test(json, limits_boundaries)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\"limits\": {\"pids\": 4194304, \"cpus\": 4096,"
				     " \"timeout\": 0.5}}", &e), 0, "%s", e.msg);
	cr_assert_eq(p.pids, 4194304);
	cr_assert_eq(p.cpu_milli, 4096000);
	cr_assert_eq(p.timeout_ms, 500);
	cr_assert_eq(load_native(&p, "{\"limits\": {\"pids\": 1, \"cpus\": 0.01,"
				     " \"timeout\": 31536000}}", &e), 0, "%s", e.msg);
	cr_assert_eq(p.pids, 1);
	cr_assert_eq(p.cpu_milli, 10);
	cr_assert_eq(p.timeout_ms, 31536000000ULL);
	cr_assert_eq(load_native(&p, "{\"limits\": {\"cpus\": 2}}", &e), 0, "%s", e.msg);
	cr_assert_eq(p.cpu_milli, 2000);
	moat_policy_free(&p);
}

Test(json, limits_out_of_range)
{
	native_fails("{\"limits\": {\"memory\": 0}}", "limits.memory");
	native_fails("{\"limits\": {\"memory\": -5}}", "limits.memory");
	native_fails("{\"limits\": {\"memory\": \"0\"}}", "limits.memory");
	native_fails("{\"limits\": {\"memory\": \"0\"}}", "at least 1 byte");
	native_fails("{\"limits\": {\"memory\": \"12X\"}}", "invalid size '12X'");
	native_fails("{\"limits\": {\"memory\": 1.5}}", "limits.memory");
	native_fails("{\"limits\": {\"pids\": 0}}", "limits.pids");
	native_fails("{\"limits\": {\"pids\": 4194305}}", "limits.pids");
	native_fails("{\"limits\": {\"pids\": -1}}", "limits.pids");
	native_fails("{\"limits\": {\"pids\": 1.5}}", "limits.pids");
	native_fails("{\"limits\": {\"cpus\": 0}}", "limits.cpus");
	native_fails("{\"limits\": {\"cpus\": 0.001}}", "limits.cpus");
	native_fails("{\"limits\": {\"cpus\": 4097}}", "limits.cpus");
	native_fails("{\"limits\": {\"cpus\": -1}}", "limits.cpus");
	native_fails("{\"limits\": {\"timeout\": 0}}", "limits.timeout");
	native_fails("{\"limits\": {\"timeout\": -3}}", "limits.timeout");
	native_fails("{\"limits\": {\"timeout\": 31536001}}", "limits.timeout");
}

Test(json, unknown_keys_name_the_path)
{
	native_fails("{\"bogus\": 1}", "pol.json: bogus: unknown key");
	native_fails("{\"filesystem\": {\"alow_read\": []}}",
		     "pol.json: filesystem.alow_read: unknown key");
	native_fails("{\"network\": {\"mode\": \"none\", \"proxy\": 1}}",
		     "pol.json: network.proxy: unknown key");
	native_fails("{\"limits\": {\"memry\": \"1G\"}}",
		     "pol.json: limits.memry: unknown key");
	/* keys are case-sensitive */
	native_fails("{\"Mode\": \"read-only\"}", "Mode: unknown key");
	/* srt spelling is not native */
	native_fails("{\"filesystem\": {\"allowWrite\": []}}",
		     "filesystem.allowWrite: unknown key");
}

Test(json, wrong_types_name_the_key)
{
	static const struct {
		const char *json, *key;
	} cases[] = {
		{"{\"mode\": 1}", "pol.json: mode: must be a string"},
		{"{\"mode\": \"bogus\"}", "pol.json: mode: unknown mode 'bogus'"},
		{"{\"workspace\": 5}", "pol.json: workspace: must be a non-empty string"},
		{"{\"workspace\": \"\"}", "pol.json: workspace: must be a non-empty string"},
		{"{\"filesystem\": []}", "pol.json: filesystem: must be an object"},
		{"{\"filesystem\": \"rw\"}", "pol.json: filesystem: must be an object"},
		{"{\"filesystem\": {\"allow_read\": \"/x\"}}", "filesystem.allow_read: must be an array"},
		{"{\"filesystem\": {\"deny_read\": [\"/x\", 3]}}", "filesystem.deny_read: [1] must be a non-empty string"},
		{"{\"filesystem\": {\"allow_write\": [\"\"]}}", "filesystem.allow_write: [0] must be a non-empty string"},
		{"{\"filesystem\": {\"deny_write\": {}}}", "filesystem.deny_write: must be an array"},
		{"{\"filesystem\": {\"workspace_write\": \"yes\"}}", "filesystem.workspace_write: must be true or false"},
		{"{\"filesystem\": {\"workspace_write\": 1}}", "filesystem.workspace_write: must be true or false"},
		{"{\"network\": true}", "pol.json: network: must be an object"},
		{"{\"network\": {\"mode\": 1}}", "network.mode: must be \"none\" or \"host\""},
		{"{\"network\": {\"mode\": \"bridge\"}}", "network.mode: must be \"none\" or \"host\""},
		{"{\"network\": {\"allow\": \"example.com\"}}", "network.allow: must be an array"},
		{"{\"network\": {\"deny\": [null]}}", "network.deny: [0] must be a non-empty string"},
		{"{\"limits\": 5}", "pol.json: limits: must be an object"},
		{"{\"limits\": {\"memory\": true}}", "limits.memory: must be a size string"},
		{"{\"limits\": {\"pids\": \"10\"}}", "limits.pids"},
		{"{\"limits\": {\"cpus\": \"1\"}}", "limits.cpus"},
		{"{\"limits\": {\"timeout\": \"30s\"}}", "limits.timeout"},
		{"{\"env\": \"A=1\"}", "pol.json: env: must be an array"},
		{"{\"env\": [\"A=1\", 2]}", "pol.json: env: [1] must be a string"},
		{"{\"allow_degraded\": \"true\"}", "pol.json: allow_degraded: must be true or false"},
		{"[]", "pol.json: (top level): must be a JSON object"},
		{"\"str\"", "pol.json:1:"}, /* jansson: only object/array roots */
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		native_fails(cases[i].json, cases[i].key);
}

Test(json, invalid_env_names)
{
	native_fails("{\"env\": [\"OK=1\", \"1X=2\"]}", "pol.json: env[1]");
	native_fails("{\"env\": [\"1X=2\"]}", "invalid environment variable name in '1X=2'");
	native_fails("{\"env\": [\"A-B\"]}", "env[0]");
	native_fails("{\"env\": [\"\"]}", "env[0]");
	native_fails("{\"env\": [\"=v\"]}", "env[0]");
}

Test(json, tilde_without_home)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_json_string(&p, "{\"workspace\": \"~/w\"}", "p.json",
						  CWD, NULL, &e), -1);
	assert_has(e.msg, "p.json: workspace");
	assert_has(e.msg, "'~/w'");
	cr_assert_null(p.workspace);
	cr_assert_eq(moat_policy_load_json_string(
			     &p, "{\"filesystem\": {\"allow_read\": [\"/ok\", \"~/.x\"]}}",
			     "p.json", CWD, NULL, &e), -1);
	assert_has(e.msg, "p.json: filesystem.allow_read[1]");
	assert_has(e.msg, "'~/.x'");
	cr_assert_eq(p.allow_read.n, 0);
	/* relative path and no cwd */
	cr_assert_eq(moat_policy_load_json_string(
			     &p, "{\"filesystem\": {\"deny_write\": [\"rel\"]}}",
			     "p.json", NULL, HOME, &e), -1);
	assert_has(e.msg, "filesystem.deny_write[0]");
	cr_assert_eq(p.deny_write.n, 0);
	moat_policy_free(&p);
}

Test(json, parse_error_position)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\n  \"mode\": \"read-only\",\n  \"x\": \n}", &e), -1);
	cr_assert_eq(strncmp(e.msg, "pol.json:4:1: ", 14), 0, "%s", e.msg);
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	cr_assert_eq(load_native(&p, "{\"a\": 1} trailing", &e), -1);
	cr_assert_eq(strncmp(e.msg, "pol.json:1:", 11), 0, "%s", e.msg);
	cr_assert_eq(load_native(&p, "", &e), -1);
	cr_assert_eq(strncmp(e.msg, "pol.json:1:", 11), 0, "%s", e.msg);
	/* nothing applied */
	cr_assert_eq(p.fs_base, MOAT_FS_SYSTEM);
	moat_policy_free(&p);
}

Test(json, duplicate_keys_rejected)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\"mode\": \"read-only\", \"mode\": "
				     "\"danger-full-access\"}", &e), -1);
	assert_has(e.msg, "pol.json:1:");
	assert_has(e.msg, "duplicate");
	cr_assert_eq(load_native(&p, "{\"filesystem\": {\"allow_read\": [\"/a\"],"
				     " \"allow_read\": [\"/b\"]}}", &e), -1);
	assert_has(e.msg, "duplicate");
	cr_assert_eq(p.allow_read.n, 0);
	cr_assert_eq(p.fs_base, MOAT_FS_SYSTEM);
	moat_policy_free(&p);
}

Test(json, nulls_and_empty_object_change_nothing)
{
	struct moat_policy p, before;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, full_policy, &e), 0, "%s", e.msg);
	policy_copy(&before, &p);
	cr_assert_eq(load_native(&p, "{}", &e), 0, "%s", e.msg);
	assert_policy_eq(&p, &before);
	cr_assert_eq(load_native(&p, "{\"mode\": null, \"workspace\": null,"
				     " \"filesystem\": {\"allow_read\": null},"
				     " \"network\": null, \"limits\": {\"memory\": null},"
				     " \"env\": null, \"allow_degraded\": null}", &e), 0,
		     "%s", e.msg);
	assert_policy_eq(&p, &before);
	moat_policy_free(&before);
	moat_policy_free(&p);
}

Test(json, later_file_appends_and_overrides)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\"filesystem\": {\"allow_read\": [\"/a\", \"/b\"]},"
				     " \"limits\": {\"pids\": 10, \"memory\": \"1G\"},"
				     " \"env\": [\"A=1\"]}", &e), 0, "%s", e.msg);
	cr_assert_eq(load_native(&p, "{\"filesystem\": {\"allow_read\": [\"/b\", \"/c\", \"/c/\"]},"
				     " \"limits\": {\"pids\": 20}, \"env\": [\"A=2\"]}", &e),
		     0, "%s", e.msg);
	cr_assert_eq(p.allow_read.n, 3, "duplicates kept: %zu", p.allow_read.n);
	cr_assert_str_eq(p.allow_read.v[0], "/a");
	cr_assert_str_eq(p.allow_read.v[1], "/b");
	cr_assert_str_eq(p.allow_read.v[2], "/c");
	cr_assert_eq(p.pids, 20);
	cr_assert_eq(p.memory, 1ULL << 30, "unrelated scalar lost");
	cr_assert_eq(p.env.n, 2);
	cr_assert_str_eq(p.env.v[1], "A=2");
	moat_policy_free(&p);
}

/* A file that fails part-way must leave the policy exactly as it was. */
Test(json, failing_file_changes_nothing)
{
	struct moat_policy p, before;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\"workspace\": \"/ws\","
				     " \"filesystem\": {\"allow_read\": [\"/a\"],"
				     " \"deny_write\": [\"/d\"]},"
				     " \"network\": {\"allow\": [\"x.org\"]},"
				     " \"limits\": {\"memory\": \"1G\", \"pids\": 5},"
				     " \"env\": [\"K=V\"]}", &e), 0, "%s", e.msg);
	policy_copy(&before, &p);

	static const char *const failing[] = {
		/* everything valid but the last limit */
		"{\"mode\": \"danger-full-access\", \"workspace\": \"/other\","
		" \"filesystem\": {\"allow_read\": [\"/new\"], \"allow_write\": [\"/w\"],"
		" \"deny_read\": [\"/dr\"], \"deny_write\": [\"/dw\"],"
		" \"workspace_write\": false},"
		" \"network\": {\"mode\": \"host\", \"allow\": [\"y.org\"], \"deny\": [\"z.org\"]},"
		" \"limits\": {\"memory\": \"2G\", \"pids\": 7, \"cpus\": 2, \"timeout\": 0},"
		" \"env\": [\"NEW=1\"], \"allow_degraded\": true}",
		/* bad env entry after good ones */
		"{\"mode\": \"read-only\", \"filesystem\": {\"allow_read\": [\"/new\"]},"
		" \"env\": [\"NEW=1\", \"bad-name\"]}",
		/* bad trailing bool */
		"{\"workspace\": \"/other\", \"limits\": {\"pids\": 9},"
		" \"allow_degraded\": 1}",
		/* unknown key deep inside */
		"{\"mode\": \"read-only\", \"network\": {\"allow\": [\"q.org\"], \"x\": 1}}",
		/* syntax error at the very end */
		"{\"mode\": \"read-only\", \"filesystem\": {\"allow_read\": [\"/new\"]}",
	};
	for (size_t i = 0; i < sizeof failing / sizeof *failing; i++) {
		cr_assert_eq(load_native(&p, failing[i], &e), -1, "case %zu accepted", i);
		assert_policy_eq(&p, &before);
	}
	moat_policy_free(&before);
	moat_policy_free(&p);
}

Test(json, relative_and_home_paths)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_json_string(
			     &p,
			     "{\"workspace\": \"~\", \"filesystem\": {"
			     "\"allow_read\": [\".\", \"..\", \"a/./b\", \"~\", \"~/x/\","
			     " \"/abs/../p\", \"~other\"]}}",
			     "n", "/c/w", "/h/u", &e),
		     0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, "/h/u");
	cr_assert_eq(p.allow_read.n, 7);
	cr_assert_str_eq(p.allow_read.v[0], "/c/w");
	cr_assert_str_eq(p.allow_read.v[1], "/c");
	cr_assert_str_eq(p.allow_read.v[2], "/c/w/a/b");
	cr_assert_str_eq(p.allow_read.v[3], "/h/u");
	cr_assert_str_eq(p.allow_read.v[4], "/h/u/x");
	cr_assert_str_eq(p.allow_read.v[5], "/p");
	cr_assert_str_eq(p.allow_read.v[6], "/c/w/~other");
	moat_policy_free(&p);
}

Test(json, load_from_file)
{
	char *dir = tmp_dir();
	char *f = moat_strdupf("%s/policy.json", dir);
	FILE *fp = fopen(f, "w");
	cr_assert_not_null(fp);
	fputs("{\"limits\": {\"pids\": 42},\n \"filesystem\": {\"allow_read\": [\"sub\"]}}\n", fp);
	fclose(fp);

	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_json(&p, f, "/base", HOME, &e), 0, "%s", e.msg);
	cr_assert_eq(p.pids, 42);
	cr_assert_str_eq(p.allow_read.v[0], "/base/sub");

	/* errors name the file */
	fp = fopen(f, "w");
	fputs("{\"limits\": {\"pids\": 42},\n \"oops\": 1}\n", fp);
	fclose(fp);
	cr_assert_eq(moat_policy_load_json(&p, f, "/base", HOME, &e), -1);
	assert_has(e.msg, f);
	assert_has(e.msg, "oops: unknown key");

	fp = fopen(f, "w");
	fputs("{\n\"limits\": {\"pids\": 42},,\n}\n", fp);
	fclose(fp);
	cr_assert_eq(moat_policy_load_json(&p, f, "/base", HOME, &e), -1);
	char *want = moat_strdupf("%s:2:", f);
	cr_assert_eq(strncmp(e.msg, want, strlen(want)), 0, "%s", e.msg);
	free(want);

	char *missing = moat_strdupf("%s/nope.json", dir);
	cr_assert_eq(moat_policy_load_json(&p, missing, "/base", HOME, &e), -1);
	assert_has(e.msg, missing);
	cr_assert_eq(e.errnum, ENOENT);
	free(missing);

	cr_assert_eq(moat_policy_load_json(&p, dir, "/base", HOME, &e), -1);
	assert_has(e.msg, dir);
	assert_has(e.msg, "not a regular file");

	cr_assert_eq(moat_policy_load_srt(&p, dir, "/base", HOME, &e), -1);
	assert_has(e.msg, "not a regular file");

	cr_assert_eq(p.pids, 42);
	cr_assert_eq(p.allow_read.n, 1);
	moat_policy_free(&p);
	free(f);
	tmp_rm(dir);
}

Test(json, embedded_nul_rejected)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	/* "/tmp\u0000/etc" must not silently become "/tmp" */
	cr_assert_eq(load_native(&p, "{\"filesystem\": {\"allow_write\": [\"/tmp\\u0000/etc\"]}}",
				 &e), -1);
	cr_assert_eq(strncmp(e.msg, "pol.json:1:", 11), 0, "%s", e.msg);
	cr_assert_eq(p.allow_write.n, 0);
	cr_assert_eq(load_native(&p, "{\"env\": [\"A=\\u0000\"]}", &e), -1);
	cr_assert_eq(p.env.n, 0);
	moat_policy_free(&p);
}

Test(json, oversized_file_rejected)
{
	char *dir = tmp_dir();
	char *f = moat_strdupf("%s/big.json", dir);
	FILE *fp = fopen(f, "w");
	cr_assert_not_null(fp);
	fputs("{}", fp);
	fclose(fp);
	cr_assert_eq(truncate(f, (4 << 20) + 1), 0);
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_json(&p, f, "/", HOME, &e), -1);
	assert_has(e.msg, f);
	assert_has(e.msg, "4 MiB");
	moat_policy_free(&p);
	free(f);
	tmp_rm(dir);
}

/* Regression (was a bug): a positive limits.timeout below 0.5 ms (e.g. 0.0001) passes the
 * "> 0" check but is rounded to timeout_ms = 0, which means "no timeout":
 * the limit silently disappears. (--timeout 0.0001 is rejected by
 * moat_parse_scaled.) It should be rejected or rounded up to 1 ms. */
Test(json, tiny_timeout_not_dropped)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	int r = load_native(&p, "{\"limits\": {\"timeout\": 0.0001}}", &e);
	if (r == 0)
		cr_assert_gt(p.timeout_ms, 0, "timeout 0.0001 s became 'no timeout'");
	else
		assert_has(e.msg, "limits.timeout");
	moat_policy_free(&p);
}

/* ---- srt settings ----------------------------------------------------------- */

Test(srt, filesystem_and_network_mapping)
{
	char *dir = tmp_dir();
	char *w1 = mkdir_in(dir, "w1");
	char *w2 = mkdir_in(dir, "w2");
	char *r1 = mkdir_in(dir, "r1");
	char *json = moat_strdupf(
		"{\"filesystem\": {"
		"  \"allowWrite\": [\"%s\", \"w2\"],"
		"  \"denyWrite\": [\"%s/.env\", \"~/.npmrc\"],"
		"  \"denyRead\": [\"~/.secret\", \"%s/private\"],"
		"  \"allowRead\": [\"%s\"]},"
		" \"network\": {\"allowedDomains\": [\"github.com\", \"*.npmjs.org\"],"
		"  \"deniedDomains\": [\"bad.com\"], \"allowLocalBinding\": true},"
		" \"ignoreViolations\": {}, \"enableWeakerNestedSandbox\": false}",
		w1, w1, dir, r1);
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_srt_string(&p, json, "s.json", dir, "/h/u", &e), 0,
		     "%s", e.msg);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_READ);
	cr_assert_not(p.workspace_write);
	cr_assert_eq(p.net, MOAT_NET_NONE);
	cr_assert_eq(p.allow_write.n, 2);
	cr_assert_str_eq(p.allow_write.v[0], w1);
	cr_assert_str_eq(p.allow_write.v[1], w2);
	cr_assert_eq(p.deny_write.n, 2);
	char *envf = moat_strdupf("%s/.env", w1);
	cr_assert_str_eq(p.deny_write.v[0], envf);
	cr_assert_str_eq(p.deny_write.v[1], "/h/u/.npmrc");
	cr_assert_eq(p.deny_read.n, 2);
	cr_assert_str_eq(p.deny_read.v[0], "/h/u/.secret");
	char *priv = moat_strdupf("%s/private", dir);
	cr_assert_str_eq(p.deny_read.v[1], priv);
	cr_assert_eq(p.allow_read.n, 1);
	cr_assert_str_eq(p.allow_read.v[0], r1);
	cr_assert_eq(p.net_allow.n, 2);
	cr_assert_str_eq(p.net_allow.v[0], "github.com");
	cr_assert_str_eq(p.net_allow.v[1], "*.npmjs.org");
	cr_assert_eq(p.net_deny.n, 1);
	cr_assert_str_eq(p.net_deny.v[0], "bad.com");
	cr_assert_eq(p.warnings.n, 0, "unexpected warning: %s",
		     p.warnings.n ? p.warnings.v[0] : "");
	cr_assert_null(p.workspace);
	moat_policy_free(&p);
	free(envf);
	free(priv);
	free(json);
	free(w1);
	free(w2);
	free(r1);
	tmp_rm(dir);
}

Test(srt, missing_write_and_read_roots_skipped_with_warning)
{
	char *dir = tmp_dir();
	char *ok = mkdir_in(dir, "ok");
	char *json = moat_strdupf("{\"filesystem\": {\"allowWrite\": [\"%s\", \"%s/gone\"],"
				  " \"allowRead\": [\"%s/alsogone\"],"
				  " \"denyWrite\": [\"%s/missing-deny\"]}}",
				  ok, dir, dir, dir);
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_srt_string(&p, json, "s.json", dir, HOME, &e), 0,
		     "%s", e.msg);
	cr_assert_eq(p.allow_write.n, 1);
	cr_assert_str_eq(p.allow_write.v[0], ok);
	cr_assert_eq(p.allow_read.n, 0);
	/* deny lists keep missing paths */
	cr_assert_eq(p.deny_write.n, 1);
	cr_assert_eq(p.warnings.n, 2);
	char *gone = moat_strdupf("%s/gone", dir);
	assert_has(p.warnings.v[0], "s.json");
	assert_has(p.warnings.v[0], "filesystem.allowWrite");
	assert_has(p.warnings.v[0], gone);
	assert_has(p.warnings.v[0], "does not exist");
	assert_has(p.warnings.v[1], "filesystem.allowRead");
	assert_has(p.warnings.v[1], "alsogone");
	moat_policy_free(&p);
	free(gone);
	free(json);
	free(ok);
	tmp_rm(dir);
}

Test(srt, unknown_keys_rejected)
{
	srt_fails("{\"sandbox\": {}}", "srt.json: sandbox: unknown key");
	srt_fails("{\"filesystem\": {\"allow_write\": []}}",
		  "srt.json: filesystem.allow_write: unknown key");
	srt_fails("{\"network\": {\"allowedDomain\": []}}",
		  "srt.json: network.allowedDomain: unknown key");
	srt_fails("{\"mode\": \"read-only\"}", "mode: unknown key");
}

Test(srt, wrong_types)
{
	srt_fails("[1]", "(top level)");
	srt_fails("{\"filesystem\": []}", "filesystem: must be an object");
	srt_fails("{\"filesystem\": {\"allowWrite\": \"/tmp\"}}", "filesystem.allowWrite");
	srt_fails("{\"filesystem\": {\"denyRead\": [1]}}", "filesystem.denyRead: [0]");
	srt_fails("{\"filesystem\": {\"disabled\": \"no\"}}", "filesystem.disabled");
	srt_fails("{\"network\": {\"allowedDomains\": \"a.com\"}}", "network.allowedDomains");
	srt_fails("{\"network\": {\"deniedDomains\": [\"\"]}}", "network.deniedDomains");
	srt_fails("{\"network\": 3}", "network: must be an object");
	srt_fails("{\"network\": {}, \"network\": {}}", "duplicate");
}

Test(srt, disabled_filesystem_rejected)
{
	srt_fails("{\"filesystem\": {\"disabled\": true}}", "srt.json: filesystem.disabled");
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_srt(&p, "{\"filesystem\": {\"disabled\": false}}", &e), 0, "%s", e.msg);
	moat_policy_free(&p);
}

Test(srt, proxies_rejected)
{
	srt_fails("{\"network\": {\"httpProxyPort\": 8080}}", "srt.json: network.httpProxyPort");
	srt_fails("{\"network\": {\"httpProxyPort\": 8080}}", "not supported");
	srt_fails("{\"network\": {\"socksProxyPort\": 1080}}", "network.socksProxyPort");
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_srt(&p, "{\"network\": {\"httpProxyPort\": null}}", &e), 0, "%s", e.msg);
	moat_policy_free(&p);
}

Test(srt, allow_git_config_warns)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_srt(&p, "{\"filesystem\": {\"allowGitConfig\": true}}", &e), 0, "%s", e.msg);
	cr_assert_eq(p.warnings.n, 1);
	assert_has(p.warnings.v[0], "srt.json: filesystem.allowGitConfig");
	cr_assert_eq(load_srt(&p, "{\"filesystem\": {\"allowGitConfig\": false}}", &e), 0);
	cr_assert_eq(p.warnings.n, 1);
	moat_policy_free(&p);
}

/* Regression (was a bug): filesystem.allowGitConfig is read (json_is_true) but never type
 * checked: {"filesystem": {"allowGitConfig": "yes"}} is accepted silently,
 * with neither the usual warning nor a wrong-type error, although srt
 * settings are documented as strict about types. */
Test(srt, allow_git_config_wrong_type)
{
	srt_fails("{\"filesystem\": {\"allowGitConfig\": \"yes\"}}",
		  "filesystem.allowGitConfig");
}

Test(srt, load_from_file)
{
	char *dir = tmp_dir();
	char *w = mkdir_in(dir, "w");
	char *f = moat_strdupf("%s/srt.json", dir);
	FILE *fp = fopen(f, "w");
	cr_assert_not_null(fp);
	fprintf(fp, "{\"filesystem\": {\"allowWrite\": [\"w\"]},\n"
		    " \"network\": {\"allowedDomains\": [\"pypi.org\"]}}\n");
	fclose(fp);
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_srt(&p, f, dir, HOME, &e), 0, "%s", e.msg);
	cr_assert_eq(p.allow_write.n, 1);
	cr_assert_str_eq(p.allow_write.v[0], w);
	assert_in(&p.net_allow, "pypi.org");
	fp = fopen(f, "w");
	fprintf(fp, "{\"filesystem\": {\"disabled\": true}}\n");
	fclose(fp);
	cr_assert_eq(moat_policy_load_srt(&p, f, dir, HOME, &e), -1);
	assert_has(e.msg, f);
	assert_has(e.msg, "filesystem.disabled");
	cr_assert_eq(p.allow_write.n, 1);
	moat_policy_free(&p);
	free(f);
	free(w);
	tmp_rm(dir);
}

Test(srt, failing_file_changes_nothing)
{
	char *dir = tmp_dir();
	struct moat_policy p, before;
	moat_policy_init(&p);
	struct moat_err e = {0};
	policy_copy(&before, &p);
	char *json = moat_strdupf(
		"{\"filesystem\": {\"allowWrite\": [\"%s\", \"%s/missing\"],"
		" \"denyRead\": [\"/x\"]},"
		" \"network\": {\"allowedDomains\": [\"a.com\"], \"httpProxyPort\": 3128}}",
		dir, dir);
	cr_assert_eq(moat_policy_load_srt_string(&p, json, "s.json", dir, HOME, &e), -1);
	assert_has(e.msg, "httpProxyPort");
	/* not even the warning about the missing path, nor the fs_base change */
	assert_policy_eq(&p, &before);
	cr_assert_eq(p.fs_base, MOAT_FS_SYSTEM);
	moat_policy_free(&before);
	moat_policy_free(&p);
	free(json);
	tmp_rm(dir);
}

/* srt after a native policy: srt's model (host read, write only allowWrite)
 * replaces the file-system base and turns the workspace read-only. */
Test(srt, overrides_native_base)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load_native(&p, "{\"filesystem\": {\"deny_read\": [\"/a\"]},"
				     " \"limits\": {\"pids\": 3}}", &e), 0);
	cr_assert_eq(load_srt(&p, "{\"filesystem\": {\"denyRead\": [\"/a\", \"/b\"]}}", &e), 0,
		     "%s", e.msg);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_READ);
	cr_assert_not(p.workspace_write);
	cr_assert_eq(p.pids, 3);
	cr_assert_eq(p.deny_read.n, 2);
	cr_assert_str_eq(p.deny_read.v[1], "/b");
	moat_policy_free(&p);
}

/* ---- env -------------------------------------------------------------------- */

Test(env, add_valid)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	static const char *const ok[] = {"A", "A=1", "_X", "a1", "FOO_BAR=x=y", "E=",
					 "Mixed_Case9=", NULL};
	for (size_t i = 0; ok[i]; i++)
		cr_assert_eq(moat_policy_add_env(&p, ok[i], &e), 0, "'%s': %s", ok[i], e.msg);
	cr_assert_eq(p.env.n, 7);
	cr_assert_str_eq(p.env.v[4], "FOO_BAR=x=y");
	moat_policy_free(&p);
}

Test(env, add_invalid)
{
	struct moat_policy p;
	moat_policy_init(&p);
	static const char *const bad[] = {"1X", "A-B", "", "=v", "A B=1", "A.B",
					  "9=9", "X\t=1", "É=1", NULL};
	for (size_t i = 0; bad[i]; i++) {
		struct moat_err e = {0};
		cr_assert_eq(moat_policy_add_env(&p, bad[i], &e), -1, "'%s' accepted", bad[i]);
		cr_assert_eq(e.kind, MOAT_E_USAGE);
		char q[64];
		snprintf(q, sizeof q, "'%s'", bad[i]);
		assert_has(e.msg, q);
		assert_has(e.msg, "invalid environment variable name");
	}
	cr_assert_eq(p.env.n, 0);
	moat_policy_free(&p);
}

Test(env, build_filters_caller)
{
	struct moat_policy p;
	moat_policy_init(&p);
	char *caller[] = {
		"PATH=/caller/bin", "HOME=/caller/home", "TERM=xterm-256color",
		"LANG=C.UTF-8", "LC_ALL=fr_FR.UTF-8", "LC_TIME=de_DE", "TZ=UTC",
		"COLORTERM=truecolor", "SECRET=hunter2", "AWS_SECRET_ACCESS_KEY=k",
		"SSH_AUTH_SOCK=/run/ssh", "LANGUAGE=fr", "TERMINFO=/x", "XLC_X=1",
		"LD_PRELOAD=/evil.so", "MOAT_SANDBOX=0", "NOEQUALS", NULL,
	};
	struct moat_strv out = {0};
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_build_env(&p, caller, "/sandbox/home", &out, &e), 0);
	cr_assert_str_eq(env_get(&out, "PATH"), "/caller/bin");
	cr_assert_str_eq(env_get(&out, "HOME"), "/sandbox/home");
	cr_assert_str_eq(env_get(&out, "TERM"), "xterm-256color");
	cr_assert_str_eq(env_get(&out, "LANG"), "C.UTF-8");
	cr_assert_str_eq(env_get(&out, "LC_ALL"), "fr_FR.UTF-8");
	cr_assert_str_eq(env_get(&out, "LC_TIME"), "de_DE");
	cr_assert_str_eq(env_get(&out, "TZ"), "UTC");
	cr_assert_str_eq(env_get(&out, "COLORTERM"), "truecolor");
	cr_assert_str_eq(env_get(&out, "MOAT_SANDBOX"), "1");
	static const char *const gone[] = {"SECRET", "AWS_SECRET_ACCESS_KEY",
					   "SSH_AUTH_SOCK", "LANGUAGE", "TERMINFO",
					   "XLC_X", "LD_PRELOAD", "NOEQUALS", NULL};
	for (size_t i = 0; gone[i]; i++)
		cr_assert_null(env_get(&out, gone[i]), "%s leaked", gone[i]);
	cr_assert_eq(out.n, 9, "unexpected extra entries (%zu)", out.n);
	for (size_t i = 0; i < out.n; i++) {
		assert_hasnt(out.v[i], "hunter2");
		assert_hasnt(out.v[i], "NOEQUALS");
	}
	cr_assert_null(out.v[out.n]);
	moat_strv_free(&out);
	moat_policy_free(&p);
}

Test(env, build_policy_entries)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_add_env(&p, "EDITOR", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "NOT_IN_CALLER", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "FOO=bar=baz", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "TERM=dumb", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "PATH=/only/this", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "HOME=/custom", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "MOAT_SANDBOX=0", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "SECRET", &e), 0);
	cr_assert_eq(moat_policy_add_env(&p, "EMPTY=", &e), 0);
	char *caller[] = {"EDITOR=vim", "TERM=xterm", "SECRET=s3", "EDITORX=no",
			  "PATH=/usr/bin", NULL};
	struct moat_strv out = {0};
	cr_assert_eq(moat_policy_build_env(&p, caller, "/h", &out, &e), 0);
	cr_assert_str_eq(env_get(&out, "EDITOR"), "vim");
	cr_assert_null(env_get(&out, "NOT_IN_CALLER"));
	cr_assert_null(env_get(&out, "EDITORX"));
	cr_assert_str_eq(env_get(&out, "FOO"), "bar=baz");
	cr_assert_str_eq(env_get(&out, "TERM"), "dumb");
	cr_assert_str_eq(env_get(&out, "PATH"), "/only/this");
	cr_assert_str_eq(env_get(&out, "HOME"), "/custom");
	/* explicitly passed by name: allowed */
	cr_assert_str_eq(env_get(&out, "SECRET"), "s3");
	cr_assert_str_eq(env_get(&out, "EMPTY"), "");
	/* cannot be turned off */
	cr_assert_str_eq(env_get(&out, "MOAT_SANDBOX"), "1");
	moat_strv_free(&out);
	moat_policy_free(&p);
}

Test(env, build_defaults_without_caller_env)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	struct moat_strv out = {0};
	char *caller[] = {"USER=x", NULL};
	cr_assert_eq(moat_policy_build_env(&p, caller, "/h", &out, &e), 0);
	const char *path = env_get(&out, "PATH");
	cr_assert_not_null(path);
	assert_has(path, "/usr/bin");
	assert_has(path, "/bin");
	cr_assert_str_eq(env_get(&out, "HOME"), "/h");
	cr_assert_null(env_get(&out, "TERM"));
	cr_assert_null(env_get(&out, "USER"));
	cr_assert_eq(out.n, 3);
	moat_strv_free(&out);

	cr_assert_eq(moat_policy_build_env(&p, NULL, "/h2", &out, &e), 0);
	cr_assert_not_null(env_get(&out, "PATH"));
	cr_assert_str_eq(env_get(&out, "HOME"), "/h2");
	cr_assert_str_eq(env_get(&out, "MOAT_SANDBOX"), "1");
	moat_strv_free(&out);
	moat_policy_free(&p);
}

/* ---- add_path --------------------------------------------------------------- */

Test(policy, add_path)
{
	struct moat_strv l = {0};
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_add_path(&l, "a/../b", "/c", "/h", "--allow-read", &e), 0);
	cr_assert_eq(moat_policy_add_path(&l, "/c/b/", "/c", "/h", "--allow-read", &e), 0);
	cr_assert_eq(moat_policy_add_path(&l, "~/x", "/c", "/h", "--allow-read", &e), 0);
	cr_assert_eq(l.n, 2, "duplicate kept");
	cr_assert_str_eq(l.v[0], "/c/b");
	cr_assert_str_eq(l.v[1], "/h/x");
	cr_assert_eq(moat_policy_add_path(&l, "~/y", "/c", NULL, "--deny-write", &e), -1);
	cr_assert_eq(strncmp(e.msg, "--deny-write: ", 14), 0, "%s", e.msg);
	assert_has(e.msg, "'~/y'");
	cr_assert_eq(moat_policy_add_path(&l, "", "/c", "/h", "--allow-write", &e), -1);
	assert_has(e.msg, "--allow-write: empty path");
	cr_assert_eq(l.n, 2);
	moat_strv_free(&l);
}

/* ---- finalize --------------------------------------------------------------- */

Test(finalize, workspace_defaults_to_cwd)
{
	char *dir = tmp_dir();
	char *sub = mkdir_in(dir, "proj");
	char *cwd = moat_strdupf("%s/./proj/", dir); /* realpath'd */
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, cwd, dir, &e), 0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, sub);
	cr_assert(p.finalized);
	cr_assert_eq(p.warnings.n, 0);
	moat_policy_free(&p);
	free(cwd);
	free(sub);
	tmp_rm(dir);
}

Test(finalize, relative_workspace_against_cwd)
{
	char *dir = tmp_dir();
	char *sub = mkdir_in(dir, "w");
	struct moat_policy p;
	moat_policy_init(&p);
	p.workspace = strdup("w");
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), 0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, sub);
	moat_policy_free(&p);
	free(sub);
	tmp_rm(dir);
}

Test(finalize, bad_cwd)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, NULL, HOME, &e), -1);
	assert_has(e.msg, "current directory");
	cr_assert_eq(moat_policy_finalize(&p, "relative", HOME, &e), -1);
	assert_has(e.msg, "current directory");
	cr_assert_not(p.finalized);
	moat_policy_free(&p);
}

Test(finalize, missing_workspace)
{
	char *dir = tmp_dir();
	struct moat_policy p;
	moat_policy_init(&p);
	char *ws = moat_strdupf("%s/does-not-exist", dir);
	p.workspace = strdup(ws);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), -1);
	assert_has(e.msg, "workspace");
	assert_has(e.msg, ws);
	cr_assert_eq(e.errnum, ENOENT);
	cr_assert_eq(e.kind, MOAT_E_USAGE);
	cr_assert_not(p.finalized);
	moat_policy_free(&p);
	free(ws);
	tmp_rm(dir);
}

Test(finalize, workspace_is_a_file)
{
	char *dir = tmp_dir();
	char *f = touch_in(dir, "file");
	struct moat_policy p;
	moat_policy_init(&p);
	p.workspace = strdup(f);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), -1);
	assert_has(e.msg, f);
	cr_assert_eq(e.errnum, ENOTDIR);
	cr_assert_not(p.finalized);
	moat_policy_free(&p);
	free(f);
	tmp_rm(dir);
}

Test(finalize, workspace_root_refused)
{
	static const char *const modes[] = {NULL, "read-only", "workspace-write", NULL};
	for (size_t i = 0; i < 3; i++) {
		struct moat_policy p;
		moat_policy_init(&p);
		struct moat_err e = {0};
		if (modes[i])
			cr_assert_eq(moat_policy_set_mode(&p, modes[i], &e), 0);
		p.workspace = strdup("/tmp/..");
		cr_assert_eq(moat_policy_finalize(&p, "/tmp", "/nonexistent-home", &e), -1,
			     "mode %s", modes[i] ? modes[i] : "default");
		assert_has(e.msg, "workspace /");
		assert_has(e.msg, "danger-full-access");
		cr_assert_not(p.finalized);
		moat_policy_free(&p);
	}
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_set_mode(&p, "danger-full-access", &e), 0);
	p.workspace = strdup("/");
	cr_assert_eq(moat_policy_finalize(&p, "/tmp", "/nonexistent-home", &e), 0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, "/");
	moat_policy_free(&p);
}

Test(finalize, allow_write_root_refused)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	char *dir = tmp_dir();
	moat_strv_add(&p.allow_write, "/");
	cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), -1);
	assert_has(e.msg, "allow-write /");
	moat_policy_free(&p);

	moat_policy_init(&p);
	cr_assert_eq(moat_policy_set_mode(&p, "danger-full-access", &e), 0);
	moat_strv_add(&p.allow_write, "/");
	cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), 0, "%s", e.msg);
	moat_policy_free(&p);
	tmp_rm(dir);
}

Test(finalize, workspace_inside_secrets_refused)
{
	char *home = tmp_dir();
	char *ssh = mkdir_in(home, ".ssh");
	char *inner = mkdir_in(home, ".ssh/keys");
	char *aws = mkdir_in(home, ".aws");

	const char *const wss[] = {ssh, inner, aws};
	for (size_t i = 0; i < 3; i++) {
		struct moat_policy p;
		moat_policy_init(&p);
		p.workspace = strdup(wss[i]);
		struct moat_err e = {0};
		cr_assert_eq(moat_policy_finalize(&p, home, home, &e), -1, "%s accepted", wss[i]);
		assert_has(e.msg, wss[i]);
		assert_has(e.msg, "protected secrets path");
		cr_assert_not(p.finalized);
		moat_policy_free(&p);
	}
	/* reached through a symlink: still refused */
	char *link = symlink_in(home, "innocent", ssh);
	struct moat_policy p;
	moat_policy_init(&p);
	p.workspace = strdup(link);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, home, home, &e), -1);
	assert_has(e.msg, "protected secrets path");
	moat_policy_free(&p);

	/* the home itself is fine (secrets inside are masked) */
	moat_policy_init(&p);
	cr_assert_eq(moat_policy_finalize(&p, home, home, &e), 0, "%s", e.msg);
	moat_policy_free(&p);

	/* danger-full-access has no hidden paths */
	moat_policy_init(&p);
	cr_assert_eq(moat_policy_set_mode(&p, "danger-full-access", &e), 0);
	p.workspace = strdup(ssh);
	cr_assert_eq(moat_policy_finalize(&p, home, home, &e), 0, "%s", e.msg);
	moat_policy_free(&p);

	free(link);
	free(ssh);
	free(inner);
	free(aws);
	tmp_rm(home);
}

Test(finalize, allow_write_inside_secrets_refused)
{
	char *home = tmp_dir();
	char *gpg = mkdir_in(home, ".gnupg");
	struct moat_policy p;
	moat_policy_init(&p);
	moat_strv_add(&p.allow_write, gpg);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, home, home, &e), -1);
	assert_has(e.msg, "allow-write");
	assert_has(e.msg, gpg);
	assert_has(e.msg, "protected secrets path");
	moat_policy_free(&p);
	free(gpg);
	tmp_rm(home);
}

Test(finalize, allow_lists_must_exist)
{
	char *dir = tmp_dir();
	char *missing = moat_strdupf("%s/missing", dir);
	struct moat_policy p;
	moat_policy_init(&p);
	moat_strv_add(&p.allow_read, dir);
	moat_strv_add(&p.allow_read, missing);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), -1);
	assert_has(e.msg, "allow-read");
	assert_has(e.msg, missing);
	cr_assert_eq(e.errnum, ENOENT);
	cr_assert_not(p.finalized);
	moat_policy_free(&p);

	moat_policy_init(&p);
	moat_strv_add(&p.allow_write, missing);
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), -1);
	assert_has(e.msg, "allow-write");
	assert_has(e.msg, missing);
	moat_policy_free(&p);
	free(missing);
	tmp_rm(dir);
}

Test(finalize, deny_lists_keep_missing_and_resolve_existing)
{
	char *dir = tmp_dir();
	char *real = mkdir_in(dir, "real");
	char *link = symlink_in(dir, "link", real);
	char *missing = moat_strdupf("%s/not-yet", dir);
	char *via_link_file = touch_in(dir, "real/f");
	char *linked_f = moat_strdupf("%s/f", link);
	struct moat_policy p;
	moat_policy_init(&p);
	moat_strv_add(&p.deny_write, missing);
	moat_strv_add(&p.deny_write, linked_f);
	moat_strv_add(&p.deny_read, missing);
	moat_strv_add(&p.deny_read, link);
	moat_strv_add(&p.allow_read, link);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert_eq(p.deny_write.n, 2);
	cr_assert_str_eq(p.deny_write.v[0], missing);
	cr_assert_str_eq(p.deny_write.v[1], via_link_file);
	cr_assert_str_eq(p.deny_read.v[0], missing);
	cr_assert_str_eq(p.deny_read.v[1], real);
	cr_assert_str_eq(p.allow_read.v[0], real);
	moat_policy_free(&p);
	free(real);
	free(link);
	free(missing);
	free(via_link_file);
	free(linked_f);
	tmp_rm(dir);
}

/* Regression (was a bug): a deny-write path that does not exist yet is kept exactly as written,
 * even when its parent is a symlink. Every writable root is realpath'd, so
 * jail_mount_prepare()'s moat_path_within(deny, root) never matches and the
 * path is silently left unprotected once created. finalize should resolve
 * the existing prefix: <dir>/link/new -> <dir>/real/new. */
Test(finalize, deny_missing_under_symlink_resolved)
{
	char *dir = tmp_dir();
	char *real = mkdir_in(dir, "real");
	char *link = symlink_in(dir, "link", real);
	char *deny = moat_strdupf("%s/new", link);
	char *want = moat_strdupf("%s/new", real);
	struct moat_policy p;
	moat_policy_init(&p);
	p.workspace = strdup(link);
	moat_strv_add(&p.deny_write, deny);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, real);
	cr_assert_str_eq(p.deny_write.v[0], want);
	moat_policy_free(&p);
	free(real);
	free(link);
	free(deny);
	free(want);
	tmp_rm(dir);
}

Test(finalize, symlinked_workspace_resolved)
{
	char *dir = tmp_dir();
	char *real = mkdir_in(dir, "real");
	char *link = symlink_in(dir, "link", "real"); /* relative target */
	char *link2 = symlink_in(dir, "link2", link);  /* chain */
	struct moat_policy p;
	moat_policy_init(&p);
	p.workspace = strdup("link2");
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, real);
	moat_policy_free(&p);

	/* a dangling link is a missing workspace */
	char *dangling = symlink_in(dir, "dangling", "nowhere");
	moat_policy_init(&p);
	p.workspace = strdup(dangling);
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), -1);
	assert_has(e.msg, dangling);
	moat_policy_free(&p);
	free(dangling);
	free(real);
	free(link);
	free(link2);
	tmp_rm(dir);
}

/* srt lists "." in allowWrite to make the workspace writable: finalize
 * turns that into workspace_write and drops the duplicate bind. */
Test(finalize, srt_dot_makes_workspace_writable)
{
	char *dir = tmp_dir();
	char *other = mkdir_in(dir, "other");
	char *json = moat_strdupf("{\"filesystem\": {\"allowWrite\": [\".\", \"%s\"]}}", other);
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_srt_string(&p, json, "s.json", dir, dir, &e), 0, "%s", e.msg);
	cr_assert_not(p.workspace_write);
	cr_assert_eq(p.allow_write.n, 2);
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, dir);
	cr_assert(p.workspace_write);
	cr_assert_eq(p.allow_write.n, 1, "workspace kept as a second bind");
	cr_assert_str_eq(p.allow_write.v[0], other);
	moat_policy_free(&p);

	/* without "." the workspace stays read-only */
	moat_policy_init(&p);
	free(json);
	json = moat_strdupf("{\"filesystem\": {\"allowWrite\": [\"%s\"]}}", other);
	cr_assert_eq(moat_policy_load_srt_string(&p, json, "s.json", dir, dir, &e), 0, "%s", e.msg);
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert_not(p.workspace_write);
	cr_assert_eq(p.allow_write.n, 1);
	moat_policy_free(&p);
	free(json);
	free(other);
	tmp_rm(dir);
}

Test(finalize, workspace_inside_allow_write_is_writable)
{
	char *dir = tmp_dir();
	char *ws = mkdir_in(dir, "ws");
	char *sib = mkdir_in(dir, "wsx"); /* a sibling sharing the prefix */
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_set_mode(&p, "read-only", &e), 0);
	p.workspace = strdup(ws);
	moat_strv_add(&p.allow_write, dir);
	cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), 0, "%s", e.msg);
	cr_assert(p.workspace_write);
	cr_assert_eq(p.allow_write.n, 1);
	cr_assert_str_eq(p.allow_write.v[0], dir);
	moat_policy_free(&p);

	moat_policy_init(&p);
	cr_assert_eq(moat_policy_set_mode(&p, "read-only", &e), 0);
	p.workspace = strdup(ws);
	moat_strv_add(&p.allow_write, sib);
	cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), 0, "%s", e.msg);
	cr_assert_not(p.workspace_write, "/ws treated as inside /wsx");
	moat_policy_free(&p);
	free(ws);
	free(sib);
	tmp_rm(dir);
}

Test(finalize, network_allowlist_means_gateway)
{
	char *dir = tmp_dir();
	struct moat_policy p;
	moat_policy_init(&p);
	moat_strv_add(&p.net_allow, "example.com");
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert(p.gateway);
	cr_assert_eq(p.warnings.n, 0);
	moat_policy_free(&p);

	/* no allowlist: no gateway, the network is simply off */
	moat_policy_init(&p);
	moat_strv_add(&p.net_deny, "example.com");
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert(!p.gateway);
	moat_policy_free(&p);

	/* the host network would bypass the rules: refused, naming it */
	moat_policy_init(&p);
	moat_strv_add(&p.net_deny, "example.com");
	p.net = MOAT_NET_HOST;
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), -1);
	assert_has(e.msg, "--net host");
	moat_policy_free(&p);

	moat_policy_init(&p);
	cr_assert_eq(moat_policy_add_secret(&p, "TOKEN@api.example.com,x.example.com", &e), 0, "%s", e.msg);
	cr_assert_eq(moat_policy_add_secret(&p, "TOKEN@other.example.com", &e), -1);
	cr_assert_eq(moat_policy_add_secret(&p, "BAD NAME@x.com", &e), -1);
	assert_has(e.msg, "BAD NAME@x.com");
	cr_assert_eq(moat_policy_add_secret(&p, "NOHOST@", &e), -1);
	cr_assert_eq(moat_policy_add_secret(&p, "NOAT", &e), -1);
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert(p.gateway);
	moat_policy_free(&p);
	tmp_rm(dir);
}

Test(finalize, full_policy_from_json)
{
	char *dir = tmp_dir();
	char *ws = mkdir_in(dir, "ws");
	char *data = mkdir_in(dir, "data");
	char *out = mkdir_in(dir, "out");
	char *json = moat_strdupf("{\"mode\": \"workspace-write\", \"workspace\": \"ws\","
				  " \"filesystem\": {\"allow_read\": [\"data\"],"
				  " \"allow_write\": [\"out/\"], \"deny_write\": [\"ws/.env\"]},"
				  " \"limits\": {\"memory\": \"256M\"}}");
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(moat_policy_load_json_string(&p, json, "j", dir, dir, &e), 0, "%s", e.msg);
	cr_assert_eq(moat_policy_finalize(&p, dir, dir, &e), 0, "%s", e.msg);
	cr_assert_str_eq(p.workspace, ws);
	cr_assert_str_eq(p.allow_read.v[0], data);
	cr_assert_str_eq(p.allow_write.v[0], out);
	char *envf = moat_strdupf("%s/.env", ws);
	cr_assert_str_eq(p.deny_write.v[0], envf);
	cr_assert_eq(p.fs_base, MOAT_FS_HOST_READ);
	cr_assert(p.finalized);
	moat_policy_free(&p);
	free(envf);
	free(json);
	free(ws);
	free(data);
	free(out);
	tmp_rm(dir);
}

/* ---- fixed lists ------------------------------------------------------------ */

Test(hidden, paths)
{
	char *home = tmp_dir();
	struct moat_strv h = {0};
	moat_policy_hidden_paths(home, &h);
	static const char *const rel[] = {".ssh", ".aws", ".gnupg", ".config/gcloud",
					  ".kube", ".docker", ".netrc", NULL};
	for (size_t i = 0; rel[i]; i++) {
		char *x = moat_strdupf("%s/%s", home, rel[i]);
		assert_in(&h, x);
		free(x);
	}
	assert_in(&h, "/etc/shadow");
	assert_in(&h, "/etc/gshadow");
	assert_in(&h, "/etc/sudoers");
	assert_in(&h, "/etc/sudoers.d");
	assert_in(&h, "/root/.aws");
	assert_in(&h, "/root/.ssh");
	assert_not_in(&h, home);
	assert_not_in(&h, "/etc");
	assert_not_in(&h, "/etc/passwd");
	for (size_t i = 0; i < h.n; i++) {
		cr_assert_eq(h.v[i][0], '/', "not absolute: %s", h.v[i]);
		for (size_t j = i + 1; j < h.n; j++)
			cr_assert_str_neq(h.v[i], h.v[j], "duplicate %s", h.v[i]);
	}
	moat_strv_free(&h);
	tmp_rm(home);
}

Test(hidden, trailing_slash_home_and_realpath_variant)
{
	char *home = tmp_dir();
	char *store = mkdir_in(home, "keystore");
	char *ssh = symlink_in(home, ".ssh", store);
	char *slashed = moat_strdupf("%s//", home);
	struct moat_strv h = {0};
	moat_policy_hidden_paths(slashed, &h);
	assert_in(&h, ssh);
	assert_in(&h, store); /* where the symlink really points */
	moat_strv_free(&h);

	/* no home: the fixed system entries remain */
	moat_policy_hidden_paths(NULL, &h);
	assert_in(&h, "/etc/shadow");
	assert_in(&h, "/root/.ssh");
	assert_not_in(&h, ssh);
	moat_strv_free(&h);
	moat_policy_hidden_paths("relative/home", &h);
	assert_not_in(&h, "relative/home/.ssh");
	moat_strv_free(&h);
	free(slashed);
	free(ssh);
	free(store);
	tmp_rm(home);
}

Test(hidden, mandatory_deny)
{
	size_t n = 0;
	bool bashrc = false, hooks = false, gitconfig = false, mcp = false;
	for (; moat_mandatory_deny[n]; n++) {
		const char *s = moat_mandatory_deny[n];
		cr_assert_neq(s[0], '\0');
		cr_assert_neq(s[0], '/', "%s must be relative", s);
		cr_assert_null(strstr(s, ".."), "%s", s);
		for (size_t j = 0; j < n; j++)
			cr_assert_str_neq(s, moat_mandatory_deny[j]);
		bashrc |= strcmp(s, ".bashrc") == 0;
		hooks |= strcmp(s, ".git/hooks/") == 0;
		gitconfig |= strcmp(s, ".gitconfig") == 0;
		mcp |= strcmp(s, ".mcp.json") == 0;
	}
	cr_assert(bashrc);
	cr_assert(hooks, ".git/hooks/ must be a directory entry");
	cr_assert(gitconfig);
	cr_assert(mcp);
	cr_assert_geq(n, 10);
}

/* Users mode builds its own system view: the host views and images are
 * refused with it, and a slot must lie in the band. */
Test(policy, users_mode_needs_the_default_view)
{
	char *dir = tmp_dir();
	const char *modes[] = {"read-only", "workspace-write", "danger-full-access"};
	for (size_t i = 0; i < 3; i++) {
		struct moat_policy p;
		struct moat_err e = {0};
		moat_policy_init(&p);
		cr_assert_eq(p.users_slot, -1);
		cr_assert_eq(moat_policy_set_mode(&p, modes[i], &e), 0, "%s", e.msg);
		p.users = true;
		p.workspace = strdup(dir);
		cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), -1, "%s", modes[i]);
		cr_assert(strstr(e.msg, "users mode"), "%s", e.msg);
		moat_policy_free(&p);
	}
	struct moat_policy p;
	struct moat_err e = {0};
	moat_policy_init(&p);
	p.users = true;
	p.users_slot = MOAT_USERS_SLOTS;
	p.workspace = strdup(dir);
	cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), -1);
	cr_assert(strstr(e.msg, "slot"), "%s", e.msg);
	moat_policy_free(&p);
	moat_policy_init(&p);
	p.users = true;
	p.workspace = strdup(dir);
	cr_assert_eq(moat_policy_finalize(&p, dir, "/nonexistent-home", &e), 0, "%s", e.msg);
	moat_policy_free(&p);
	tmp_rm(dir);
}
