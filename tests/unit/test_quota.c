/* Unit tests for the quota keys (src/policy/quota.c): the table, --quota
 * NAME=N, the "quotas" object of a native policy file. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <moat/err.h>
#include <moat/policy.h>

#include <limits.h>
#include <string.h>

#define assert_has(hay, needle)                                                \
	cr_assert(strstr((hay), (needle)) != NULL, "expected \"%s\" in \"%s\"", \
		  (needle), (hay))

static int load(struct moat_policy *p, const char *json, struct moat_err *e)
{
	return moat_policy_load_json_string(p, json, "pol.json", "/cwd", "/home/t", e);
}

Test(quota, table_is_complete)
{
	for (int i = 0; i < MOAT_QUOTAS; i++) {
		const struct moat_quota_info *q = &moat_quota_info[i];
		cr_assert_not_null(q->name, "quota %d has no name", i);
		cr_assert_eq(moat_quota_find(q->name), i, "%s", q->name);
		cr_assert(q->sysctl || q->rlimit >= 0, "%s: neither sysctl nor rlimit", q->name);
		cr_assert(q->def >= 0 && q->def <= q->max, "%s", q->name);
		if (q->sysctl)
			cr_assert_eq(strncmp(q->sysctl, "max_", 4), 0, "%s", q->sysctl);
	}
	/* the namespace counts the sandbox never needs default to 0 */
	const char *ns[] = {"user_namespaces", "mnt_namespaces", "ipc_namespaces",
			    "pid_namespaces", "net_namespaces", "uts_namespaces",
			    "cgroup_namespaces", "time_namespaces"};
	for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
		int k = moat_quota_find(ns[i]);
		cr_assert_geq(k, 0, "%s", ns[i]);
		cr_assert_eq(moat_quota_info[k].def, 0, "%s", ns[i]);
	}
	cr_assert_eq(moat_quota_find("bogus"), -1);
	cr_assert_eq(moat_quota_find(""), -1);
}

Test(quota, defaults_are_unset)
{
	struct moat_policy p;
	moat_policy_init(&p);
	for (int i = 0; i < MOAT_QUOTAS; i++)
		cr_assert_eq(p.quotas[i], -1, "%s", moat_quota_info[i].name);
	moat_policy_free(&p);
}

Test(quota, flag_parse)
{
	int64_t q[MOAT_QUOTAS];
	for (int i = 0; i < MOAT_QUOTAS; i++)
		q[i] = -1;
	struct moat_err e = {0};
	cr_assert_eq(moat_quota_parse(q, "inotify_instances=4", &e), 0, "%s", e.msg);
	cr_assert_eq(q[MOAT_Q_INOTIFY_INSTANCES], 4);
	cr_assert_eq(moat_quota_parse(q, "user_namespaces=0", &e), 0, "%s", e.msg);
	cr_assert_eq(q[MOAT_Q_USER_NS], 0);
	cr_assert_eq(moat_quota_parse(q, "mq_bytes=8589934592", &e), 0, "%s", e.msg);
	cr_assert_eq(q[MOAT_Q_MQ_BYTES], INT64_C(8589934592));
	/* later wins */
	cr_assert_eq(moat_quota_parse(q, "inotify_instances=2", &e), 0, "%s", e.msg);
	cr_assert_eq(q[MOAT_Q_INOTIFY_INSTANCES], 2);

	static const struct {
		const char *arg, *needle;
	} bad[] = {
		{"bogus=1", "unknown quota 'bogus'"},
		{"inotify_instances", "expected NAME=N"},
		{"=3", "expected NAME=N"},
		{"inotify_instances=", "inotify_instances"},
		{"inotify_instances=-1", "inotify_instances"},
		{"inotify_instances=+1", "inotify_instances"},
		{"inotify_instances=1x", "inotify_instances"},
		{"inotify_instances=2147483648", "from 0 to 2147483647"},
		{"sigpending=99999999999999999999", "sigpending"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int64_t before = q[MOAT_Q_INOTIFY_INSTANCES];
		e = (struct moat_err){0};
		cr_assert_eq(moat_quota_parse(q, bad[i].arg, &e), -1, "accepted %s", bad[i].arg);
		cr_assert_eq(e.kind, MOAT_E_USAGE);
		assert_has(e.msg, bad[i].needle);
		cr_assert_eq(q[MOAT_Q_INOTIFY_INSTANCES], before, "%s changed it", bad[i].arg);
	}
}

Test(quota, json_object)
{
	struct moat_policy p;
	moat_policy_init(&p);
	struct moat_err e = {0};
	cr_assert_eq(load(&p, "{\"quotas\": {\"inotify_watches\": 5000, \"pid_namespaces\": 0,"
			      " \"sigpending\": 64}}", &e), 0, "%s", e.msg);
	cr_assert_eq(p.quotas[MOAT_Q_INOTIFY_WATCHES], 5000);
	cr_assert_eq(p.quotas[MOAT_Q_PID_NS], 0);
	cr_assert_eq(p.quotas[MOAT_Q_SIGPENDING], 64);
	cr_assert_eq(p.quotas[MOAT_Q_INOTIFY_INSTANCES], -1);
	/* a later file overrides key by key; null and {} change nothing */
	cr_assert_eq(load(&p, "{\"quotas\": {\"sigpending\": 8}}", &e), 0, "%s", e.msg);
	cr_assert_eq(load(&p, "{\"quotas\": null}", &e), 0, "%s", e.msg);
	cr_assert_eq(load(&p, "{\"quotas\": {}}", &e), 0, "%s", e.msg);
	cr_assert_eq(p.quotas[MOAT_Q_SIGPENDING], 8);
	cr_assert_eq(p.quotas[MOAT_Q_INOTIFY_WATCHES], 5000);
	moat_policy_free(&p);
}

Test(quota, json_errors_name_the_key_and_change_nothing)
{
	static const struct {
		const char *json, *needle;
	} bad[] = {
		{"{\"quotas\": {\"inotify_instancez\": 1}}", "pol.json: quotas.inotify_instancez: unknown key"},
		{"{\"quotas\": {\"inotify_instances\": -1}}", "quotas.inotify_instances: must be an integer"},
		{"{\"quotas\": {\"inotify_instances\": 1.5}}", "quotas.inotify_instances: must be an integer"},
		{"{\"quotas\": {\"inotify_instances\": \"4\"}}", "quotas.inotify_instances: must be an integer"},
		{"{\"quotas\": {\"user_namespaces\": 2147483648}}", "quotas.user_namespaces"},
		{"{\"quotas\": {\"mq_bytes\": true}}", "quotas.mq_bytes"},
		{"{\"quotas\": [1]}", "quotas: must be an object"},
		{"{\"quotas\": {\"sigpending\": 3, \"nope\": 1}}", "quotas.nope: unknown key"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct moat_policy p;
		moat_policy_init(&p);
		struct moat_err e = {0};
		cr_assert_eq(load(&p, "{\"quotas\": {\"sigpending\": 7}}", &e), 0, "%s", e.msg);
		cr_assert_eq(load(&p, bad[i].json, &e), -1, "accepted %s", bad[i].json);
		cr_assert_eq(e.kind, MOAT_E_USAGE);
		assert_has(e.msg, bad[i].needle);
		/* nothing of a failing file is applied */
		cr_assert_eq(p.quotas[MOAT_Q_SIGPENDING], 7, "%s", bad[i].json);
		moat_policy_free(&p);
	}
}
