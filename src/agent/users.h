/* Users mode in the agent (docs/SECURITY.md "Users mode"): the agent is
 * root (0) of its sandbox with Docker's capability set, the engine having
 * told it so (MOAT_AGENT_USERS=1 in its environment). Commands run as
 * user (1000, no capability) unless a request says "user": "root"; file
 * operations run with that user's fsuid/fsgid, so permissions and the
 * owner of what they create are that user's. Without users mode all of
 * this does nothing. */
#ifndef MOAT_AGENT_USERS_H
#define MOAT_AGENT_USERS_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

/* The engine started us in users mode. */
bool agent_users_on(void);
/* The uid a request's "user" names: 0 for "root", else 1000. */
uid_t agent_user_uid(const json_t *req);
/* Replace HOME, USER and LOGNAME of envp (NULL-terminated, from
 * malloc; its strings are borrowed) by the user's: returns a new array
 * and frees envp (NULL on OOM, envp freed). Users mode only. */
char **agent_user_env(char **envp, uid_t uid);
/* In the vfork child of an exec, before execve: become uid (1000: groups,
 * gid and uid, which empties every capability set; 0: stay root, whose
 * Docker set execve keeps). Raw system calls only. 0 or -1. */
int agent_user_become(uid_t uid);
/* File operations: run as the request's user (setfsuid/setfsgid) until
 * agent_fs_self(). */
void agent_fs_as(const json_t *req);
void agent_fs_self(void);

#endif
