/* Sessions' usage, budgets and metrics (session.h): what each session
 * used (model tokens and calls, bytes, its sandboxes' cgroups, wall time),
 * checked against its budget before every model call. */
#define _GNU_SOURCE
#include "session_int.h"

#include "box.h"
#include "jfield.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- usage -------------------------------------------------------------------------- */

/* The current sandbox's cpu and memory, into s (true when it changed). */
bool ses_sample(struct session *s)
{
	struct box *b = session_box(s);
	if (!b || !box_running(b))
		return false;
	int64_t cpu, mem;
	box_usage(b, &cpu, &mem);
	bool changed = false;
	if (cpu >= 0 && cpu != s->u.cpu_us) {
		s->u.cpu_us = cpu;
		changed = true;
	}
	if (mem > s->u.mem_peak) {
		s->u.mem_peak = mem;
		changed = true;
	}
	return changed;
}

/* The current sandbox goes: its cpu joins the earlier ones'. */
void ses_sandbox_done(struct session *s)
{
	ses_sample(s);
	s->u.cpu_prev_us += s->u.cpu_us;
	s->u.cpu_us = 0;
}

static int64_t wall_s(const struct session *s)
{
	int64_t end = s->ended_at ? s->ended_at : (int64_t)time(NULL);
	return end > s->created_at ? end - s->created_at : 0;
}

static double cpu_s(const struct session *s)
{
	return (double)(s->u.cpu_prev_us + s->u.cpu_us) / 1e6;
}

/* Bytes of its artifacts (<data>/artifacts/<id>/, artifacts.h). */
static int64_t artifacts_bytes(const struct session *s)
{
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/artifacts/%s", ses_data_dir ? ses_data_dir : ".", s->id);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int64_t sum = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (de->d_name[0] != '.' && fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			sum += st.st_size;
	}
	closedir(d);
	return sum;
}

json_t *ses_usage_json(struct session *s)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:I}", "tokens_in",
			 (json_int_t)s->u.tokens_in, "tokens_out", (json_int_t)s->u.tokens_out,
			 "requests", (json_int_t)s->u.requests, "bytes_in", (json_int_t)s->u.bytes_in,
			 "bytes_out", (json_int_t)s->u.bytes_out, "wall_s", (json_int_t)wall_s(s),
			 "cpu_s", (double)(int64_t)(cpu_s(s) * 1000) / 1000, "mem_peak_bytes",
			 (json_int_t)s->u.mem_peak, "artifacts_bytes", (json_int_t)artifacts_bytes(s));
}

/* What each budget has used so far. */
static double used_of(const struct session *s, const char *k)
{
	if (!strcmp(k, "tokens"))
		return (double)(s->u.tokens_in + s->u.tokens_out);
	if (!strcmp(k, "requests"))
		return (double)s->u.requests;
	if (!strcmp(k, "wall_s"))
		return (double)wall_s(s);
	return cpu_s(s);
}

json_t *ses_budget_left(struct session *s)
{
	json_t *o = json_object();
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(s->spec, "budget"), k, v)
	{
		double left = (double)json_integer_value(v) - used_of(s, k);
		if (left < 0)
			left = 0;
		if (!strcmp(k, "cpu_s"))
			json_object_set_new(o, k, json_real((double)(int64_t)(left * 1000) / 1000));
		else
			json_object_set_new(o, k, json_integer((json_int_t)left));
	}
	return o;
}

static void iso(int64_t t, char out[32])
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

json_t *ses_json(struct session *s)
{
	char c[32], e[32];
	iso(s->created_at, c);
	json_t *agent = json_pack("{s:O}", "cmd", json_object_get(json_object_get(s->spec, "agent"), "cmd"));
	if (s->pid > 0)
		json_object_set_new(agent, "pid", json_integer((json_int_t)s->pid));
	if (s->has_exit)
		json_object_set_new(agent, "exit_code", json_integer(s->exit_code));
	json_t *o = json_pack("{s:s,s:s?,s:s,s:s,s:o,s:I,s:O,s:O,s:O,s:o,s:o}", "id", s->id,
			      "sandbox_id", s->sandbox_id[0] ? s->sandbox_id : NULL, "state",
			      s->state, "created_at", c, "agent", agent, "restarts",
			      (json_int_t)s->restarts, "metadata", json_object_get(s->spec, "metadata"), "llm",
			      json_object_get(s->spec, "llm"), "budget",
			      json_object_get(s->spec, "budget"), "usage", ses_usage_json(s),
			      "budget_left", ses_budget_left(s));
	if (o && s->ended_at) {
		iso(s->ended_at, e);
		json_object_set_new(o, "ended_at", json_string(e));
	}
	if (o && s->ended_reason[0])
		json_object_set_new(o, "ended_reason", json_string(s->ended_reason));
	if (o && s->budget_exceeded[0])
		json_object_set_new(o, "budget_exceeded", json_string(s->budget_exceeded));
	return o;
}

