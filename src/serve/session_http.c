/* /v1/sessions (docs/control-plane.md): the body of a create checked
 * (each error names its field), and the routes of a session. */
#define _GNU_SOURCE
#include "session_int.h"

#include "artifacts.h"
#include "conv.h"
#include "jfield.h"
#include "llm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the body of a create ----------------------------------------------------------- */

static bool only_keys(struct core_err *e, json_t *o, const char *what, const char *const *keys)
{
	if (!json_is_object(o)) {
		cerr(e, 400, "invalid_request", "%s must be an object", what);
		return false;
	}
	return jf_only_keys(e, o, what, keys);
}

static bool str_array(struct core_err *e, json_t *a, const char *what, bool nonempty)
{
	if (!json_is_array(a) || (nonempty && !json_array_size(a))) {
		cerr(e, 400, "invalid_request", "%s must be a%s array of strings", what,
		     nonempty ? " non-empty" : "n");
		return false;
	}
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v)
	{
		if (!json_is_string(v) || !json_string_length(v) ||
		    strlen(json_string_value(v)) != json_string_length(v)) {
			cerr(e, 400, "invalid_request", "%s[%zu] must be a non-empty string without NUL",
			     what, i);
			return false;
		}
	}
	return true;
}

static json_t *parse_agent(json_t *a, struct core_err *e)
{
	static const char *const keys[] = {"cmd", "env", "cwd", "sdk_env", "env_fd", NULL};
	if (!a) {
		cerr(e, 400, "invalid_request", "agent is required: {\"cmd\": [...]}");
		return NULL;
	}
	if (!only_keys(e, a, "agent", keys) || !str_array(e, json_object_get(a, "cmd"), "agent.cmd", true) ||
	    !jf_string_map(e, json_object_get(a, "env"), "agent.env", true))
		return NULL;
	json_t *cwd = json_object_get(a, "cwd");
	if (cwd && !json_is_null(cwd) &&
	    (!json_is_string(cwd) || !json_string_length(cwd) ||
	     strlen(json_string_value(cwd)) != json_string_length(cwd))) {
		cerr(e, 400, "invalid_request", "agent.cwd must be a path");
		return NULL;
	}
	static const char *const flags[] = {"sdk_env", "env_fd"};
	for (size_t i = 0; i < 2; i++) {
		json_t *f = json_object_get(a, flags[i]);
		if (f && !json_is_null(f) && !json_is_boolean(f)) {
			cerr(e, 400, "invalid_request", "agent.%s must be true or false", flags[i]);
			return NULL;
		}
	}
	json_t *o = json_pack("{s:O,s:o,s:b,s:b}", "cmd", json_object_get(a, "cmd"), "env",
			      json_is_object(json_object_get(a, "env"))
				      ? json_deep_copy(json_object_get(a, "env"))
				      : json_object(),
			      "sdk_env", json_is_true(json_object_get(a, "sdk_env")), "env_fd",
			      json_is_true(json_object_get(a, "env_fd")));
	if (o && json_is_string(cwd))
		json_object_set(o, "cwd", cwd);
	return o;
}

static json_t *parse_llm(json_t *l, struct core_err *e)
{
	static const char *const keys[] = {"routes", NULL};
	json_t *out = json_array();
	if (!l || json_is_null(l))
		return json_pack("{s:o}", "routes", out);
	json_t *routes = json_object_get(l, "routes");
	if (!only_keys(e, l, "llm", keys))
		goto bad;
	if (routes && !json_is_array(routes)) {
		cerr(e, 400, "invalid_request", "llm.routes must be an array");
		goto bad;
	}
	size_t i;
	json_t *r;
	json_array_foreach(routes, i, r)
	{
		static const char *const rkeys[] = {"route", "models", NULL};
		char what[64];
		snprintf(what, sizeof what, "llm.routes[%zu]", i);
		json_t *name = json_is_string(r) ? r : json_object_get(r, "route");
		json_t *models = json_is_object(r) ? json_object_get(r, "models") : NULL;
		if (json_is_object(r) && !only_keys(e, r, what, rkeys))
			goto bad;
		if (!json_is_string(name)) {
			cerr(e, 400, "invalid_request",
			     "%s must be a route's name or {\"route\": NAME, \"models\": [...]}", what);
			goto bad;
		}
		const char *n = json_string_value(name);
		if (!llm_route_find(n)) {
			cerr(e, 400, "invalid_request",
			     "%s: no route %.64s (the daemon's --llm-route names it)", what, n);
			goto bad;
		}
		char mwhat[80];
		snprintf(mwhat, sizeof mwhat, "%s.models", what);
		if (models && !json_is_null(models) && !str_array(e, models, mwhat, true))
			goto bad;
		size_t j;
		json_t *seen;
		json_array_foreach(out, j, seen) if (!strcmp(json_string_value(json_object_get(seen, "route")), n))
		{
			cerr(e, 400, "invalid_request", "%s: route %.64s is listed twice", what, n);
			goto bad;
		}
		json_array_append_new(out, json_pack("{s:s,s:O}", "route", n, "models",
						     models && !json_is_null(models) ? models : json_null()));
	}
	return json_pack("{s:o}", "routes", out);
bad:
	json_decref(out);
	return NULL;
}

static json_t *parse_budget(json_t *b, struct core_err *e)
{
	static const char *const keys[] = {"tokens", "requests", "wall_s", "cpu_s", NULL};
	if (!b || json_is_null(b))
		return json_object();
	if (!only_keys(e, b, "budget", keys))
		return NULL;
	const char *k;
	json_t *v;
	json_object_foreach(b, k, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) <= 0) {
			cerr(e, 400, "invalid_request", "budget.%s must be a positive integer", k);
			return NULL;
		}
	}
	return json_deep_copy(b);
}

