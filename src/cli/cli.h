/* Front-end commands. Each returns the process exit status. */
#ifndef MOAT_CLI_H
#define MOAT_CLI_H

int moat_cmd_run(int argc, char **argv);
int moat_cmd_doctor(int argc, char **argv);

/* "moat: msg" on stderr; always returns 125 (moat's own errors). */
int moat_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