void session_account(struct session *s, const struct llm_usage *u, uint64_t bytes_in,
		     uint64_t bytes_out)
{
	if (!s)
		return;
	if (u && u->in > 0)
		s->u.tokens_in += u->in;
	if (u && u->out > 0)
		s->u.tokens_out += u->out;
	s->u.requests++;
	s->u.bytes_in += (int64_t)bytes_in;
	s->u.bytes_out += (int64_t)bytes_out;
	ses_sample(s);
	ses_save_usage(s);
}

void session_account_bytes(struct session *s, uint64_t bytes_in, uint64_t bytes_out)
{
	if (!s)
		return;
	s->u.bytes_in += (int64_t)bytes_in;
	s->u.bytes_out += (int64_t)bytes_out;
	ses_sample(s);
	ses_save_usage(s);
}

int session_llm_check(struct session *s, const char *route, const char *model,
		      struct core_err *e)
{
	if (!s || !ses_live(s)) {
		cerr(e, 401, "unauthorized", "the session is not live");
		return -1;
	}
	json_t *routes = json_object_get(json_object_get(s->spec, "llm"), "routes");
	json_t *allowed = NULL;
	size_t i;
	json_t *r;
	json_array_foreach(routes, i, r)
	{
		if (!strcmp(json_string_value(json_object_get(r, "route")), route ? route : ""))
			allowed = r;
	}
	if (!allowed) {
		cerr(e, 403, "forbidden", "route %.64s is not among the session's llm.routes",
		     route ? route : "");
		return -1;
	}
	json_t *models = json_object_get(allowed, "models");
	if (json_is_array(models)) {
		bool ok = false;
		json_t *m;
		json_array_foreach(models, i, m) ok =
			ok || (model && !strcmp(json_string_value(m), model));
		if (!ok) {
			cerr(e, 403, "forbidden",
			     "model %.200s is not among the models the session may ask of route %.64s",
			     model ? model : "(none)", route);
			return -1;
		}
	}
	bool changed = ses_sample(s);
	static const struct {
		const char *k, *what, *unit;
	} bt[] = {{"tokens", "token", "tokens"},
		  {"requests", "request", "requests"},
		  {"wall_s", "wall-clock", "seconds"},
		  {"cpu_s", "CPU", "CPU seconds"}};
	json_t *budget = json_object_get(s->spec, "budget");
	for (size_t k = 0; k < sizeof bt / sizeof bt[0]; k++) {
		json_t *lim = json_object_get(budget, bt[k].k);
		if (!lim)
			continue;
		double used = used_of(s, bt[k].k);
		if (used < (double)json_integer_value(lim))
			continue;
		if (strcmp(s->budget_exceeded, bt[k].k)) {
			snprintf(s->budget_exceeded, sizeof s->budget_exceeded, "%s", bt[k].k);
			changed = true;
		}
		if (changed)
			ses_save_usage(s);
		if (!strcmp(bt[k].k, "cpu_s"))
			cerr(e, 429, "budget_exceeded",
			     "the session's %s budget (budget.%s = %lld) is used up: %.3f %s",
			     bt[k].what, bt[k].k, (long long)json_integer_value(lim), used, bt[k].unit);
		else
			cerr(e, 429, "budget_exceeded",
			     "the session's %s budget (budget.%s = %lld) is used up: %lld %s",
			     bt[k].what, bt[k].k, (long long)json_integer_value(lim), (long long)used,
			     bt[k].unit);
		return -1;
	}
	if (changed)
		ses_save_usage(s);
	return 0;
}

void session_metrics(FILE *f)
{
	fprintf(f, "# HELP moat_session_tokens_total Model tokens of each session.\n"
		   "# TYPE moat_session_tokens_total counter\n");
	for (size_t i = 0; i < ses_n; i++)
		fprintf(f,
			"moat_session_tokens_total{session=\"%s\",direction=\"in\"} %lld\n"
			"moat_session_tokens_total{session=\"%s\",direction=\"out\"} %lld\n",
			ses_all[i]->id, (long long)ses_all[i]->u.tokens_in, ses_all[i]->id,
			(long long)ses_all[i]->u.tokens_out);
	fprintf(f, "# HELP moat_session_requests_total Model calls of each session.\n"
		   "# TYPE moat_session_requests_total counter\n");
	for (size_t i = 0; i < ses_n; i++)
		fprintf(f, "moat_session_requests_total{session=\"%s\"} %lld\n", ses_all[i]->id,
			(long long)ses_all[i]->u.requests);
	fprintf(f, "# HELP moat_sessions Sessions by state.\n# TYPE moat_sessions gauge\n");
	static const char *const states[] = {"starting", "running", "exited", "ended"};
	for (size_t k = 0; k < 4; k++) {
		size_t n = 0;
		for (size_t i = 0; i < ses_n; i++)
			n += !strcmp(ses_all[i]->state, states[k]);
		fprintf(f, "moat_sessions{state=\"%s\"} %zu\n", states[k], n);
	}
}
