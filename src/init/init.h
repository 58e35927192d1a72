/* The pid-1 supervisor inside every sandbox. It is already inside every
 * namespace and under every filter when it starts the command, so the
 * command inherits the whole confinement. It reaps orphans, forwards
 * signals to the command's process group, and when the command ends it
 * kills everything left in the sandbox and exits with the command's status
 * (128+N for death by signal N). Allocation-free. */
#ifndef MOAT_INIT_H
#define MOAT_INIT_H

#include <stdbool.h>

struct moat_init_args {
	char *const *argv;
	char *const *envp;
	const char *cwd;
	int err_fd;    /* setup/exec errors go here as struct jail_msg; CLOEXEC */
	int status_fd; /* the exit code (an int) once every process is gone */
	bool ctty;     /* stdin is the sandbox's pty: make it the command's
			* controlling terminal, its process group the foreground */
};

__attribute__((noreturn)) void moat_init_main(const struct moat_init_args *a);

#endif
