/* Manifest clones in a throwaway sandbox: see clone.h. */
#define _GNU_SOURCE
#include "clone.h"

#include "../base/exe.h"
#include "../base/tooltail.h"
#include "../base/utf8.h"
#include "../base/util.h"
#include "gate/policy.h"

#include <moat/policy.h>
#include <moat/strv.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEEDS "clones"
#define CLONE_TIMEOUT "300" /* seconds: a hung remote must not hold a create forever */

/* ---- the daemon's check, before anything starts ------------------------- */

static int bad(struct moat_err *e, const char *where, const char *fmt, const char *arg)
{
	char msg[600];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(msg, sizeof msg, fmt, arg);
#pragma GCC diagnostic pop
	moat_err_set(e, MOAT_E_USAGE, 0, "%s: %s", where, msg);
	moat_utf8_clean(e->msg); /* cut at a byte count: JSON needs UTF-8 */
	e->errnum = EINVAL;
	return -1;
}

/* The protected name (moat_mandatory_deny, _existing) a clone at rel would
 * land on or under, or one it would create inside rel, or NULL. A .git
 * component anywhere is one: the remote's tree would be taken for that
 * repository's config and hooks (rel/.git, which the clone itself makes,
 * is the nested repository and protected as such). */
static const char *protected_at(const char *rel)
{
	for (const char *s = rel; *s;) {
		size_t l = strcspn(s, "/");
		if (l == 4 && !memcmp(s, ".git", 4))
			return ".git";
		s += l;
		s += *s == '/';
	}
	const char *const *lists[] = {moat_mandatory_deny, moat_mandatory_deny_existing};
	size_t rl = strlen(rel);
	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; lists[k][i]; i++) {
			const char *m = lists[k][i];
			size_t ml = strlen(m);
			if (ml && m[ml - 1] == '/')
				ml--;
			/* rel is m or below it; or m is below rel */
			if ((rl >= ml && !memcmp(rel, m, ml) && (rl == ml || rel[ml] == '/')) ||
			    (ml > rl && !memcmp(m, rel, rl) && m[rl] == '/'))
				return lists[k][i];
		}
	return NULL;
}

/* host and port of an http(s) URL: the authority after "://", without
 * user info; [v6] in brackets. */
