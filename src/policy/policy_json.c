/* Policy files: the native JSON policy and sandbox-runtime (srt) settings.
 * Both are strict: an unknown key or a wrong type is an error that names
 * the file and the key path, and nothing is applied from a file that fails
 * (we parse into a scratch policy and merge only on success). */
#define _GNU_SOURCE
#include <moat/policy.h>

#include "../base/cleanup.h"
#include "../base/util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct ctx {
	struct moat_policy *p;
	const char *file;
	const char *cwd;
	const char *home;
	struct moat_err *e;
};

static int fail(struct ctx *c, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct ctx *c, const char *key, const char *fmt, ...)
{
	char buf[MOAT_ERR_MSG / 2];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return moat_err_set(c->e, MOAT_E_USAGE, 0, "%s: %s: %s", c->file, key, buf);
}

static int check_keys(struct ctx *c, json_t *obj, const char *where,
		      const char *const *known)
{
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v) {
		bool ok = false;
		for (size_t i = 0; known[i]; i++)
			if (strcmp(k, known[i]) == 0)
				ok = true;
		if (!ok) {
			char path[256];
			snprintf(path, sizeof path, "%s%s%s", where, *where ? "." : "", k);
			return fail(c, path, "unknown key");
		}
	}
	return 0;
}

static int get_object(struct ctx *c, json_t *parent, const char *key,
		      const char *path, json_t **out)
{
	json_t *v = json_object_get(parent, key);
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return fail(c, path, "must be an object");
	*out = v;
	return 0;
}

static int get_paths(struct ctx *c, json_t *parent, const char *key,
		     const char *path, struct moat_strv *list)
{
	json_t *arr = json_object_get(parent, key);
	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr))
		return fail(c, path, "must be an array of strings");
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v) || json_string_length(v) == 0)
			return fail(c, path, "[%zu] must be a non-empty string", i);
		char what[256];
		snprintf(what, sizeof what, "%s: %s[%zu]", c->file, path, i);
		size_t before = list->n;
		if (moat_policy_add_path(list, json_string_value(v), c->cwd,
					 c->home, what, c->e) < 0)
			return -1;
		if (list->n > before) /* not a duplicate */
			moat_policy_note_origin(c->p, list->v[list->n - 1], what);
	}
	return 0;
}

static int get_strings(struct ctx *c, json_t *parent, const char *key,
		       const char *path, struct moat_strv *list)
{
	json_t *arr = json_object_get(parent, key);
	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr))
		return fail(c, path, "must be an array of strings");
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v) || json_string_length(v) == 0)
			return fail(c, path, "[%zu] must be a non-empty string", i);
		moat_strv_add(list, json_string_value(v));
	}
	return 0;
}

static int get_bool(struct ctx *c, json_t *parent, const char *key,
		    const char *path, bool *out)
{
	json_t *v = json_object_get(parent, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return fail(c, path, "must be true or false");
	*out = json_is_true(v);
	return 0;
}

/* ---- native policy ---------------------------------------------------- */

static int native_limits(struct ctx *c, json_t *lim, struct moat_policy *p)
{
	static const char *const keys[] = {"memory", "pids", "cpus", "timeout", NULL};
	if (check_keys(c, lim, "limits", keys) < 0)
		return -1;
	json_t *v;
	if ((v = json_object_get(lim, "memory")) && !json_is_null(v)) {
		if (json_is_string(v)) {
			if (moat_parse_size(json_string_value(v), &p->memory, c->e) < 0)
				return moat_err_prefix(c->e, "%s: limits.memory", c->file);
		} else if (json_is_integer(v) && json_integer_value(v) > 0) {
			p->memory = (uint64_t)json_integer_value(v);
		} else {
			return fail(c, "limits.memory",
				    "must be a size string like \"512M\" or a positive integer");
		}
	}
	if ((v = json_object_get(lim, "pids")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
		    json_integer_value(v) > 4194304)
			return fail(c, "limits.pids", "must be an integer from 1 to 4194304");
		p->pids = (uint64_t)json_integer_value(v);
	}
	if ((v = json_object_get(lim, "cpus")) && !json_is_null(v)) {
		double d = json_is_number(v) ? json_number_value(v) : -1;
		if (!json_is_number(v) || !(d >= 0.01) || d > 4096)
			return fail(c, "limits.cpus", "must be a number from 0.01 to 4096");
		p->cpu_milli = moat_round_u64(d * 1000);
	}
	if ((v = json_object_get(lim, "timeout")) && !json_is_null(v)) {
		double d = json_is_number(v) ? json_number_value(v) : -1;
		if (!json_is_number(v) || !(d >= 0.001) || d > 31536000)
			return fail(c, "limits.timeout",
				    "must be a number of seconds from 0.001 to 31536000");
		p->timeout_ms = moat_round_u64(d * 1000);
	}
	return 0;
}

/* "quotas": {"inotify_instances": 8, ...}: integers, keys from moat_quota_info. */
static int native_quotas(struct ctx *c, json_t *o, struct moat_policy *p)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		char path[128];
		snprintf(path, sizeof path, "quotas.%.64s", k);
		int i = moat_quota_find(k);
		if (i < 0)
			return fail(c, path, "unknown key");
		struct moat_err qe = {0};
		if (!json_is_integer(v) || moat_quota_check(i, json_integer_value(v), &qe) < 0)
			return fail(c, path, "must be an integer from 0 to %lld",
				    (long long)moat_quota_info[i].max);
		p->quotas[i] = json_integer_value(v);
	}
	return 0;
}

