/* Users mode in the agent: see users.h. */
#define _GNU_SOURCE
#include "users.h"

#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define USER_UID 1000

bool agent_users_on(void)
{
	static int on = -1;
	if (on < 0) {
		const char *v = getenv("MOAT_AGENT_USERS");
		on = v && !strcmp(v, "1");
	}
	return on;
}

uid_t agent_user_uid(const json_t *req)
{
	const char *u = json_string_value(json_object_get(req, "user"));
	return u && !strcmp(u, "root") ? 0 : USER_UID;
}

static bool is_var(const char *e, const char *name)
{
	size_t n = strlen(name);
	return !strncmp(e, name, n) && e[n] == '=';
}

char **agent_user_env(char **envp, uid_t uid)
{
	size_t n = 0;
	while (envp && envp[n])
		n++;
	char **out = calloc(n + 4, sizeof *out);
	if (!out) {
		free(envp);
		return NULL;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!is_var(envp[i], "HOME") && !is_var(envp[i], "USER") && !is_var(envp[i], "LOGNAME"))
			out[k++] = envp[i];
	out[k++] = uid == 0 ? "HOME=/root" : "HOME=/home/user";
	out[k++] = uid == 0 ? "USER=root" : "USER=user";
	out[k++] = uid == 0 ? "LOGNAME=root" : "LOGNAME=user";
	free(envp);
	return out;
}

int agent_user_become(uid_t uid)
{
	if (!agent_users_on() || uid == 0)
		return 0;
	/* raw calls: glibc's set*id would signal other threads (we have
	 * none), and the child must not touch the agent's memory */
	if (syscall(SYS_setgroups, 0, NULL) < 0 ||
	    syscall(SYS_setresgid, USER_UID, USER_UID, USER_UID) < 0 ||
	    syscall(SYS_setresuid, USER_UID, USER_UID, USER_UID) < 0)
		return -1;
	return 0;
}

void agent_fs_as(const json_t *req)
{
	if (!agent_users_on())
		return;
	uid_t u = agent_user_uid(req);
	setfsgid(u);
	setfsuid(u);
}

void agent_fs_self(void)
{
	if (!agent_users_on())
		return;
	setfsuid(0);
	setfsgid(0);
}