static int url_host(const char *url, char *host, size_t cap, uint16_t *port)
{
	bool tls = !strncmp(url, "https://", 8);
	const char *a = url + (tls ? 8 : 7);
	size_t alen = strcspn(a, "/?#");
	const char *at = memrchr(a, '@', alen);
	if (at) {
		alen -= (size_t)(at + 1 - a);
		a = at + 1;
	}
	const char *end = a + alen, *colon = NULL;
	if (*a == '[') {
		const char *rb = memchr(a, ']', alen);
		if (!rb || (rb + 1 < end && rb[1] != ':'))
			return -1;
		colon = rb + 1 < end ? rb + 1 : NULL;
	} else {
		colon = memchr(a, ':', alen);
	}
	size_t hl = (size_t)((colon ? colon : end) - a);
	if (hl == 0 || hl >= cap)
		return -1;
	memcpy(host, a, hl);
	host[hl] = '\0';
	if (host[0] == '[') { /* the gateway's patterns take v6 bare */
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	*port = tls ? 443 : 80;
	if (colon && colon + 1 < end) {
		char pb[8];
		size_t pl = (size_t)(end - colon - 1);
		if (pl >= sizeof pb || strspn(colon + 1, "0123456789") < pl)
			return -1;
		memcpy(pb, colon + 1, pl);
		pb[pl] = '\0';
		long v = strtol(pb, NULL, 10);
		if (v < 1 || v > 65535)
			return -1;
		*port = (uint16_t)v;
	}
	return 0;
}

static int check_one(const char *where, json_t *v, const json_t *net,
		     const struct gate_policy *ceiling, bool disk, struct moat_err *e)
{
	const char *repo = json_string_value(json_object_get(v, "repo"));
	if (!repo)
		return 0; /* manifest_build names what is wrong */
	const char *ref = json_string_value(json_object_get(v, "ref"));
	for (const char *const *s = (const char *const[]){repo, ref ? ref : "", NULL}; *s; s++)
		for (const char *p = *s; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f) /* else quoted back raw */
				return bad(e, where, "%s contains a control character",
					   *s == repo ? "repo" : "ref");
	if (disk)
		return bad(e, where, "a git_repo entry cannot be combined with limits.disk "
			   "(the clone goes into the workspace before the start, and a disk "
			   "limit makes the workspace a private in-memory filesystem)%s", "");
	if (repo[0] == '/')
		return 0; /* a host path: file://, checked against --allow-host-path */
	const char *auth = strstr(repo, "://");
	if (auth && memchr(auth + 3, '@', strcspn(auth + 3, "/?#"))) /* not even quoted back */
		return bad(e, where, "repo: a URL with user info (user:password@) is refused: it "
			   "would be on the clone's command line and in messages (a manifest's "
			   "clone has no credentials): put it in network.secrets and clone "
			   "from inside the sandbox%s", "");
	bool http = !strncmp(repo, "https://", 8) || !strncmp(repo, "http://", 7);
	if (!http)
		return bad(e, where, "repo %.300s: only https:// and http:// URLs (fetched "
			   "through the sandbox's egress gateway) and host paths under "
			   "--allow-host-path are cloned (no ssh, git:// or other transports)", repo);
	json_t *allow = json_object_get(net, "allow");
	if (!ceiling || !json_array_size(allow))
		return bad(e, where, "repo %.300s: the sandbox has no network (network.allow), "
			   "and a clone obeys the same egress rules: nothing is fetched", repo);
	char host[256], why[GATE_WHY_CAP] = "";
	uint16_t port;
	if (url_host(repo, host, sizeof host, &port) < 0)
		return bad(e, where, "repo %.300s: cannot tell the host of this URL", repo);
	struct gate_policy p;
	gate_policy_init(&p);
	int rc = 0;
	for (int k = 0; k < GATE_LISTS && rc == 0; k++) {
		size_t i;
		json_t *s;
		json_array_foreach(json_object_get(net, gate_list_keys[k]), i, s)
		{
			struct moat_err e2 = {0};
			if (gate_policy_add(&p, (enum gate_list)k, json_string_value(s), &e2) < 0) {
				rc = bad(e, where, "network: %s", e2.msg);
				break;
			}
		}
	}
	char dest[300];
	snprintf(dest, sizeof dest, "%s:%u", host, (unsigned)port);
	if (rc == 0 && gate_check_name(&p, host, port, why) != GATE_ALLOW)
		rc = bad(e, where, "repo: %s is not in the sandbox's network allowlist", dest);
	else if (rc == 0 && gate_check_name(ceiling, host, port, why) != GATE_ALLOW)
		rc = bad(e, where, "repo: %s is outside the operator's --net-allow", dest);
	gate_policy_free(&p);
	return rc;
}

/* As deep as manifest_build goes (no depth bound of its own, as
 * manifest_is_slow): a git_repo anywhere is checked. rel is built as
 * manifest_build builds it. */
static int check_entries(json_t *obj, const char *where, const char *prefix, const json_t *net,
			 const struct gate_policy *ceiling, bool disk, struct moat_err *e)
{
	if (!json_is_object(obj))
		return 0;
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		char w[1024], rel[PATH_MAX];
		snprintf(w, sizeof w, "%s.%s", where, k);
		const char *kk = k;
		if (!strncmp(kk, "/workspace/", 11) && !*prefix)
			kk += 11;
		while (!strncmp(kk, "./", 2))
			kk += 2;
		if (snprintf(rel, sizeof rel, "%s%s%s", prefix, *prefix ? "/" : "", kk) >=
		    (int)sizeof rel)
			continue; /* manifest_build names it */
		size_t rl = strlen(rel);
		while (rl > 1 && rel[rl - 1] == '/')
			rel[--rl] = '\0';
		const char *t = json_string_value(json_object_get(v, "type"));
		if (t && !strcmp(t, "git_repo")) {
			const char *m = protected_at(rel);
			if (m) {
				bad(e, w, "%s: protected by the sandbox policy (a clone there "
					  "would write the repository's files on or under a "
					  "protected name); nothing was applied", m);
				e->errnum = EACCES;
				return -1;
			}
			if (check_one(w, v, net, ceiling, disk, e) < 0)
				return -1;
		}
		if (t && !strcmp(t, "dir")) {
			char w2[1100];
			snprintf(w2, sizeof w2, "%s.children", w);
			if (check_entries(json_object_get(v, "children"), w2, rel, net, ceiling,
					  disk, e) < 0)
				return -1;
		}
	}
	return 0;
}

