/* moat-client: the API subcommands of `moat`. Each command gets argv with
 * argv[0] = its name and returns the process exit status. */
#ifndef MOAT_CLIENT_H
#define MOAT_CLIENT_H

#include <moat/err.h>

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

int moat_client_create(int argc, char **argv);
int moat_client_ls(int argc, char **argv);
int moat_client_rm(int argc, char **argv);
int moat_client_pause(int argc, char **argv);
int moat_client_resume(int argc, char **argv);
int moat_client_exec(int argc, char **argv);
int moat_client_attach(int argc, char **argv);
int moat_client_ps(int argc, char **argv);
int moat_client_kill(int argc, char **argv);
int moat_client_cp(int argc, char **argv);
int moat_client_patch(int argc, char **argv);
int moat_client_mcp(int argc, char **argv);
int moat_client_image(int argc, char **argv);
int moat_client_snapshot(int argc, char **argv);
int moat_client_fork(int argc, char **argv);
int moat_client_restore(int argc, char **argv);
int moat_client_session(int argc, char **argv);

static inline void client_json_decrefp(json_t **j)
{
	json_decref(*j);
}
#define _cleanup_json_ __attribute__((cleanup(client_json_decrefp)))

/* Exit status of moat's own failures (bad usage, server errors). */
#define CLIENT_FAIL 125

/* "moat CMD: msg" on stderr; returns CLIENT_FAIL. */
int client_fail(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int client_fail_err(const char *cmd, const struct moat_err *e);

/* The end of every command's --help: the environment that picks the
 * server (MOAT_URL, MOAT_API_TOKEN), said once for all of them. */
void client_help_footer(FILE *f);

/* Report a getopt error ('?' or ':') for cmd; returns CLIENT_FAIL. */
int client_bad_option(const char *cmd, int c, char **argv);

/* A subcommand's options, permuted (they may follow its ids): --help
 * prints help and the footer; every other option of opts[] goes into
 * vals[i] (optarg, or "1" for a flag), opts[i] being its entry. When
 * opts[0] is --output ('o'), -o is its short form. 1: help printed;
 * 0: go on; CLIENT_FAIL: a bad option, said. */
int client_parse(int argc, char **argv, const char *cmd, const char *help,
		 const struct option *opts, const char **vals);
/* opts for a command whose only option is --help (vals may be NULL). */
extern const struct option client_help_only[];

/* Read all of fd into a malloc'd, NUL-terminated buffer (at most cap
 * bytes; more is an error naming what). */
int client_read_all(int fd, size_t cap, const char *what, char **out,
		    size_t *len, struct moat_err *e);

/* "K=V" into obj[K] = V. With allow_env, a bare "K" takes the caller's $K. */
int client_add_kv(json_t *obj, const char *arg, const char *opt, int allow_env,
		  struct moat_err *e);

/* o[key] if it is a string, else dflt (tables of listings). */
const char *client_str_or(json_t *o, const char *key, const char *dflt);

struct moat_http;

/* o as indented JSON on stdout; CLIENT_FAIL (said) when it cannot be written. */
int client_print_json(const char *cmd, json_t *o);

/* ans[key], a string, on a line of stdout (the id a create answers with);
 * an answer without it is an error naming the server h and what. 0, or
 * CLIENT_FAIL (said). */
int client_print_id(const char *cmd, struct moat_http *h, json_t *ans, const char *key,
		    const char *what);

/* GET path (with query: key, value, ..., NULL; or NULL) and print its list
 * answer[key]: the JSON answer with as_json, else print(list) (a table);
 * errors name the server. */
int client_list(const char *cmd, const char *path, const char *const *query, const char *key,
		bool as_json, int (*print)(json_t *list));

/* GET path(h, name) from the server and print the answer as JSON; errors
 * name name. */
int client_show(const char *cmd, const char *name,
		char *(*path)(struct moat_http *h, const char *name));

/* DELETE path(h, name) for every name, each failure said naming it; stops
 * at the first that cannot reach the server. 0, or CLIENT_FAIL. */
int client_delete_each(const char *cmd, char **names, int n,
		       char *(*path)(struct moat_http *h, const char *name));

/* Write n bytes to f; -1 with e filled on failure. */
int client_write(FILE *f, const void *data, size_t n, struct moat_err *e);

/* GET path (a streamed answer of type accept) into the file out, made
 * whole or not at all (written to out.part, renamed once complete, removed
 * on failure), or to stdout when out is "-". An answer with no body is an
 * empty file when empty_ok, else an error; errors name what. 0, or
 * CLIENT_FAIL (said). */
int client_download(const char *cmd, struct moat_http *h, const char *path, const char *accept,
		    const char *out, bool empty_ok, const char *what);

#endif
