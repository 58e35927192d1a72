/* Unit tests for clone_check (src/serve/clone.c): which git_repo entries a
 * create may have fetched, decided before anything starts. */
#include <criterion/criterion.h>

#include "gate/policy.h"
#include "serve/clone.h"

#include <errno.h>
#include <string.h>

static struct gate_policy ceil_pol;

static void setup(void)
{
	struct moat_err e = {0};
	gate_policy_init(&ceil_pol);
	cr_assert_eq(gate_policy_add_allow(&ceil_pol, "*.example.com", &e), 0, "%s", e.msg);
	cr_assert_eq(gate_policy_add_allow(&ceil_pol, "git.test", &e), 0, "%s", e.msg);
	cr_assert_eq(gate_policy_add_allow(&ceil_pol, "[::1]:8080", &e), 0, "%s", e.msg);
}

static void teardown(void)
{
	gate_policy_free(&ceil_pol);
}

/* 0 when the entry {"r": git_repo url} passes under network net (JSON). */
static int check(const char *url, const char *net, bool disk, struct moat_err *e)
{
	json_t *m = json_pack("{s:{s:{s:s,s:s}}}", "entries", "r", "type", "git_repo", "repo", url);
	json_t *n = net ? json_loads(net, 0, NULL) : NULL;
	int rc = clone_check(m, n, &ceil_pol, disk, e);
	json_decref(m);
	json_decref(n);
	return rc;
}

TestSuite(clone, .init = setup, .fini = teardown);

Test(clone, allowed_urls_pass)
{
	struct moat_err e = {0};
	const char *net = "{\"allow\":[\"*.example.com\",\"git.test\",\"::1\"]}";
	cr_expect_eq(check("https://a.example.com/x.git", net, false, &e), 0, "%s", e.msg);
	cr_expect_eq(check("https://git.test", net, false, &e), 0, "%s", e.msg);
	cr_expect_eq(check("http://[::1]:8080/x", net, false, &e), 0, "%s", e.msg);
	cr_expect_eq(check("/srv/repo", NULL, false, &e), 0, "%s", e.msg);
}

Test(clone, refused_with_the_entry_named)
{
	const char *net = "{\"allow\":[\"*.example.com\",\"git.test\",\"other.test\",\"::1\"],"
			  "\"deny\":[\"bad.example.com\"]}";
	static const char *const bad[] = {
		"ssh://a.example.com/x.git", "git@a.example.com:x.git", "git://a.example.com/x",
		"ext::sh -c touch% /tmp/x", "fd::3", "file:///etc", "ftp://a.example.com/x",
		"https://bad.example.com/x",       /* denied by the sandbox */
		"https://other.test/x",            /* outside the operator's --net-allow */
		"http://[::1]:9090/x",             /* the operator allows only port 8080 */
		"https://evil.test\\@a.example.com/", /* user info: refused whatever the host */
		"http://user:pw@a.example.com:8443/x.git", "https://tok@a.example.com/x",
		"https://a.example.com:99999/x", "https://a.example.com:x/", "https://:443/", "https://",
		"http://[::1/x", NULL};
	for (size_t i = 0; bad[i]; i++) {
		struct moat_err e = {0};
		cr_expect_eq(check(bad[i], net, false, &e), -1, "%s passed", bad[i]);
		cr_expect_eq(e.errnum, EINVAL, "%s", bad[i]);
		cr_expect(strstr(e.msg, "manifest.entries.r") != NULL, "%s: %s", bad[i], e.msg);
	}
}

Test(clone, no_network_or_disk_limit_refused)
{
	struct moat_err e = {0};
	cr_expect_eq(check("https://a.example.com/x.git", NULL, false, &e), -1);
	cr_expect(strstr(e.msg, "no network") != NULL, "%s", e.msg);
	cr_expect_eq(check("https://a.example.com/x.git", "{\"allow\":[]}", false, &e), -1);
	cr_expect_eq(check("/srv/repo", NULL, true, &e), -1);
	cr_expect(strstr(e.msg, "limits.disk") != NULL, "%s", e.msg);
	/* no operator ceiling: sandboxes have no network at all */
	json_t *m = json_pack("{s:{s:{s:s,s:{s:{s:s,s:s}}}}}", "entries", "d", "type", "dir",
			      "children", "r", "type", "git_repo", "repo", "https://a.example.com/x");
	json_t *n = json_loads("{\"allow\":[\"a.example.com\"]}", 0, NULL);
	cr_expect_eq(clone_check(m, n, NULL, false, &e), -1);
	cr_expect(strstr(e.msg, "manifest.entries.d.children.r") != NULL, "%s", e.msg);
	json_decref(m);
	json_decref(n);
}

Test(clone, protected_names_refused_at_any_depth)
{
	static const char *const bad[] = {".git", "a/.git", "a/.git/b", ".git/hooks", ".vscode",
					  ".claude", ".claude/hooks/x", ".bashrc", NULL};
	for (size_t i = 0; bad[i]; i++) {
		struct moat_err e = {0};
		json_t *m = json_pack("{s:{s:{s:s,s:s}}}", "entries", bad[i], "type", "git_repo",
				      "repo", "/srv/repo");
		cr_expect_eq(clone_check(m, NULL, &ceil_pol, false, &e), -1, "%s passed", bad[i]);
		cr_expect_eq(e.errnum, EACCES, "%s", bad[i]);
		json_decref(m);
	}
	static const char *const ok[] = {".gitx", "a/.claudex", "src/.vscode-x", NULL};
	for (size_t i = 0; ok[i]; i++) {
		struct moat_err e = {0};
		json_t *m = json_pack("{s:{s:{s:s,s:s}}}", "entries", ok[i], "type", "git_repo",
				      "repo", "/srv/repo");
		cr_expect_eq(clone_check(m, NULL, &ceil_pol, false, &e), 0, "%s: %s", ok[i], e.msg);
		json_decref(m);
	}
	/* 100 levels down: still checked */
	json_t *node = json_pack("{s:{s:s,s:s}}", ".git", "type", "git_repo", "repo", "/srv/repo");
	for (int i = 0; i < 100; i++)
		node = json_pack("{s:{s:s,s:o}}", "d", "type", "dir", "children", node);
	json_t *m = json_pack("{s:o}", "entries", node);
	struct moat_err e = {0};
	cr_expect_eq(clone_check(m, NULL, &ceil_pol, false, &e), -1);
	cr_expect_eq(e.errnum, EACCES, "%s", e.msg);
	json_decref(m);
}