json_t *ses_parse(json_t *body, struct core_err *e)
{
	static const char *const keys[] = {"image",	"manifest", "limits", "network", "metadata",
					   "agent", "llm",	     "budget", "mcp",	  NULL};
	if (!only_keys(e, body, "body", keys))
		return NULL;
	if (json_object_get(body, "mcp")) {
		cerr(e, 422, "unsupported", "mcp: relaying MCP servers into a session is not "
					  "supported yet");
		return NULL;
	}
	json_t *net = json_object_get(body, "network");
	if (json_is_string(net) && !strcmp(json_string_value(net), "host")) {
		cerr(e, 422, "unsupported",
		     "network \"host\": a session's sandbox needs its own network (its control "
		     "listener is on its loopback)");
		return NULL;
	}
	if (!jf_string_map(e, json_object_get(body, "metadata"), "metadata", false))
		return NULL;
	json_t *agent = parse_agent(json_object_get(body, "agent"), e);
	json_t *llm = agent ? parse_llm(json_object_get(body, "llm"), e) : NULL;
	json_t *budget = llm ? parse_budget(json_object_get(body, "budget"), e) : NULL;
	if (!budget) {
		json_decref(agent);
		json_decref(llm);
		return NULL;
	}
	json_t *sandbox = json_object();
	static const char *const sb[] = {"image", "manifest", "limits", "network", "metadata"};
	for (size_t i = 0; i < sizeof sb / sizeof sb[0]; i++) {
		json_t *v = json_object_get(body, sb[i]);
		if (v && !json_is_null(v))
			json_object_set(sandbox, sb[i], v);
	}
	json_t *md = json_object_get(body, "metadata");
	return json_pack("{s:o,s:o,s:o,s:o,s:o}", "sandbox", sandbox, "agent", agent, "llm", llm,
			 "budget", budget, "metadata",
			 json_is_object(md) ? json_deep_copy(md) : json_object());
}

/* ---- routes ----------------------------------------------------------------------------- */

static bool query_true(struct evhttp_request *req, const char *key)
{
	char *v = http_query(req, key);
	bool t = v && (!strcmp(v, "true") || !strcmp(v, "1"));
	free(v);
	return t;
}

static void h_create(struct evhttp_request *req)
{
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	struct core_err e = {0};
	json_t *spec = ses_parse(body, &e);
	json_decref(body);
	if (!spec) {
		http_error(req, e.status, e.code, "%s", e.msg);
		return;
	}
	ses_create(req, spec);
}

static void h_list(struct evhttp_request *req)
{
	char *state = http_query(req, "state");
	json_t *a = json_array();
	for (size_t i = 0; i < ses_n; i++)
		if (!state || !strcmp(state, ses_all[i]->state))
			json_array_append_new(a, ses_json(ses_all[i]));
	free(state);
	http_json(req, 200, json_pack("{s:o}", "sessions", a));
}

void session_route(struct evhttp_request *req, char **seg, int n)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (n == 2) {
		http_collection(req, h_create, h_list);
		return;
	}
	struct session *s = session_find(seg[2]);
	if (!s) {
		http_error(req, 404, "not_found", "no session %.64s", seg[2]);
		return;
	}
	if (n == 3) {
		if (m == EVHTTP_REQ_GET)
			http_json(req, 200, ses_json(s));
		else if (m == EVHTTP_REQ_DELETE)
			ses_delete(req, s, query_true(req, "purge"));
		else
			http_not_allowed(req);
		return;
	}
	const char *what = seg[3];
	if (!strcmp(what, "restart") && n == 4) {
		m == EVHTTP_REQ_POST ? ses_restart_req(req, s) : http_not_allowed(req);
	} else if (!strcmp(what, "usage") && n == 4) {
		if (m != EVHTTP_REQ_GET) {
			http_not_allowed(req);
			return;
		}
		http_json(req, 200, json_pack("{s:o,s:O,s:o}", "usage", ses_usage_json(s), "budget",
					      json_object_get(s->spec, "budget"), "budget_left",
					      ses_budget_left(s)));
	} else if (!strcmp(what, "conversation") && n == 4) {
		m == EVHTTP_REQ_GET ? http_json(req, 200, conv_json(s->id)) : http_not_allowed(req);
	} else if (!strcmp(what, "artifacts") && (n == 4 || n == 5)) {
		artifacts_host_route(req, s->id, seg, n);
	} else {
		http_error(req, 404, "not_found", "no such route: %.200s",
			   evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req)));
	}
}

/* GET /v1/session on the control listener (cp.c). */
json_t *session_json(const struct session *cs)
{
	struct session *s = (struct session *)cs; /* a sample may update its usage */
	json_t *routes = json_array();
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(json_object_get(s->spec, "llm"), "routes"), i, r)
	{
		const struct llm_route *lr = llm_route_find(json_string_value(json_object_get(r, "route")));
		json_array_append_new(routes,
				      json_pack("{s:O,s:s,s:O}", "route", json_object_get(r, "route"),
						"family",
						lr && lr->family == LLM_FAMILY_ANTHROPIC ? "anthropic"
											 : "openai",
						"models", json_object_get(r, "models")));
	}
	return json_pack("{s:s,s:o,s:O,s:o,s:o}", "id", s->id, "routes", routes, "budget",
			 json_object_get(s->spec, "budget"), "usage", ses_usage_json(s),
			 "budget_left", ses_budget_left(s));
}
