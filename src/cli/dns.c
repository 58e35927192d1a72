/* moat run's side of the sandbox's resolver (src/base/dnsd.h): a thread
 * answers while the command runs, and at the end the names it refused
 * are printed with the option that would let them through. */
#define _GNU_SOURCE
#include "cli.h"

#include "gate/policy.h"
#include "../base/dnsd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* what the report shows: a few names, each cut short */
#define SHOW_NAMES 8
#define SHOW_LEN 80

struct run_dns {
	struct moat_dnsd *d;
	int stop[2];
	pthread_t th;
};

static void *serve(void *arg)
{
	struct run_dns *r = arg;
	for (;;) {
		struct pollfd pf[2] = {{.fd = moat_dnsd_fd(r->d), .events = POLLIN},
				       {.fd = r->stop[0], .events = POLLIN}};
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		moat_dnsd_serve(r->d);
		if (pf[1].revents)
			break;
	}
	return NULL;
}

struct run_dns *run_dns_start(int fds[2], struct moat_err *e)
{
	struct run_dns *r = calloc(1, sizeof *r);
	if (!r || pipe2(r->stop, O_CLOEXEC) < 0) {
		close(fds[0]);
		close(fds[1]);
		free(r);
		moat_err_set(e, MOAT_E_SYSTEM, errno ? errno : ENOMEM, "the sandbox's resolver");
		return NULL;
	}
	r->d = moat_dnsd_new(fds[0], fds[1], NULL, NULL);
	int err = r->d ? pthread_create(&r->th, NULL, serve, r) : ENOMEM;
	if (err) {
		moat_dnsd_free(r->d);
		close(r->stop[0]);
		close(r->stop[1]);
		free(r);
		moat_err_set(e, MOAT_E_SYSTEM, err, "the sandbox's resolver");
		return NULL;
	}
	return r;
}

/* A name worth putting in an option: no escapes, not cut. */
static bool plain(const char *name)
{
	return !strchr(name, '\\') && strlen(name) < SHOW_LEN && strcmp(name, ".") != 0;
}

static void report(const struct moat_dnsd *d, const struct moat_policy *p)
{
	const char *const *names;
	size_t more, n = moat_dnsd_names(d, &names, &more);
	if (n == 0)
		return;
	size_t show = n < SHOW_NAMES ? n : SHOW_NAMES;
	char tail[64] = "";
	if (n > show || more)
		snprintf(tail, sizeof tail, " and %zu more", n - show + more);
	char s[SHOW_LEN + 1];
	if (!p->gateway) {
		fputs("moat: network: off; lookups refused:", stderr);
		for (size_t i = 0; i < show; i++) {
			moat_dnsd_short(names[i], s, sizeof s);
			fprintf(stderr, "%s %s", i ? "," : "", s);
		}
		fputs(tail, stderr);
		size_t nplain = 0;
		for (size_t i = 0; i < show; i++)
			nplain += plain(names[i]);
		if (nplain == 0 || nplain > 3) {
			fputs(" (allow a name with --allow-domain NAME)\n", stderr);
			return;
		}
		fputs(" (allow with", stderr);
		for (size_t i = 0; i < show; i++)
			if (plain(names[i]))
				fprintf(stderr, " --allow-domain %s", names[i]);
		fputs(")\n", stderr);
		return;
	}
	/* With the gateway nothing resolves inside: programs reach allowed
	 * hosts through the proxy, which resolves outside. */
	struct gate_policy g;
	gate_policy_init(&g);
	const struct moat_strv *lists[] = {&p->net_allow, &p->net_deny, &p->net_resolve};
	struct moat_err e = {0};
	for (int k = 0; k < GATE_LISTS; k++)
		for (size_t i = 0; i < lists[k]->n; i++)
			gate_policy_add(&g, (enum gate_list)k, lists[k]->v[i], &e);
	for (size_t i = 0; i < show; i++) {
		moat_dnsd_short(names[i], s, sizeof s);
		char why[GATE_WHY_CAP];
		bool ok = plain(names[i]) &&
			  gate_check_name(&g, names[i], 443, why) == GATE_ALLOW;
		if (ok)
			fprintf(stderr, "moat: network: direct lookup of %s refused (it is allowed "
					"through the gateway: use the proxy, HTTPS_PROXY inside)\n", s);
		else if (plain(names[i]))
			fprintf(stderr, "moat: network: direct lookup of %s refused (not allowed; "
					"allow with --allow-domain %s, then use the proxy, "
					"HTTPS_PROXY inside)\n", s, s);
		else
			fprintf(stderr, "moat: network: direct lookup of %s refused\n", s);
	}
	if (tail[0])
		fprintf(stderr, "moat: network: direct lookups refused:%s\n", tail);
	gate_policy_free(&g);
}

void run_dns_finish(struct run_dns *r, const struct moat_policy *p)
{
	if (!r)
		return;
	ssize_t w = write(r->stop[1], "x", 1);
	(void)w;
	pthread_join(r->th, NULL);
	if (p)
		report(r->d, p);
	moat_dnsd_free(r->d);
	close(r->stop[0]);
	close(r->stop[1]);
	free(r);
}
