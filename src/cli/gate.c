/* moat run's egress gateway: start moat-gate (see src/gatebin/main.c),
 * give it the policy and the secrets' real values, put the proxy
 * variables, placeholders and CA files into the sandbox, hand it the
 * sandbox's listening sockets, and print what it refused at the end. */
#define _GNU_SOURCE
#include "cli.h"

#include "gate/policy.h"
#include "../base/exe.h"
#include "../base/fdpass.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

struct run_gate {
	pid_t pid;
	int ctl;
	char cadir[64];
};


/* Set NAME=VALUE in env, replacing an earlier NAME. */
static void env_set(struct moat_strv *env, const char *name, const char *value)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i < env->n; i++)
		if (!strncmp(env->v[i], name, nl) && env->v[i][nl] == '=') {
			free(env->v[i]);
			env->v[i] = moat_strdupf("%s=%s", name, value);
			return;
		}
	moat_strv_take(env, moat_strdupf("%s=%s", name, value));
}

static int write_all(const char *path, const char *a, const char *b, struct moat_err *e)
{
	/* certificates only (the key stays in moat-gate's memory), read by
	 * the sandbox's user (host uid 65534 in root runs): 0644 whatever
	 * the caller's umask */
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", path);
	if (fchmod(fd, 0644) < 0) {
		int err = errno;
		close(fd);
		return moat_err_set(e, MOAT_E_SYSTEM, err, "%s", path);
	}
	const char *parts[] = {a, b};
	for (int i = 0; i < 2; i++)
		if (parts[i] && moat_write_all(fd, parts[i], strlen(parts[i])) < 0) {
			int err = errno;
			close(fd);
			return moat_err_set(e, MOAT_E_SYSTEM, err, "%s", path);
		}
	return close(fd) < 0 ? moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", path) : 0;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t cap = 0, len = 0;
	for (;;) {
		if (len + 65536 > cap) {
			char *nb = realloc(buf, cap = len + 65536 + cap);
			if (!nb)
				break;
			buf = nb;
		}
		size_t n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	fclose(f);
	if (buf)
		buf[len] = '\0';
	return buf;
}

static void kill_gate(struct run_gate *g)
{
	if (g->pid > 0) {
		kill(g->pid, SIGKILL);
		waitpid(g->pid, NULL, 0);
		g->pid = -1;
	}
}

static void gate_free(struct run_gate *g)
{
	kill_gate(g);
	if (g->ctl >= 0)
		close(g->ctl);
	if (g->cadir[0]) {
		char p[128];
		snprintf(p, sizeof p, "%s/ca.pem", g->cadir);
		unlink(p);
		snprintf(p, sizeof p, "%s/bundle.pem", g->cadir);
		unlink(p);
		rmdir(g->cadir);
	}
	free(g);
}

int run_gate_start(struct moat_policy *p, struct moat_strv *env, const char *net_log,
		   const char *upstream_ca, const struct moat_strv *ceiling,
		   struct run_gate **out, struct moat_err *e)
{
	*out = NULL;
	struct run_gate *g = calloc(1, sizeof *g);
	if (!g)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "gateway");
	g->ctl = -1;
	g->pid = -1;
	json_t *cfg = json_pack("{s:s,s:[],s:[],s:[],s:[]}", "name", "run", "allow", "deny",
				"resolve", "secrets");
	const struct moat_strv *lists[] = {&p->net_allow, &p->net_deny, &p->net_resolve};
	const char *keys[] = {"allow", "deny", "resolve"};
	for (int k = 0; k < 3; k++)
		for (size_t i = 0; i < lists[k]->n; i++)
			json_array_append_new(json_object_get(cfg, keys[k]),
					      json_string(lists[k]->v[i]));
	/* secrets: the sandbox gets a random placeholder, the gateway the value */
	for (size_t i = 0; i < p->net_secrets.n; i++) {
		const char *spec = p->net_secrets.v[i];
		const char *at = strchr(spec, '@');
		char name[256];
		snprintf(name, sizeof name, "%.*s", (int)(at - spec), spec);
		const char *value = getenv(name);
		if (!value || !*value) {
			json_decref(cfg);
			free(g);
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "--secret %s: $%s is not set in moat's environment", spec,
					    name);
		}
		unsigned char r[16];
		if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
			json_decref(cfg);
			free(g);
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "random placeholder");
		}
		char ph[64] = "moat_secret_";
		for (int k = 0; k < 16; k++)
			snprintf(ph + 12 + 2 * k, 3, "%02x", r[k]);
		json_t *hosts = json_array();
		char *list = strdup(at + 1), *save = NULL;
		for (char *h = strtok_r(list, ",", &save); h; h = strtok_r(NULL, ",", &save))
			json_array_append_new(hosts, json_string(h));
		free(list);
		json_array_append_new(json_object_get(cfg, "secrets"),
				      json_pack("{s:s,s:s,s:o}", "placeholder", ph, "value", value,
						"hosts", hosts));
		env_set(env, name, ph);
	}
	if (ceiling && ceiling->n) {
		json_t *c = json_array();
		for (size_t i = 0; i < ceiling->n; i++)
			json_array_append_new(c, json_string(ceiling->v[i]));
		json_object_set_new(cfg, "ceiling", c);
	}
	if (net_log)
		json_object_set_new(cfg, "log", json_string(net_log));
	if (upstream_ca)
		json_object_set_new(cfg, "upstream_ca", json_string(upstream_ca));

	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		json_decref(cfg);
		free(g);
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "gateway socket");
	}
	char exe[PATH_MAX];
	if (moat_exe_find("moat-gate", exe, sizeof exe, e) < 0) {
		json_decref(cfg);
		close(sp[0]);
		close(sp[1]);
		free(g);
		return moat_err_prefix(e, "gateway");
	}
	g->pid = fork();
	if (g->pid == 0) {
		if (dup2(sp[1], 3) < 0)
			_exit(125);
		syscall(SYS_close_range, 4, ~0U, 0);
		char *argv[] = {"moat-gate", NULL};
		execv(exe, argv);
		dprintf(2, "moat: cannot run %s: %s\n", exe, strerror(errno));
		_exit(125);
	}
	close(sp[1]);
	g->ctl = sp[0];
	if (g->pid < 0) {
		json_decref(cfg);
		gate_free(g);
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "start the gateway");
	}
	char *js = json_dumps(cfg, JSON_COMPACT);
	json_decref(cfg);
	ssize_t w = js ? send(g->ctl, js, strlen(js), MSG_NOSIGNAL) : -1;
	if (js) {
		explicit_bzero(js, strlen(js));
		free(js);
	}
	char *reply = malloc(1 << 20);
	ssize_t rn = w > 0 && reply ? recv(g->ctl, reply, (1 << 20) - 1, 0) : -1;
	json_t *r = rn > 0 ? json_loadb(reply, (size_t)rn, 0, NULL) : NULL;
	free(reply);
	if (!json_is_true(json_object_get(r, "ok"))) {
		const char *why = json_string_value(json_object_get(r, "error"));
		moat_err_set(e, MOAT_E_USAGE, 0, "gateway: %s",
			     why ? why : "did not start");
		json_decref(r);
		gate_free(g);
		return -1;
	}
	/* the proxies, for every tool that reads the usual variables */
	for (size_t i = 0; gate_proxy_env[i][0]; i++)
		env_set(env, gate_proxy_env[i][0], gate_proxy_env[i][1]);
	const char *ca = json_string_value(json_object_get(r, "ca"));
	if (ca) {
		/* the sandbox's CA, alone and with the system's, in a directory
		 * shown read-only inside at the same path */
		snprintf(g->cadir, sizeof g->cadir, "/tmp/moat-ca-XXXXXX");
		char capath[128], bundle[128];
		if (!mkdtemp(g->cadir) || chmod(g->cadir, 0755) < 0) {
			g->cadir[0] = '\0';
			json_decref(r);
			gate_free(g);
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "gateway CA directory");
		}
		snprintf(capath, sizeof capath, "%s/ca.pem", g->cadir);
		snprintf(bundle, sizeof bundle, "%s/bundle.pem", g->cadir);
		char *sys = slurp("/etc/ssl/certs/ca-certificates.crt");
		int rc = write_all(capath, ca, NULL, e);
		if (rc == 0)
			rc = write_all(bundle, sys ? sys : "", ca, e);
		free(sys);
		if (rc < 0) {
			json_decref(r);
			gate_free(g);
			return -1;
		}
		moat_strv_add(&p->allow_read, g->cadir);
		for (size_t i = 0; gate_bundle_env[i]; i++)
			env_set(env, gate_bundle_env[i], bundle);
		env_set(env, "NODE_EXTRA_CA_CERTS", capath);
	}
	json_decref(r);
	*out = g;
	return 0;
}