int clone_check(json_t *m, const json_t *network, const struct gate_policy *ceiling, bool disk,
		struct moat_err *e)
{
	return check_entries(json_object_get(m, "entries"), "manifest.entries", "", network,
			     ceiling, disk, e);
}

/* ---- seed directories ----------------------------------------------------- */

int clone_seed_dir(char *out, size_t cap, struct moat_err *e)
{
	if (mkdir(SEEDS, 0700) < 0 && errno != EEXIST)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, SEEDS);
	if (snprintf(out, cap, SEEDS "/XXXXXX") >= (int)cap)
		return moat_err_set(e, MOAT_E_SYSTEM, ENAMETOOLONG, SEEDS);
	/* 0755 like any workspace: it becomes one */
	bool made = mkdtemp(out) != NULL;
	if (!made || chmod(out, 0755) < 0) {
		int err = errno;
		if (made)
			rmdir(out);
		out[0] = '\0';
		return moat_err_set(e, MOAT_E_SYSTEM, err, "seed directory");
	}
	return 0;
}

void clone_sweep(void)
{
	DIR *d = opendir(SEEDS);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char p[sizeof SEEDS + 300];
		if (snprintf(p, sizeof p, SEEDS "/%s", de->d_name) < (int)sizeof p)
			moat_rm_tree(p);
	}
	if (d)
		closedir(d);
}

/* ---- the clone ------------------------------------------------------------- */

static void add(struct moat_strv *a, const char *s)
{
	moat_strv_add(a, s);
}

static void add2(struct moat_strv *a, const char *opt, const char *v)
{
	moat_strv_add(a, opt);
	moat_strv_add(a, v);
}

/* git's own settings for every command: only the allowed transports, no
 * credential helper, hook, fsmonitor, filter or submodule runs. */
static void git_opts(struct moat_strv *a, const char *src)
{
	static const char *const cfg[] = {
		"protocol.allow=never", "protocol.https.allow=always", "protocol.http.allow=always",
		"credential.helper=", "core.hooksPath=/dev/null", "core.fsmonitor=false",
		"core.askPass=", "filter.lfs.smudge=", "filter.lfs.process=",
		"filter.lfs.required=false", "submodule.recurse=false", NULL};
	add(a, "git");
	for (size_t i = 0; cfg[i]; i++)
		add2(a, "-c", cfg[i]);
	add2(a, "-c", src ? "protocol.file.allow=always" : "protocol.file.allow=never");
}

/* The moat run command line around argv (from "git"). */
static void run_opts(struct moat_strv *a, const struct clone_ctx *c, const char *seed,
		     const char *src, bool net)
{
	/* (not found: the path that failed, so that the run's error names it) */
	char moat[PATH_MAX];
	if (moat_exe_find("moat", moat, sizeof moat, NULL) < 0)
		snprintf(moat, sizeof moat, "moat");
	add(a, moat);
	add(a, "run");
	add2(a, "--workspace", seed);
	add2(a, "--timeout", CLONE_TIMEOUT);
	char num[32];
	if (c->memory) {
		snprintf(num, sizeof num, "%llu", (unsigned long long)c->memory);
		add2(a, "--memory", num);
	}
	if (c->pids) {
		snprintf(num, sizeof num, "%llu", (unsigned long long)c->pids);
		add2(a, "--pids", num);
	}
	if (c->cpu_milli) {
		snprintf(num, sizeof num, "%llu.%03llu", (unsigned long long)c->cpu_milli / 1000,
			 (unsigned long long)c->cpu_milli % 1000);
		add2(a, "--cpus", num);
	}
	for (int i = 0; i < MOAT_QUOTAS; i++) {
		if (c->quotas[i] < 0)
			continue;
		char q[96];
		snprintf(q, sizeof q, "%s=%lld", moat_quota_info[i].name, (long long)c->quotas[i]);
		add2(a, "--quota", q);
	}
	if (src)
		add2(a, "--allow-read", src);
	if (net && c->network) {
		static const char *const flags[GATE_LISTS] = {"--allow-domain", "--deny-domain",
							      "--resolve"};
		for (int k = 0; k < GATE_LISTS; k++) {
			size_t i;
			json_t *v;
			json_array_foreach(json_object_get(c->network, gate_list_keys[k]), i, v)
				add2(a, flags[k], json_string_value(v));
		}
		for (size_t i = 0; c->ceiling && c->ceiling[i]; i++)
			add2(a, "--net-ceiling", c->ceiling[i]);
	}
	static const char *const env[] = {"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
					  "GIT_TERMINAL_PROMPT=0", "GIT_LFS_SKIP_SMUDGE=1", NULL};
	for (size_t i = 0; env[i]; i++)
		add2(a, "--env", env[i]);
	add(a, "--");
}

