/* moat serve: options, start-up, the event loop. Stopping the daemon
 * (SIGTERM, SIGINT, or kill -9) leaves the sandboxes running; the next
 * start re-attaches to them. */
#define _GNU_SOURCE
#include "artifacts.h"
#include "conv.h"
#include "cp.h"
#include "llm.h"
#include "session.h"
#include "api.h"
#include "box.h"
#include "clone.h"
#include "core.h"
#include "datadir.h"
#include "enforce.h"
#include "http.h"
#include "images.h"
#include "job.h"
#include "mcp.h"
#include "store.h"
#include "snap.h"
#include "snap_io.h"
#include "gate/gateway.h"
#include "gate/policy.h"
#include "../base/exe.h"
#include "../base/own.h"
#include "../base/util.h"

#include <moat/jail.h>
#include <moat/probe.h>
#include <moat/strv.h>

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <strings.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MOAT_UNIT_TEST

static int fail(const char *fmt, const char *a, const char *b)
{
	fputs("moat serve: ", stderr);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	fprintf(stderr, fmt, a, b);
#pragma GCC diagnostic pop
	fputc('\n', stderr);
	return 125;
}

/* The --llm-route array of main (issue 14). */
struct llm_routes {
	struct llm_route v[32];
	size_t n;
};
static void llm_routes_free(struct llm_routes *r)
{
	for (size_t i = 0; i < r->n; i++)
		llm_route_free(&r->v[i]);
}

static void usage(FILE *f)
{
	fputs("usage: moat serve [--listen HOST:PORT] [--data DIR] [--token-file FILE]\n"
	      "                  [--allow-host-path DIR]... [--max-sandboxes N]\n"
	      "                  [--memory SIZE] [--pids N] [--cpus N] [--allow-degraded]\n"
	      "                  [--max-file SIZE] [--max-archive SIZE] [--pool N] [--pool-users N]\n"
	      "                  [--pool-sessions N]\n"
	      "                  [--net-allow PAT]... [--secrets-file FILE] [--secret-env NAME]...\n"
	      "                  [--upstream-ca FILE] [--quota NAME=N]...\n"
	      "                  [--template NAME=ROOTFS_DIR]...\n"
	      "                  [--artifact-max SIZE] [--artifact-url-ttl SECONDS]\n"
	      "                  [--store-max SIZE] [--layer-max SIZE] [--registry-auth FILE]\n"
	      "                  [--registry PAT]... [--insecure-registry HOST[:PORT]]...\n"
	      "                  [--mcp-sessions N] [--mcp-idle SECONDS] [--allow-origin ORIGIN]...\n"
	      "                  [--llm-route NAME=URL[,family=F][,key=SECRET][,timeout=S]]...\n"
	      "\n"
	      "Serves the HTTP API of docs/API.md (default 127.0.0.1:7070). State lives in\n"
	      "DIR (default: $STATE_DIRECTORY under systemd, /var/lib/moat for root, else\n"
	      "$XDG_STATE_HOME/moat or ~/.local/state/moat). The bearer token comes\n"
	      "from $MOAT_API_TOKEN or --token-file; a non-loopback address needs one.\n"
	      "--memory/--pids/--cpus are the limits of sandboxes that ask for none.\n"
	      "A limit this daemon cannot enforce (no delegated cgroup: moat doctor) fails\n"
	      "the start, and a create asking for one gets 422 limit_unavailable, unless\n"
	      "--allow-degraded: sandboxes then run without it (logged, and listed in the\n"
	      "sandbox's \"degraded\"). It covers limits only: Landlock and seccomp stay\n"
	      "required.\n"
	      "--pool N keeps N sandboxes pre-started for creates with default settings\n"
	      "--pool-users N the same for sandboxes with users (the E2B door's; default 0)\n"
	      "--pool-sessions N the same for sessions' sandboxes (docs/control-plane.md; default\n"
	      "1 with an --llm-route, else 0)\n"
	      "(default 2; 0 disables).\n"
	      "Egress: --net-allow PAT (repeatable) bounds what any sandbox's network.allow\n"
	      "may reach (without it sandboxes get no network); --secrets-file FILE\n"
	      "(NAME=VALUE lines) and --secret-env NAME fill the secret store that\n"
	      "network.secrets names; --upstream-ca FILE for re-encrypted upstream TLS.\n"
	      "--quota NAME=N (repeatable) sets the most of a per-user kernel count any\n"
	      "sandbox gets (default: moat run's defaults); a create may ask for less.\n"
	      "--template NAME=ROOTFS_DIR (repeatable) names a root filesystem the E2B\n"
	      "door's templateID NAME starts from (\"base\" is the host's system unless\n"
	      "given; docs/e2b.md).\n"
	      "Images (docs/API.md \"Image store\"): --store-max SIZE bounds the image store\n"
	      "(blobs + unpacked layers) and, apart, the snapshots (a pull, import or\n"
	      "snapshot beyond it gets 507), --layer-max\n"
	      "SIZE one layer's unpacked bytes (default 16G), --registry-auth FILE the\n"
	      "registry credentials (docker config.json), --registry PAT (repeatable, glob)\n"
	      "the registries a pull may contact (default: the well-known public ones and\n"
	      "loopback), --insecure-registry HOST[:PORT] one that may be plain http\n"
	      "(loopback ones may always be).\n"
	      "MCP (Streamable HTTP at /mcp, docs/mcp.md): --mcp-sessions N open sessions at\n"
	      "most (default 256), --mcp-idle SECONDS ends an unused one (default 3600).\n"
	      "Artifacts of sessions (docs/control-plane.md): --artifact-max SIZE is the\n"
	      "most one artifact may hold (default 64M, at most 256M), --artifact-url-ttl\n"
	      "SECONDS how long a one-time file URL stays valid (default 300).\n"
	      "Browsers: a request with an Origin other than loopback or the --listen host\n"
	      "is refused (403), unless --allow-origin ORIGIN (repeatable, e.g.\n"
	      "https://console.example) names it; without a token, so is a Host other than\n"
	      "those (DNS rebinding).\n"
	      "Control plane (docs/control-plane.md): --llm-route NAME=URL (repeatable, at\n"
	      "most 32) is an upstream model API the sessions' agents may call through the\n"
	      "proxy (http or https; family=openai|anthropic, default from the host;\n"
	      "key=SECRET names its key in the secret store; timeout=SECONDS bounds a call).\n", f);
}

