/* moat-gate: the egress gateway of one `moat run`, as its own process
 * (so that `moat run` without a network allowlist loads no libevent or
 * OpenSSL, and so that the gateway runs with no more privilege than it
 * needs). `moat run` starts it with a control socket on fd 3:
 *
 *   run -> gate  {"name", "allow", "deny", "resolve", "secrets":[{"placeholder",
 *                 "value","hosts"}], "log", "upstream_ca", "ceiling":[PAT]}
 *   gate -> run  {"ok":true, "ca":"PEM or null"}  |  {"error":"..."}
 *   run -> gate  "L" with the two listening sockets (SCM_RIGHTS)
 *   run -> gate  "S" (stop), or the socket closes
 *   gate -> run  {"refused":[{"dest","reason"}]}
 *
 * Secrets arrive over the socket, never in argv or the environment. */
#define _GNU_SOURCE
#include "base/fdpass.h"
#include "base/own.h"
#include "gate/gateway.h"
#include "gate/policy.h"

#include <errno.h>
#include <fcntl.h>
#include <event2/event.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define CTL 3
#define MSG_MAX (1u << 20)

static struct gate_box *box;
static struct event_base *base;

static int send_json(json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!s)
		return -1;
	ssize_t n = send(CTL, s, strlen(s), MSG_NOSIGNAL);
	free(s);
	return n < 0 ? -1 : 0;
}

static int fail(const char *fmt, const char *arg)
{
	char msg[1200];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(msg, sizeof msg, fmt, arg);
#pragma GCC diagnostic pop
	send_json(json_pack("{s:s}", "error", msg));
	return 125;
}

static char **strings(json_t *a)
{
	size_t n = json_array_size(a);
	char **v = calloc(n + 1, sizeof *v);
	for (size_t i = 0; v && i < n; i++)
		v[i] = (char *)json_string_value(json_array_get(a, i));
	return v;
}

static void add_refused(void *arg, const char *dest, const char *reason)
{
	json_array_append_new(arg, json_pack("{s:s,s:s}", "dest", dest, "reason", reason));
}

static void on_ctl(evutil_socket_t fd, short what, void *arg)
{
	char buf[64];
	int fds[2];
	ssize_t n = moat_recv_fds(CTL, buf, sizeof buf, fds, 2);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n > 0 && buf[0] == 'L') {
		struct moat_err e = {0};
		if (fds[0] >= 0 && gate_box_listen(box, fds[0], fds[1], &e) < 0)
			fprintf(stderr, "moat: gateway: %s\n", e.msg);
		return;
	}
	/* "S", or the end of moat run: report and stop */
	event_base_loopbreak(base);
}

int main(int argc, char **argv)
{
	/* the gateway ends with the moat run that started it */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	signal(SIGPIPE, SIG_IGN);
	char *msg = malloc(MSG_MAX);
	if (!msg)
		return 125;
	ssize_t n = recv(CTL, msg, MSG_MAX - 1, 0);
	if (n <= 0)
		return 125;
	msg[n] = '\0';
	json_t *cfg = json_loads(msg, 0, NULL);
	explicit_bzero(msg, (size_t)n); /* secret values were in there */
	free(msg);
	if (!json_is_object(cfg))
		return fail("%s", "bad configuration");
	struct gate_policy *pol = calloc(1, sizeof *pol);
	struct moat_err e = {0};
	if (!pol)
		return fail("%s", "out of memory");
	gate_policy_init(pol);
	for (int k = 0; k < GATE_LISTS; k++) {
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(cfg, gate_list_keys[k]), i, v)
		{
			if (gate_policy_add(pol, (enum gate_list)k, json_string_value(v),
					    &e) < 0)
				return fail("%s", e.msg);
		}
	}
	/* moat serve's --net-allow, for the clones of its manifests: every
	 * destination must pass it too, as in the daemon's own gateway */
	struct gate_policy *ceil = NULL;
	json_t *cv = json_object_get(cfg, "ceiling");
	if (cv) {
		ceil = calloc(1, sizeof *ceil);
		if (!ceil || !json_is_array(cv) || !json_array_size(cv))
			return fail("%s", "ceiling: a non-empty list of patterns");
		gate_policy_init(ceil);
		size_t i;
		json_t *v;
		json_array_foreach(cv, i, v)
		{
			if (!json_is_string(v) ||
			    gate_policy_add_allow(ceil, json_string_value(v), &e) < 0)
				return fail("ceiling: %s", json_is_string(v) ? e.msg : "not a string");
		}
	}
	FILE *log = NULL;
	const char *logpath = json_string_value(json_object_get(cfg, "log"));
	if (logpath) {
		/* the caller's own file, 0600: never through a symlink planted
		 * at the name, never into another user's file */
		int fd = moat_own_file(AT_FDCWD, logpath, O_WRONLY | O_APPEND | O_CREAT, 0600, &e);
		if (fd < 0)
			return fail("--net-log %s", e.msg);
		if (!(log = fdopen(fd, "a")))
			return fail("--net-log: %s", strerror(errno));
	}
	base = event_base_new();
	struct gate *g = base ? gate_new(base, json_string_value(json_object_get(cfg, "upstream_ca")), &e)
			      : NULL;
	if (!g)
		return fail("%s", e.msg[0] ? e.msg : "cannot start the gateway");
	const char *name = json_string_value(json_object_get(cfg, "name"));
	box = gate_box_new(g, name ? name : "run", pol, NULL, log, &e);
	if (!box)
		return fail("%s", e.msg);
	if (ceil)
		gate_box_set_ceiling(box, ceil);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(cfg, "secrets"), i, s)
	{
		char **hosts = strings(json_object_get(s, "hosts"));
		const char *ph = json_string_value(json_object_get(s, "placeholder"));
		const char *val = json_string_value(json_object_get(s, "value"));
		int rc = hosts && ph && val ? gate_box_secret(box, ph, val, hosts, &e) : -1;
		free(hosts);
		if (rc < 0)
			return fail("secret: %s", e.msg[0] ? e.msg : "malformed");
	}
	/* wipe the values from the configuration copy */
	json_array_foreach(json_object_get(cfg, "secrets"), i, s)
	{
		json_t *v = json_object_get(s, "value");
		if (json_is_string(v))
			explicit_bzero((char *)json_string_value(v), json_string_length(v));
	}
	json_decref(cfg);
	const char *ca = gate_box_ca_pem(box);
	if (send_json(json_pack("{s:b,s:s?}", "ok", 1, "ca", ca)) < 0)
		return 125;
	struct event *ctl = event_new(base, CTL, EV_READ | EV_PERSIST, on_ctl, NULL);
	if (!ctl || event_add(ctl, NULL) < 0)
		return 125;
	event_base_dispatch(base);
	json_t *refused = json_array();
	gate_box_refused(box, add_refused, refused);
	send_json(json_pack("{s:o}", "refused", refused));
	event_free(ctl);
	gate_box_free(box);
	if (ceil) {
		gate_policy_free(ceil);
		free(ceil);
	}
	gate_free(g);
	event_base_free(base);
	if (log)
		fclose(log);
	(void)argc;
	(void)argv;
	return 0;
}