/* Run argv; 0 when it exited 0. The end of its stderr, quoted (git's
 * words, partly the remote's), goes to msg. */
static int run(struct moat_strv *argv, char *msg, size_t cap)
{
	msg[0] = '\0';
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	/* nothing of the daemon's environment (GIT_*, SSH_AUTH_SOCK, proxies),
	 * and a home that is not the daemon's: moat run makes it a private
	 * empty directory, as in a served sandbox */
	char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
			"HOME=/home/sandbox", NULL};
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(p[1], 2) < 0)
			_exit(125);
		execve(argv->v[0], argv->v, envp);
		dprintf(2, "cannot run %s: %s\n", argv->v[0], strerror(errno));
		_exit(125);
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	moat_tail_read(p[0], msg, cap); /* a read error still waits for the child */
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int clone_run(const struct clone_ctx *c, const char *seed, const char *where, const char *rel,
	      const char *repo, const char *src, const char *ref, struct moat_err *e)
{
	char ws[PATH_MAX], msg[MOAT_TAIL_MAX + 1];
	if (!realpath(seed, ws))
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s: seed directory", where);
	struct moat_strv a = {0};
	run_opts(&a, c, ws, src, !src);
	git_opts(&a, src);
	add(&a, "clone");
	add(&a, "--quiet");
	add(&a, "--no-recurse-submodules");
	add(&a, "--template=");
	/* the source belongs to a host user, not the sandbox's (git's
	 * ownership check); it is the only repository shown. Given to
	 * upload-pack itself: git clears -c settings for a local transport. */
	if (src)
		add2(&a, "--upload-pack", "git -c safe.directory=* upload-pack");
	add(&a, "--");
	char *url = src ? moat_strdupf("file://%s", src) : strdup(repo);
	add(&a, url);
	free(url);
	add(&a, rel);
	int rc = run(&a, msg, sizeof msg);
	moat_strv_free(&a);
	if (rc < 0) {
		moat_err_set(e, MOAT_E_USAGE, 0, "%s: git clone %.200s failed%s%s", where, repo,
			     msg[0] ? ": " : "", msg);
		moat_utf8_clean(e->msg); /* cut at byte counts: JSON needs UTF-8 */
		e->errnum = EINVAL;
		return -1;
	}
	if (!ref)
		return 0;
	/* the checkout needs no network: none is given */
	run_opts(&a, c, ws, NULL, false);
	git_opts(&a, NULL);
	add2(&a, "-C", rel);
	add(&a, "checkout");
	add(&a, "--quiet");
	add(&a, ref);
	add(&a, "--");
	rc = run(&a, msg, sizeof msg);
	moat_strv_free(&a);
	if (rc < 0) {
		moat_err_set(e, MOAT_E_USAGE, 0, "%s: git checkout %.200s failed%s%s", where, ref,
			     msg[0] ? ": " : "", msg);
		moat_utf8_clean(e->msg);
		e->errnum = EINVAL;
		return -1;
	}
	return 0;
}