static int native(struct ctx *c, json_t *root, struct moat_policy *p)
{
	static const char *const top[] = {"mode", "workspace", "filesystem", "network",
					  "limits", "quotas", "env", "allow_degraded", NULL};
	static const char *const fs[] = {"allow_read", "deny_read", "allow_write",
					 "deny_write", "workspace_write", NULL};
	static const char *const net[] = {"mode", "allow", "deny", "resolve", "secrets", NULL};
	if (!json_is_object(root))
		return fail(c, "(top level)", "must be a JSON object");
	if (check_keys(c, root, "", top) < 0)
		return -1;
	json_t *v, *o;
	if ((v = json_object_get(root, "mode")) && !json_is_null(v)) {
		if (!json_is_string(v))
			return fail(c, "mode", "must be a string");
		if (moat_policy_set_mode(p, json_string_value(v), c->e) < 0)
			return moat_err_prefix(c->e, "%s: mode", c->file);
	}
	if ((v = json_object_get(root, "workspace")) && !json_is_null(v)) {
		if (!json_is_string(v) || json_string_length(v) == 0)
			return fail(c, "workspace", "must be a non-empty string");
		char *ws = moat_path_absolute(json_string_value(v), c->cwd, c->home, c->e);
		if (!ws)
			return moat_err_prefix(c->e, "%s: workspace", c->file);
		free(p->workspace);
		p->workspace = ws;
	}
	if (get_object(c, root, "filesystem", "filesystem", &o) < 0)
		return -1;
	if (o && (check_keys(c, o, "filesystem", fs) < 0 ||
		  get_paths(c, o, "allow_read", "filesystem.allow_read", &p->allow_read) < 0 ||
		  get_paths(c, o, "deny_read", "filesystem.deny_read", &p->deny_read) < 0 ||
		  get_paths(c, o, "allow_write", "filesystem.allow_write", &p->allow_write) < 0 ||
		  get_paths(c, o, "deny_write", "filesystem.deny_write", &p->deny_write) < 0 ||
		  get_bool(c, o, "workspace_write", "filesystem.workspace_write",
			   &p->workspace_write) < 0))
		return -1;
	if (get_object(c, root, "network", "network", &o) < 0)
		return -1;
	if (o) {
		if (check_keys(c, o, "network", net) < 0)
			return -1;
		if ((v = json_object_get(o, "mode")) && !json_is_null(v)) {
			const char *m = json_is_string(v) ? json_string_value(v) : "";
			if (strcmp(m, "none") == 0)
				p->net = MOAT_NET_NONE;
			else if (strcmp(m, "host") == 0)
				p->net = MOAT_NET_HOST;
			else
				return fail(c, "network.mode", "must be \"none\" or \"host\"");
		}
		if (get_strings(c, o, "allow", "network.allow", &p->net_allow) < 0 ||
		    get_strings(c, o, "deny", "network.deny", &p->net_deny) < 0 ||
		    get_strings(c, o, "resolve", "network.resolve", &p->net_resolve) < 0)
			return -1;
		/* [{"env": "NAME", "hosts": ["api.example.com"]}] */
		if ((v = json_object_get(o, "secrets")) && !json_is_null(v)) {
			if (!json_is_array(v))
				return fail(c, "network.secrets",
					    "must be an array of {\"env\", \"hosts\"} objects");
			size_t i;
			json_t *s;
			json_array_foreach(v, i, s) {
				const char *name = json_string_value(json_object_get(s, "env"));
				json_t *hosts = json_object_get(s, "hosts");
				if (!json_is_object(s) || !name || !json_is_array(hosts) ||
				    !json_array_size(hosts) || json_object_size(s) != 2)
					return fail(c, "network.secrets",
						    "[%zu] must be {\"env\": NAME, \"hosts\": [HOST, ...]}", i);
				char spec[2048];
				size_t len = (size_t)snprintf(spec, sizeof spec, "%s@", name);
				size_t k;
				json_t *h;
				json_array_foreach(hosts, k, h) {
					if (!json_is_string(h))
						return fail(c, "network.secrets",
							    "[%zu].hosts[%zu] must be a string", i, k);
					len += (size_t)snprintf(spec + len, len < sizeof spec ? sizeof spec - len : 0,
								"%s%s", k ? "," : "", json_string_value(h));
				}
				if (len >= sizeof spec)
					return fail(c, "network.secrets", "[%zu] is too long", i);
				if (moat_policy_add_secret(p, spec, c->e) < 0)
					return moat_err_prefix(c->e, "%s: network.secrets[%zu]", c->file, i);
			}
		}
	}
	if (get_object(c, root, "limits", "limits", &o) < 0)
		return -1;
	if (o && native_limits(c, o, p) < 0)
		return -1;
	if (get_object(c, root, "quotas", "quotas", &o) < 0)
		return -1;
	if (o && native_quotas(c, o, p) < 0)
		return -1;
	if ((v = json_object_get(root, "env")) && !json_is_null(v)) {
		if (!json_is_array(v))
			return fail(c, "env", "must be an array of \"NAME\" or \"NAME=VALUE\" strings");
		size_t i;
		json_t *s;
		json_array_foreach(v, i, s) {
			if (!json_is_string(s))
				return fail(c, "env", "[%zu] must be a string", i);
			if (moat_policy_add_env(p, json_string_value(s), c->e) < 0)
				return moat_err_prefix(c->e, "%s: env[%zu]", c->file, i);
		}
	}
	return get_bool(c, root, "allow_degraded", "allow_degraded", &p->allow_degraded);
}

