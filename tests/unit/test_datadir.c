/* Unit tests for moat serve's default data directory (src/serve/datadir.c). */
#include <criterion/criterion.h>

#include "serve/datadir.h"

#include <limits.h>
#include <string.h>

/* The environment of one case: NAME=VALUE pairs, NULL-terminated. */
static const char *const *fake;

static const char *fake_env(const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; fake && fake[i]; i++)
		if (!strncmp(fake[i], name, n) && fake[i][n] == '=')
			return fake[i] + n + 1;
	return NULL;
}

static const char *dir_of(uid_t uid, const char *const *env)
{
	static char out[PATH_MAX];
	struct moat_err e = {0};
	fake = env;
	cr_assert_eq(serve_default_data_dir(uid, fake_env, out, sizeof out, &e), 0, "%s", e.msg);
	return out;
}

Test(datadir, user_xdg_state_home)
{
	const char *env[] = {"HOME=/home/u", "XDG_STATE_HOME=/x/state", NULL};
	cr_assert_str_eq(dir_of(1000, env), "/x/state/moat");
}

Test(datadir, user_home_without_xdg)
{
	const char *env[] = {"HOME=/home/u", NULL};
	cr_assert_str_eq(dir_of(1000, env), "/home/u/.local/state/moat");
	/* the XDG spec: a relative XDG_STATE_HOME is ignored */
	const char *rel[] = {"HOME=/home/u", "XDG_STATE_HOME=var", NULL};
	cr_assert_str_eq(dir_of(1000, rel), "/home/u/.local/state/moat");
}

Test(datadir, root_gets_var_lib)
{
	const char *env[] = {"HOME=/root", "XDG_STATE_HOME=/root/.local/state", NULL};
	cr_assert_str_eq(dir_of(0, env), "/var/lib/moat");
}

Test(datadir, systemd_state_directory_first)
{
	const char *env[] = {"HOME=/root", "STATE_DIRECTORY=/var/lib/moat2:/var/lib/other", NULL};
	cr_assert_str_eq(dir_of(0, env), "/var/lib/moat2");
	cr_assert_str_eq(dir_of(1000, env), "/var/lib/moat2");
}

Test(datadir, no_home_is_an_error_naming_the_fix)
{
	char out[PATH_MAX];
	struct moat_err e = {0};
	const char *env[] = {NULL};
	fake = env;
	cr_assert_eq(serve_default_data_dir(1000, fake_env, out, sizeof out, &e), -1);
	cr_assert(strstr(e.msg, "HOME") && strstr(e.msg, "--data"), "%s", e.msg);
	cr_assert_eq(serve_default_data_dir(1000, fake_env, out, 4, &e), -1);
	const char *env2[] = {"HOME=/home/u", NULL};
	fake = env2;
	cr_assert_eq(serve_default_data_dir(1000, fake_env, out, 8, &e), -1);
	cr_assert(strstr(e.msg, "too long"), "%s", e.msg);
}