static bool loopback(const char *listen)
{
	return !strncmp(listen, "127.", 4) || !strncmp(listen, "localhost:", 10) ||
	       !strncmp(listen, "[::1]:", 6);
}

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -1;
		*s = '/';
	}
	return mkdir(buf, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* Credentials the operator hands us: say so when other users can read them
 * (the file may sit in a private directory, so this is not refused). */
static void warn_if_shared(const char *opt, const char *file)
{
	struct stat st;
	if (stat(file, &st) == 0 && (st.st_mode & 077))
		fprintf(stderr, "moat serve: warning: %s %s is accessible to other users "
			"(mode %04o); chmod 600 it\n", opt, file, (unsigned)(st.st_mode & 07777));
}

static char *read_token(const char *file)
{
	char buf[4096];
	struct moat_err e = {0};
	if (moat_read_file(file, buf, sizeof buf, &e) < 0)
		return NULL;
	buf[strcspn(buf, "\r\n")] = '\0';
	return buf[0] ? strdup(buf) : NULL;
}

/* envd's POST /files (the E2B door) carries a whole file: --max-file and
 * its multipart framing; a one-time upload URL's PUT /files/<ticket> on a
 * control listener an artifact (--artifact-max: a larger one is refused
 * before it is read); every other route as api.c says. */
static uint64_t max_upload, max_artifact;

static uint64_t body_limit(enum evhttp_cmd_type m, const char *path)
{
	if (m == EVHTTP_REQ_POST && !strncmp(path, "/files", 6) && (!path[6] || path[6] == '?'))
		return max_upload;
	if (m == EVHTTP_REQ_PUT && !strncmp(path, "/files/", 7))
		return max_artifact;
	return api_body_limit(m, path);
}

/* Authenticated requests: the MCP door's path, else moat's own API. */
static void route(struct evhttp_request *req)
{
	if (mcp_claims(req))
		mcp_route(req);
	else
		api_route(req);
}

static const char *env_get(const char *name)
{
	return getenv(name);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	event_base_loopbreak(arg);
}

int main(int argc, char **argv)
{
	/* whatever the daemon makes on the host is its own: the store holds
	 * the sandboxes' env values, the logs their traffic */
	umask(077);
	/* stdin/out/err open, so that no socket or pipe of ours becomes fd
	 * 0-2 (a forked job's output would then mix with its stderr) */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
			return 125;
	/* `moat serve ...` arrives as argv {"moat", "serve", ...} */
	if (argc > 1 && !strcmp(argv[1], "serve")) {
		argv++;
		argc--;
	}
	static const struct option opts[] = {
		{"listen", required_argument, 0, 'l'}, {"data", required_argument, 0, 'd'},
		{"token-file", required_argument, 0, 't'},
		{"allow-host-path", required_argument, 0, 'a'},
		{"max-sandboxes", required_argument, 0, 'n'}, {"memory", required_argument, 0, 'm'},
		{"pids", required_argument, 0, 'p'},   {"cpus", required_argument, 0, 'c'},
		{"pool", required_argument, 0, 'P'},
		{"pool-users", required_argument, 0, 'Q' + 256},
		{"pool-sessions", required_argument, 0, 1001},
		{"net-allow", required_argument, 0, 'N'},
		{"secrets-file", required_argument, 0, 'S'},
		{"secret-env", required_argument, 0, 'E'},
		{"upstream-ca", required_argument, 0, 'U'},
		{"max-file", required_argument, 0, 'F'}, {"max-archive", required_argument, 0, 'A'},
		{"quota", required_argument, 0, 'Q'},
		{"template", required_argument, 0, 'T'},
		{"mcp-sessions", required_argument, 0, 'M' + 256},
		{"mcp-idle", required_argument, 0, 'I' + 256},
		{"allow-origin", required_argument, 0, 'O' + 256},
		{"allow-degraded", no_argument, 0, 'D' + 256},
		{"artifact-max", required_argument, 0, 'X' + 256},
		{"artifact-url-ttl", required_argument, 0, 'Y' + 256},
		{"store-max", required_argument, 0, 'S' + 256},
		{"layer-max", required_argument, 0, 'L' + 256},
		{"registry-auth", required_argument, 0, 'R' + 256},
		{"registry", required_argument, 0, 'G' + 256},
		{"insecure-registry", required_argument, 0, 'K' + 256},
		{"llm-route", required_argument, 0, 'W' + 256},
		{"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
	const char *listen = "127.0.0.1:7070", *data = NULL, *token_file = NULL;
	struct moat_strv host = {0}, net_allow = {0}, templates = {0}, origins = {0};
	struct moat_strv registries = {0}, insecure_regs = {0};
	struct images_config imcfg = {0};
	struct box_config cfg = {.max_sandboxes = 10000, .pool = 2, .pool_users = 0};
	struct api_config api = {.max_file = 256u << 20, .max_archive = 1u << 30};
	uint64_t mcp_sessions = MCP_MAX_SESSIONS, mcp_idle = MCP_IDLE_S;
	uint64_t artifact_max = (uint64_t)64 << 20, artifact_ttl = 300;
	bool allow_degraded = false;
	unsigned degraded = 0;
	struct gate_policy ceiling;
	gate_policy_init(&ceiling);
	bool have_ceiling = false;
	json_auto_t *secrets = json_object(); /* freed on every return */
	/* --llm-route (issue 14): llm_init copies them; freed on every return */
	__attribute__((cleanup(llm_routes_free))) struct llm_routes llm_rt = {0};
	struct llm_route *llm_routes = llm_rt.v;
	size_t llm_nroutes = 0;
	bool pool_sessions_set = false;
	const char *upstream_ca = NULL;
	struct moat_err e = {0};
	int64_t quotas[MOAT_QUOTAS];
	for (int i = 0; i < MOAT_QUOTAS; i++)
		quotas[i] = -1;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		uint64_t v;
		switch (c) {
		case 'l': listen = optarg; break;
		case 'D' + 256: allow_degraded = true; break;
		case 'S' + 256:
		case 'L' + 256: {
			uint64_t sz;
			if (moat_parse_size(optarg, &sz, &e) < 0 || !sz || sz > INT64_MAX)
				return fail(c == 'S' + 256 ? "--store-max: %s" : "--layer-max: %s",
					    e.msg[0] ? e.msg : "a size above 0", "");
			*(c == 'S' + 256 ? &imcfg.store_max : &imcfg.layer_max) = (int64_t)sz;
			break;
		}
		case 'R' + 256:
			if (access(optarg, R_OK) < 0)
				return fail("--registry-auth %s: %s", optarg, strerror(errno));
			warn_if_shared("--registry-auth", optarg);
			imcfg.auth_file = optarg;
			break;
		case 'G' + 256:
			if (!*optarg || strpbrk(optarg, "/@ "))
				return fail("--registry %s: expected a registry HOST[:PORT] pattern "
					    "(globs: *.example.com, host:*)", optarg, "");
			moat_strv_add(&registries, optarg);
			break;
		case 'W' + 256:
			if (llm_nroutes == sizeof llm_rt.v / sizeof *llm_rt.v)
				return fail("--llm-route %s: at most %s routes", optarg, "32");
			if (llm_route_parse(optarg, &llm_routes[llm_nroutes], &e) < 0)
				return fail("%s%s", e.msg, "");
			llm_rt.n = ++llm_nroutes;
			break;
		case 'K' + 256:
			if (!*optarg || strpbrk(optarg, "/@ "))
				return fail("--insecure-registry %s: expected HOST[:PORT]", optarg, "");
			moat_strv_add(&insecure_regs, optarg);
			break;
		case 'M' + 256:
			if (moat_parse_uint(optarg, 100000, &mcp_sessions, &e) < 0 || !mcp_sessions)
				return fail("--mcp-sessions: %s", e.msg[0] ? e.msg : "at least 1", "");
			break;
		case 'I' + 256:
			if (moat_parse_uint(optarg, 86400 * 30, &mcp_idle, &e) < 0 || !mcp_idle)
				return fail("--mcp-idle: %s", e.msg[0] ? e.msg : "at least 1", "");
			break;
		case 'X' + 256:
			/* an upload arrives whole through a control listener,
			 * whose body limit is CP_MAX_BODY */
			if (moat_parse_size(optarg, &artifact_max, &e) < 0)
				return fail("--artifact-max: %s", e.msg, "");
			if (artifact_max > CP_MAX_BODY)
				return fail("--artifact-max %s: at most 256M (a control listener's "
					    "body limit)", optarg, "");
			break;
		case 'Y' + 256:
			if (moat_parse_uint(optarg, 86400, &artifact_ttl, &e) < 0)
				return fail("--artifact-url-ttl: %s (1 to 86400 seconds)", e.msg, "");
			break;
		case 'O' + 256: {
			/* scheme://host[:port], as browsers send it */
			const char *h = strstr(optarg, "://");
			if (!h || !h[3] || strpbrk(h + 3, "/?#@ ") ||
			    (strncasecmp(optarg, "http://", 7) && strncasecmp(optarg, "https://", 8)))
				return fail("--allow-origin %s: expected http(s)://HOST[:PORT] "
					    "(an Origin has no path)", optarg, "");
			char *o = strdup(optarg);
			if (!o)
				return fail("--allow-origin: out of memory%s", "", "");
			moat_strv_take(&origins, o);
			break;
		}
		case 'd': data = optarg; break;
		case 't': token_file = optarg; break;
		case 'a': {
			char *r = realpath(optarg, NULL);
			struct stat st;
			if (!r || stat(r, &st) < 0 || !S_ISDIR(st.st_mode))
				return fail("--allow-host-path %s: not a directory", optarg, "");
			moat_strv_take(&host, r);
			break;
		}
		case 'n':
			if (moat_parse_uint(optarg, 1000000, &cfg.max_sandboxes, &e) < 0)
				return fail("--max-sandboxes: %s", e.msg, "");
			break;
		case 'm':
			if (moat_parse_size(optarg, &cfg.default_memory, &e) < 0)
				return fail("--memory: %s", e.msg, "");
			break;
		case 'p':
			if (moat_parse_uint(optarg, 1 << 22, &cfg.default_pids, &e) < 0)
				return fail("--pids: %s", e.msg, "");
			break;
		case 'c':
			if (moat_parse_scaled(optarg, 1000, 1024000, &cfg.default_cpu_milli, &e) < 0)
				return fail("--cpus: %s", e.msg, "");
			break;
		case 'P':
			if (!strcmp(optarg, "0"))
				cfg.pool = 0;
			else if (moat_parse_uint(optarg, 1000, &cfg.pool, &e) < 0)
				return fail("--pool: %s", e.msg, "");
			break;
		case 'Q' + 256:
			if (!strcmp(optarg, "0"))
				cfg.pool_users = 0;
			else if (moat_parse_uint(optarg, 1000, &cfg.pool_users, &e) < 0)
				return fail("--pool-users: %s", e.msg, "");
			break;
		case 1001:
			pool_sessions_set = true;
			if (!strcmp(optarg, "0"))
				cfg.pool_sessions = 0;
			else if (moat_parse_uint(optarg, 1000, &cfg.pool_sessions, &e) < 0)
				return fail("--pool-sessions: %s", e.msg, "");
			break;
		case 'N':
			if (gate_policy_add_allow(&ceiling, optarg, &e) < 0)
				return fail("--net-allow: %s", e.msg, "");
			moat_strv_add(&net_allow, optarg);
			have_ceiling = true;
			break;
		case 'S': {
			/* NAME=VALUE lines; the values stay in this process */
			FILE *f = fopen(optarg, "re");
			if (!f)
				return fail("--secrets-file %s: %s", optarg, strerror(errno));
			warn_if_shared("--secrets-file", optarg);
			char line[8192];
			unsigned no = 0;
			while (fgets(line, sizeof line, f)) {
				no++;
				line[strcspn(line, "\r\n")] = '\0';
				if (!line[0] || line[0] == '#')
					continue;
				char *eq = strchr(line, '=');
				if (!eq || eq == line) {
					fclose(f);
					char where[64];
					snprintf(where, sizeof where, "%u", no);
					return fail("--secrets-file: line %s: expected NAME=VALUE", where, "");
				}
				*eq = '\0';
				json_object_set_new(secrets, line, json_string(eq + 1));
			}
			fclose(f);
			break;
		}
		case 'E': {
			const char *val = getenv(optarg);
			if (!val || !*val)
				return fail("--secret-env %s: not set in the daemon's environment", optarg, "");
			json_object_set_new(secrets, optarg, json_string(val));
			break;
		}
		case 'U':
			upstream_ca = optarg;
			break;
		case 'F':
			if (moat_parse_size(optarg, &v, &e) < 0)
				return fail("--max-file: %s", e.msg, "");
			api.max_file = v;
			break;
		case 'A':
			if (moat_parse_size(optarg, &v, &e) < 0)
				return fail("--max-archive: %s", e.msg, "");
			api.max_archive = v;
			break;
		case 'Q':
			if (moat_quota_parse(quotas, optarg, &e) < 0)
				return fail("--quota: %s", e.msg, "");
			break;
		case 'T': {
			/* NAME=DIR, DIR kept as its real path */
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg || !eq[1])
				return fail("--template %s: expected NAME=ROOTFS_DIR", optarg, "");
			char *r = realpath(eq + 1, NULL);
			struct stat st;
			if (!r || stat(r, &st) < 0 || !S_ISDIR(st.st_mode)) {
				free(r);
				return fail("--template %s: not a directory", optarg, "");
			}
			char *t = NULL;
			if (asprintf(&t, "%.*s=%s", (int)(eq - optarg), optarg, r) < 0)
				t = NULL;
			free(r);
			if (!t)
				return fail("--template: out of memory%s", "", "");
			moat_strv_take(&templates, t);
			break;
		}
		case 'h': usage(stdout); return 0;
		default:
			return fail("unknown or incomplete option %s (see moat serve --help)",
				    argv[optind - 1], "");
		}
	}
	if (optind < argc)
		return fail("unexpected argument %s", argv[optind], "");
	/* the operator's ceilings: --quota, else the defaults for this host */
	moat_jail_quota_defaults(cfg.quotas);
	for (int i = 0; i < MOAT_QUOTAS; i++)
		if (quotas[i] >= 0)
			cfg.quotas[i] = quotas[i];
	api.quotas = cfg.quotas;
	/* the operator's limits: enforceable, or dropped under --allow-degraded */
	if (limits_defaults(&cfg.default_memory, &cfg.default_pids, &cfg.default_cpu_milli,
			    allow_degraded, &degraded, &e) < 0)
		return fail("%s%s", e.msg, "");
	api.default_memory = cfg.default_memory;
	api.default_pids = cfg.default_pids;
	api.default_cpu_milli = cfg.default_cpu_milli;
	char *token = NULL;
	if (token_file) {
		token = read_token(token_file);
		if (!token)
			return fail("--token-file %s: missing, unreadable or empty", token_file, "");
		warn_if_shared("--token-file", token_file);
	} else if (getenv("MOAT_API_TOKEN") && *getenv("MOAT_API_TOKEN")) {
		token = strdup(getenv("MOAT_API_TOKEN"));
	}
	if (!token && !loopback(listen))
		return fail("--listen %s: refusing a non-loopback address without a token "
			    "(set MOAT_API_TOKEN or --token-file)", listen, "");

	char defdata[PATH_MAX];
	if (!data) {
		if (serve_default_data_dir(geteuid(), env_get, defdata, sizeof defdata, &e) < 0)
			return fail("%s%s", e.msg, "");
		data = defdata;
	}
	if (mkdir_p(data) < 0)
		return fail("--data %s: %s", data, strerror(errno));
	/* ours and 0700 (an existing 0755 one, as systemd's StateDirectory=
	 * or mkdir -p make it, is tightened), never another user's */
	int dfd = moat_own_dir(AT_FDCWD, data, 0700, &e);
	if (dfd < 0)
		return fail("--data %s", e.msg, "");
	char *real = fchdir(dfd) == 0 ? getcwd(NULL, 0) : NULL;
	close(dfd);
	if (!real)
		return fail("--data %s: %s", data, strerror(errno));
	/* one daemon per data directory */
	int lock = moat_own_file(AT_FDCWD, "moat.lock", O_RDWR | O_CREAT, 0600, &e);
	if (lock < 0)
		return fail("--data %s/%s", real, e.msg);
	if (flock(lock, LOCK_EX | LOCK_NB) < 0)
		return fail("--data %s: another moat serve uses it", real, "");

	char agent[PATH_MAX];
	if (moat_exe_find("moat-agent", agent, sizeof agent, &e) < 0)
		return fail("%s%s", e.msg, "");
	cfg.agent_exe = open(agent, O_PATH | O_CLOEXEC);
	if (cfg.agent_exe < 0)
		return fail("%s: %s (build it with make)", agent, strerror(errno));

	/* one control socket and one pidfd per sandbox */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);

	struct event_base *base = event_base_new();
	if (!base)
		return fail("cannot create the event loop%s", "", "");
	cfg.data_dir = real;
	api.base = base;
	struct gate *gate = gate_new(base, upstream_ca, &e);
	if (!gate)
		return fail("egress gateway: %s", e.msg, "");
	cfg.gate = gate;
	cfg.net_ceiling = have_ceiling ? &ceiling : NULL;
	cfg.secrets = secrets;
	api.net_ceiling = cfg.net_ceiling;
	api.net_allow = net_allow.v;
	api.secrets = secrets;
	cfg.host_paths = host.v;
	api.host_paths = host.v;
	/* pause needs a freezer cgroup per sandbox: known now, said once */
	struct moat_err fe = {0};
	int fver = 0;
	static char freezer_why[sizeof fe.msg];
	cfg.freezer = moat_freezer_check(&fver, &fe) == 0;
	snprintf(freezer_why, sizeof freezer_why, "%s", fe.msg);
	cfg.freezer_why = freezer_why;
	if (cfg.freezer)
		fprintf(stderr, "moat serve: pause: available (cgroup v%d freezer)\n", fver);
	else
		fprintf(stderr, "moat serve: pause: unavailable (%s); pause answers 422 "
			"pause_unavailable\n", fe.msg);
	api_init(&api);
	struct core_config core = {
		.base = base, .host_paths = host.v, .max_file = api.max_file,
		.max_archive = api.max_archive, .net_ceiling = cfg.net_ceiling,
		.net_allow = net_allow.v, .secrets = secrets, .quotas = cfg.quotas,
		.default_memory = cfg.default_memory, .default_pids = cfg.default_pids,
		.default_cpu_milli = cfg.default_cpu_milli, .templates = templates.v,
		.allow_degraded = allow_degraded, .degraded = degraded};
	core_init(&core);
	/* a daemon with model routes is one for sessions: one sandbox ready
	 * keeps a session's start in the pool's time (docs/benchmarks.md) */
	if (!pool_sessions_set && llm_nroutes)
		cfg.pool_sessions = 1;
	if (store_open(".", &e) < 0 || snap_init(base, (uint64_t)imcfg.store_max, &e) < 0 ||
	    box_init(base, &cfg, &e) < 0)
		return fail("%s%s", e.msg, "");
	imcfg.base = base;
	imcfg.data_dir = real;
	imcfg.registries = registries.v;
	imcfg.insecure = insecure_regs.v;
	if (images_init(&imcfg, &e) < 0)
		return fail("%s%s", e.msg, "");
	/* the control plane (docs/control-plane.md): its tables and hooks
	 * before the sandboxes come back, its sessions after */
	struct session_config scfg = {.base = base, .data_dir = real};
	struct artifacts_config acfg = {.base = base, .data_dir = real,
					.max_size = artifact_max,
					.url_ttl_s = (int64_t)artifact_ttl};
	if (llm_init(base, llm_routes, llm_nroutes, secrets, &e) < 0 || conv_init(&e) < 0 ||
	    session_init(&scfg, &e) < 0 || artifacts_init(&acfg, &e) < 0 || cp_init(base, &e) < 0)
		return fail("%s%s", e.msg, "");
	box_restore();
	session_restore();
	clone_sweep(); /* seeds of creates a killed daemon left */
	snap_io_sweep(); /* images of snapshot imports a killed daemon left */
	images_gc();   /* blobs and layers of pulls a killed daemon left */
	max_upload = api.max_file + (64u << 10);
	max_artifact = artifact_max;
	http_set_body_limit(body_limit);
	struct mcp_config mcp = {.base = base,
				 .max_sessions = (unsigned)mcp_sessions, .idle_s = (unsigned)mcp_idle};
	mcp_init(&mcp);
	http_allow_origins(origins.v);
	if (http_start(base, listen, token, route, &e) < 0)
		return fail("%s%s", e.msg, "");
	struct event *sterm = evsignal_new(base, SIGTERM, on_signal, base);
	struct event *sint = evsignal_new(base, SIGINT, on_signal, base);
	if (!sterm || !sint || event_add(sterm, NULL) < 0 || event_add(sint, NULL) < 0)
		return fail("cannot watch signals%s", "", "");
	fprintf(stderr, "moat serve: listening on http://%s (data %s, %zu sandboxes restored)%s\n",
		listen, real, box_count(), token ? ", token required" : "");
	event_base_dispatch(base);
	fprintf(stderr, "moat serve: stopping; sandboxes keep running\n");
	event_free(sterm);
	event_free(sint);
	mcp_shutdown();
	http_stop();
	cp_shutdown();
	session_shutdown();
	artifacts_shutdown();
	llm_shutdown();
	job_cancel_all(); /* a clone still running for a create nobody awaits */
	images_shutdown(); /* pulls in flight stop (their blobs are swept next start) */
	box_shutdown();
	gate_free(gate);
	gate_policy_free(&ceiling);
	store_close();
	event_base_free(base);
	free(token);
	free(real);
	moat_strv_free(&host);
	moat_strv_free(&net_allow);
	moat_strv_free(&templates);
	moat_strv_free(&origins);
	moat_strv_free(&registries);
	moat_strv_free(&insecure_regs);
	close(cfg.agent_exe);
	close(lock);
	return 0;
}

#endif