/* ---- srt settings ----------------------------------------------------- */

/* srt skips write roots that do not exist; so do we, with a warning. */
static void drop_missing(struct moat_policy *p, struct moat_strv *list,
			 const char *file, const char *key)
{
	struct moat_strv kept = {0};
	for (size_t i = 0; i < list->n; i++) {
		struct stat st;
		if (stat(list->v[i], &st) == 0)
			moat_strv_add(&kept, list->v[i]);
		else
			moat_strv_take(&p->warnings,
				       moat_strdupf("%s: %s: %s does not exist, skipped",
						    file, key, list->v[i]));
	}
	moat_strv_free(list);
	*list = kept;
}

static int srt(struct ctx *c, json_t *root, struct moat_policy *p)
{
	static const char *const top[] = {
		"network", "filesystem", "ignoreViolations", "enableWeakerNestedSandbox",
		"enableWeakerNetworkIsolation", "ripgrep", "mandatoryDenySearchDepth",
		"allowPty", "allowAppleEvents", "seccomp", "bwrapPath", "socatPath",
		"credentials", "git", "windows", NULL};
	static const char *const fs[] = {"denyRead", "allowRead", "allowWrite",
					 "denyWrite", "allowGitConfig", "disabled", NULL};
	static const char *const net[] = {
		"allowedDomains", "deniedDomains", "allowUnixSockets", "allowAllUnixSockets",
		"allowLocalBinding", "httpProxyPort", "socksProxyPort", "deniedDomainReasons",
		"strictAllowlist", "allowMachLookup", "mitmProxy", "tlsTerminate",
		"parentProxy", NULL};
	if (!json_is_object(root))
		return fail(c, "(top level)", "must be a JSON object");
	if (check_keys(c, root, "", top) < 0)
		return -1;
	/* srt reads everything but what denyRead names, and writes only
	 * allowWrite: mirror that (moat's secrets stay hidden regardless). */
	p->fs_base = MOAT_FS_HOST_READ;
	p->workspace_write = false;
	json_t *o, *v;
	if (get_object(c, root, "filesystem", "filesystem", &o) < 0)
		return -1;
	if (o) {
		bool disabled = false, git_config = false;
		if (check_keys(c, o, "filesystem", fs) < 0 ||
		    get_paths(c, o, "denyRead", "filesystem.denyRead", &p->deny_read) < 0 ||
		    get_paths(c, o, "allowRead", "filesystem.allowRead", &p->allow_read) < 0 ||
		    get_paths(c, o, "allowWrite", "filesystem.allowWrite", &p->allow_write) < 0 ||
		    get_paths(c, o, "denyWrite", "filesystem.denyWrite", &p->deny_write) < 0 ||
		    get_bool(c, o, "disabled", "filesystem.disabled", &disabled) < 0 ||
		    get_bool(c, o, "allowGitConfig", "filesystem.allowGitConfig", &git_config) < 0)
			return -1;
		if (disabled)
			return fail(c, "filesystem.disabled",
				    "moat always confines the filesystem; remove this key");
		drop_missing(p, &p->allow_write, c->file, "filesystem.allowWrite");
		drop_missing(p, &p->allow_read, c->file, "filesystem.allowRead");
		if (git_config)
			moat_strv_take(&p->warnings,
				       moat_strdupf("%s: filesystem.allowGitConfig is not "
						    "supported: .git/config stays read-only",
						    c->file));
	}
	if (get_object(c, root, "network", "network", &o) < 0)
		return -1;
	if (o) {
		if (check_keys(c, o, "network", net) < 0 ||
		    get_strings(c, o, "allowedDomains", "network.allowedDomains",
				&p->net_allow) < 0 ||
		    get_strings(c, o, "deniedDomains", "network.deniedDomains",
				&p->net_deny) < 0)
			return -1;
		if ((v = json_object_get(o, "httpProxyPort")) && !json_is_null(v))
			return fail(c, "network.httpProxyPort",
				    "external proxies are not supported");
		if ((v = json_object_get(o, "socksProxyPort")) && !json_is_null(v))
			return fail(c, "network.socksProxyPort",
				    "external proxies are not supported");
	}
	return 0;
}