int run_gate_attach(struct run_gate *g, int fds[2], struct moat_err *e)
{
	char byte = 'L';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	ssize_t n = moat_send_fds(g->ctl, &iov, 1, fds, 2);
	close(fds[0]);
	close(fds[1]);
	if (n != 1)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "hand the sandbox's sockets to the gateway");
	return 0;
}

/* A printable copy of what the gateway reported (a name may come from
 * the sandbox: control bytes become '?'), at most cap-1 bytes. */
static void printable(const char *in, char *out, size_t cap)
{
	size_t o = 0;
	for (; in && *in && o + 1 < cap; in++)
		out[o++] = (*in >= 0x20 && *in < 0x7f) ? *in : '?';
	out[o] = '\0';
}

/* One refusal, and the option that would let it through when there is
 * one: a name not allowed (--allow-domain), or a name that resolved to a
 * special address, which a pin (--resolve) or the address itself allows. */
static void print_refusal(const char *dest, const char *reason)
{
	char d[300], why[300], host[300] = "", addr[80] = "";
	printable(dest, d, sizeof d);
	printable(reason, why, sizeof why);
	const char *colon = strrchr(d, ':');
	if (colon && (size_t)(colon - d) < sizeof host)
		snprintf(host, sizeof host, "%.*s", (int)(colon - d), d);
	const char *is = strstr(why, " is ");
	bool special = is && strstr(why, "and not explicitly allowed") &&
		       (size_t)(is - why) < sizeof addr;
	if (special) /* an IPv6 literal in brackets, as --resolve wants it */
		snprintf(addr, sizeof addr, strchr(why, ':') && strchr(why, ':') < is ? "[%.*s]"
			 : "%.*s", (int)(is - why), why);
	if (special && host[0] && strcmp(host, addr) != 0)
		fprintf(stderr, "moat: network: refused %s (%s; if that address is right, pin "
				"it with --resolve %s:%s or allow it with --allow-domain %s)\n",
			d, why, d, addr, addr);
	else if (host[0] && (!strcmp(why, "not in the allowlist") ||
			     !strcmp(why, "no allow rule matches")))
		fprintf(stderr, "moat: network: refused %s (%s; allow with --allow-domain %s)\n",
			d, why, host);
	else
		fprintf(stderr, "moat: network: refused %s (%s)\n", d, why);
}

void run_gate_finish(struct run_gate *g)
{
	if (!g)
		return;
	if (send(g->ctl, "S", 1, MSG_NOSIGNAL) == 1) {
		struct pollfd pf = {.fd = g->ctl, .events = POLLIN};
		char *buf = malloc(1 << 20);
		if (buf && poll(&pf, 1, 2000) > 0) {
			ssize_t n = recv(g->ctl, buf, (1 << 20) - 1, 0);
			json_t *r = n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
			size_t i;
			json_t *v;
			/* why `npm install` failed, at a glance */
			json_array_foreach(json_object_get(r, "refused"), i, v)
				print_refusal(json_string_value(json_object_get(v, "dest")),
					      json_string_value(json_object_get(v, "reason")));
			json_decref(r);
		}
		free(buf);
		int st;
		for (int k = 0; k < 200; k++) {
			pid_t w = waitpid(g->pid, &st, WNOHANG);
			if (w == g->pid || w < 0) {
				g->pid = -1;
				break;
			}
			usleep(5000);
		}
	}
	gate_free(g);
}