/* ---- shared driver ------------------------------------------------------ */

static void merge_list(struct moat_strv *dst, struct moat_strv *src)
{
	for (size_t i = 0; i < src->n; i++)
		if (!moat_strv_contains(dst, src->v[i]))
			moat_strv_add(dst, src->v[i]);
}

static int load(struct moat_policy *p, json_t *root, const char *name,
		const char *cwd, const char *home, bool is_srt, struct moat_err *e)
{
	/* Parse into a copy of the scalars and fresh lists; merge on success. */
	struct moat_policy tmp = *p;
	memset(&tmp.allow_read, 0, sizeof tmp.allow_read);
	memset(&tmp.deny_read, 0, sizeof tmp.deny_read);
	memset(&tmp.allow_write, 0, sizeof tmp.allow_write);
	memset(&tmp.deny_write, 0, sizeof tmp.deny_write);
	memset(&tmp.net_allow, 0, sizeof tmp.net_allow);
	memset(&tmp.net_deny, 0, sizeof tmp.net_deny);
	memset(&tmp.net_resolve, 0, sizeof tmp.net_resolve);
	memset(&tmp.net_secrets, 0, sizeof tmp.net_secrets);
	memset(&tmp.env, 0, sizeof tmp.env);
	memset(&tmp.warnings, 0, sizeof tmp.warnings);
	memset(&tmp.hidden, 0, sizeof tmp.hidden);
	memset(&tmp.origins, 0, sizeof tmp.origins);
	tmp.workspace = NULL;
	struct ctx c = {.p = &tmp, .file = name, .cwd = cwd, .home = home, .e = e};
	int r = is_srt ? srt(&c, root, &tmp) : native(&c, root, &tmp);
	if (r == 0) {
		if (tmp.workspace) {
			free(p->workspace);
			p->workspace = steal_ptr(&tmp.workspace);
		}
		merge_list(&p->allow_read, &tmp.allow_read);
		merge_list(&p->deny_read, &tmp.deny_read);
		merge_list(&p->allow_write, &tmp.allow_write);
		merge_list(&p->deny_write, &tmp.deny_write);
		merge_list(&p->net_allow, &tmp.net_allow);
		merge_list(&p->net_deny, &tmp.net_deny);
		merge_list(&p->net_resolve, &tmp.net_resolve);
		merge_list(&p->net_secrets, &tmp.net_secrets);
		for (size_t i = 0; i < tmp.env.n; i++)
			moat_strv_add(&p->env, tmp.env.v[i]);
		merge_list(&p->warnings, &tmp.warnings);
		for (size_t i = 0; i < tmp.origins.n; i++)
			moat_strv_add(&p->origins, tmp.origins.v[i]);
		p->workspace_write = tmp.workspace_write;
		p->fs_base = tmp.fs_base;
		p->net = tmp.net;
		p->memory = tmp.memory;
		p->pids = tmp.pids;
		p->cpu_milli = tmp.cpu_milli;
		p->timeout_ms = tmp.timeout_ms;
		memcpy(p->quotas, tmp.quotas, sizeof p->quotas);
		p->allow_degraded = tmp.allow_degraded;
	}
	free(tmp.workspace);
	moat_strv_free(&tmp.allow_read);
	moat_strv_free(&tmp.deny_read);
	moat_strv_free(&tmp.allow_write);
	moat_strv_free(&tmp.deny_write);
	moat_strv_free(&tmp.net_allow);
	moat_strv_free(&tmp.net_deny);
	moat_strv_free(&tmp.net_resolve);
	moat_strv_free(&tmp.net_secrets);
	moat_strv_free(&tmp.env);
	moat_strv_free(&tmp.warnings);
	moat_strv_free(&tmp.origins);
	return r;
}

static int load_string(struct moat_policy *p, const char *json, const char *name,
		       const char *cwd, const char *home, bool is_srt,
		       struct moat_err *e)
{
	json_error_t je;
	json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s:%d:%d: %s", name, je.line,
				    je.column, je.text);
	int r = load(p, root, name, cwd, home, is_srt, e);
	json_decref(root);
	return r;
}

static int load_file(struct moat_policy *p, const char *file, const char *cwd,
		     const char *home, bool is_srt, struct moat_err *e)
{
	json_error_t je;
	struct stat st;
	if (stat(file, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s", file);
	if (!S_ISREG(st.st_mode))
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s: not a regular file", file);
	if (st.st_size > 4 << 20)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s: larger than 4 MiB", file);
	json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s:%d:%d: %s", file, je.line,
				    je.column, je.text);
	int r = load(p, root, file, cwd, home, is_srt, e);
	json_decref(root);
	return r;
}

int moat_policy_load_json(struct moat_policy *p, const char *file,
			  const char *cwd, const char *home, struct moat_err *e)
{
	return load_file(p, file, cwd, home, false, e);
}

int moat_policy_load_json_string(struct moat_policy *p, const char *json,
				 const char *name, const char *cwd,
				 const char *home, struct moat_err *e)
{
	return load_string(p, json, name, cwd, home, false, e);
}

int moat_policy_load_srt(struct moat_policy *p, const char *file,
			 const char *cwd, const char *home, struct moat_err *e)
{
	return load_file(p, file, cwd, home, true, e);
}

int moat_policy_load_srt_string(struct moat_policy *p, const char *json,
				const char *name, const char *cwd,
				const char *home, struct moat_err *e)
{
	return load_string(p, json, name, cwd, home, true, e);
}
