/* moat run: flags -> policy -> one engine call -> the command's status. */
#define _GNU_SOURCE
#include "cli.h"

#include <moat/jail.h>
#include <moat/policy.h>

#include "gate/policy.h"
#include "../base/cleanup.h"
#include "../base/term.h"
#include "../base/util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

extern char **environ;

enum {
	OPT_ALLOW_READ = 256, OPT_DENY_READ, OPT_ALLOW_WRITE, OPT_DENY_WRITE, OPT_ENV,
	OPT_MEMORY, OPT_PIDS, OPT_CPUS, OPT_TIMEOUT, OPT_NET, OPT_POLICY, OPT_SRT,
	OPT_MODE, OPT_DEGRADED, OPT_ALLOW_DOMAIN, OPT_DENY_DOMAIN, OPT_RESOLVE, OPT_SECRET,
	OPT_NET_LOG, OPT_UPSTREAM_CA, OPT_NET_CEILING, OPT_QUOTA, OPT_USERS, OPT_USER,
	OPT_ROOTFS, OPT_ROOTFS_UPPER,
};

static const struct option opts[] = {
	{"workspace", required_argument, NULL, 'w'},
	{"allow-read", required_argument, NULL, OPT_ALLOW_READ},
	{"deny-read", required_argument, NULL, OPT_DENY_READ},
	{"allow-write", required_argument, NULL, OPT_ALLOW_WRITE},
	{"deny-write", required_argument, NULL, OPT_DENY_WRITE},
	{"env", required_argument, NULL, OPT_ENV},
	{"memory", required_argument, NULL, OPT_MEMORY},
	{"pids", required_argument, NULL, OPT_PIDS},
	{"cpus", required_argument, NULL, OPT_CPUS},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"quota", required_argument, NULL, OPT_QUOTA},
	{"net", required_argument, NULL, OPT_NET},
	{"policy", required_argument, NULL, OPT_POLICY},
	{"srt-settings", required_argument, NULL, OPT_SRT},
	{"mode", required_argument, NULL, OPT_MODE},
	{"allow-degraded", no_argument, NULL, OPT_DEGRADED},
	{"allow-domain", required_argument, NULL, OPT_ALLOW_DOMAIN},
	{"deny-domain", required_argument, NULL, OPT_DENY_DOMAIN},
	{"resolve", required_argument, NULL, OPT_RESOLVE},
	{"secret", required_argument, NULL, OPT_SECRET},
	{"net-log", required_argument, NULL, OPT_NET_LOG},
	{"upstream-ca", required_argument, NULL, OPT_UPSTREAM_CA},
	{"net-ceiling", required_argument, NULL, OPT_NET_CEILING},
	{"users", no_argument, NULL, OPT_USERS},
	{"user", required_argument, NULL, OPT_USER},
	{"rootfs", required_argument, NULL, OPT_ROOTFS},
	{"rootfs-upper", required_argument, NULL, OPT_ROOTFS_UPPER},
	{"tty", no_argument, NULL, 't'},
	{"no-tty", no_argument, NULL, 'T'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
	fputs("usage: moat run [OPTIONS] -- COMMAND [ARG...]\n"
	      "\n"
	      "  -w, --workspace DIR     read-write directory the command starts in (default: .)\n"
	      "      --allow-read PATH   also show PATH read-only (repeatable)\n"
	      "      --deny-read PATH    hide PATH (repeatable)\n"
	      "      --allow-write PATH  also make PATH writable (repeatable)\n"
	      "      --deny-write PATH   keep PATH read-only, even if it does not exist yet\n"
	      "      --env NAME[=VALUE]  pass the caller's NAME, or set it (repeatable)\n"
	      "      --memory SIZE       memory limit, e.g. 512M, 2G\n"
	      "      --pids N            at most N processes and threads\n"
	      "      --cpus N            CPU time, in CPUs (fractions allowed)\n"
	      "      --timeout SECONDS   kill the sandbox after this long (exit 124)\n"
	      "      --quota NAME=N      a per-user kernel count the sandbox may use, e.g.\n"
	      "                          inotify_instances=4 (repeatable; docs/policy.md)\n"
	      "      --net none|host     network: own empty namespace (default) or the host's\n"
	      "      --allow-domain PAT  reach PAT through the egress gateway: example.com,\n"
	      "                          *.example.com, with :port, an IP or a CIDR (repeatable)\n"
	      "      --deny-domain PAT   refuse PAT even if allowed (repeatable)\n"
	      "      --resolve H:ADDR    the gateway resolves H to ADDR (as curl --resolve)\n"
	      "      --secret NAME@HOST[,HOST]  NAME holds a placeholder inside; the gateway\n"
	      "                          puts $NAME's real value in requests to HOST\n"
	      "      --net-log FILE      the gateway's decisions, one JSON line each\n"
	      "      --upstream-ca FILE  CAs the gateway trusts upstream (default: the system's)\n"
	      "      --net-ceiling PAT   every destination must also match PAT (repeatable;\n"
	      "                          moat serve passes its --net-allow for manifest clones)\n"
	      "      --policy FILE       native JSON policy (docs/policy.md)\n"
	      "      --srt-settings FILE sandbox-runtime (srt) settings file\n"
	      "      --mode MODE         read-only | workspace-write | danger-full-access\n"
	      "      --allow-degraded    run even if a protection layer or a limit is unavailable\n"
	      "      --users             users mode: a computer with root (0) and user (1000),\n"
	      "                          the command runs as user in /home/user's world; run\n"
	      "                          as root, system directories are private copy-on-write\n"
	      "                          (docs/policy.md \"Users mode\"); rootless it needs an\n"
	      "                          /etc/subuid range and newuidmap\n"
	      "      --user root|user    with --users: who runs the command (default user)\n"
	      "      --rootfs DIR        an image root instead of the host's system\n"
	      "                          directories, read-only under a private writable\n"
	      "                          overlay; repeatable: layers, the first given on top\n"
	      "      --rootfs-upper DIR  with --rootfs: keep the image's changes in DIR/upper\n"
	      "                          (DIR/work is overlayfs's scratch), not in memory\n"
	      "  -t, --tty               give the command a terminal of its own (a pty of\n"
	      "                          the sandbox: job control, tty, full-screen programs;\n"
	      "                          its stderr then shares stdout); the default when\n"
	      "                          stdin and stdout are both terminals\n"
	      "  -T, --no-tty            never: stdio stays as given, no controlling terminal\n"
	      "\n"
	      "exit status: the command's; 128+N if killed by signal N; 124 on timeout;\n"
	      "125 moat's own error; 126 not executable; 127 not found.\n", f);
}

struct flag {
	int opt;
	const char *arg;
};

static void warn_cb(void *arg, const char *msg)
{
	(void)arg;
	fprintf(stderr, "moat: warning: %s\n", msg);
}

static char *find_home(void)
{
	const char *h = getenv("HOME");
	char from_passwd[PATH_MAX] = "";
	if (!h || h[0] != '/') {
		/* /etc/passwd read directly (fgetpwent): moat is linked
		 * statically, and NSS modules cannot be loaded into it. */
		FILE *f = fopen("/etc/passwd", "re");
		struct passwd *pw;
		while (f && (pw = fgetpwent(f)))
			if (pw->pw_uid == getuid() && pw->pw_dir && pw->pw_dir[0] == '/') {
				snprintf(from_passwd, sizeof from_passwd, "%s", pw->pw_dir);
				break;
			}
		if (f)
			fclose(f);
		/* fail closed: a wrong guess would leave the real home's secrets
		 * (~/.ssh, ...) unhidden should a policy make it visible */
		if (!from_passwd[0])
			return NULL;
		h = from_passwd;
	}
	char *real = realpath(h, NULL);
	return real ? real : strdup(h);
}

static int add_path(struct moat_policy *p, struct moat_strv *list, const char *arg,
		    const char *cwd, const char *home, const char *what, struct moat_err *e)
{
	size_t before = list->n;
	if (moat_policy_add_path(list, arg, cwd, home, what, e) < 0)
		return -1;
	if (list->n > before)
		moat_policy_note_origin(p, list->v[list->n - 1], what);
	return 0;
}

static int apply_flag(struct moat_policy *p, const struct flag *f, const char *cwd,
		      const char *home, struct moat_err *e)
{
	const char *name = NULL;
	for (size_t i = 0; opts[i].name; i++)
		if (opts[i].val == f->opt)
			name = opts[i].name;
	char what[64];
	snprintf(what, sizeof what, "--%s", name ? name : "?");
	int r = 0;
	switch (f->opt) {
	case 'w':
		free(p->workspace);
		p->workspace = moat_path_absolute(f->arg, cwd, home, e);
		r = p->workspace ? 0 : -1;
		break;
	case OPT_ALLOW_READ:
		return add_path(p, &p->allow_read, f->arg, cwd, home, what, e);
	case OPT_DENY_READ:
		return add_path(p, &p->deny_read, f->arg, cwd, home, what, e);
	case OPT_ALLOW_WRITE:
		return add_path(p, &p->allow_write, f->arg, cwd, home, what, e);
	case OPT_DENY_WRITE:
		return add_path(p, &p->deny_write, f->arg, cwd, home, what, e);
	case OPT_ENV:
		r = moat_policy_add_env(p, f->arg, e);
		break;
	case OPT_MEMORY:
		r = moat_parse_size(f->arg, &p->memory, e);
		break;
	case OPT_PIDS:
		r = moat_parse_uint(f->arg, 4194304, &p->pids, e);
		break;
	case OPT_CPUS:
		r = moat_parse_scaled(f->arg, 1000, 4096000, &p->cpu_milli, e);
		if (r == 0 && p->cpu_milli < 10) /* the kernel's minimum quota */
			r = moat_err_set(e, MOAT_E_USAGE, 0, "'%s' is below 0.01 CPU", f->arg);
		break;
	case OPT_TIMEOUT:
		r = moat_parse_scaled(f->arg, 1000, 31536000000ULL, &p->timeout_ms, e);
		break;
	case OPT_QUOTA:
		r = moat_quota_parse(p->quotas, f->arg, e);
		break;
	case OPT_NET:
		if (strcmp(f->arg, "none") == 0)
			p->net = MOAT_NET_NONE;
		else if (strcmp(f->arg, "host") == 0)
			p->net = MOAT_NET_HOST;
		else
			r = moat_err_set(e, MOAT_E_USAGE, 0,
					 "'%s' (expected none or host)", f->arg);
		break;
	case OPT_DEGRADED:
		p->allow_degraded = true;
		break;
	case OPT_ALLOW_DOMAIN:
		moat_strv_add(&p->net_allow, f->arg);
		break;
	case OPT_DENY_DOMAIN:
		moat_strv_add(&p->net_deny, f->arg);
		break;
	case OPT_RESOLVE:
		moat_strv_add(&p->net_resolve, f->arg);
		break;
	case OPT_SECRET:
		r = moat_policy_add_secret(p, f->arg, e);
		break;
	case OPT_ROOTFS: {
		char *a = moat_path_absolute(f->arg, cwd, home, e);
		if (!a)
			r = -1;
		else
			moat_strv_take(&p->rootfs_layers, a);
		break;
	}
	case OPT_ROOTFS_UPPER:
		free(p->rootfs_upper);
		p->rootfs_upper = moat_path_absolute(f->arg, cwd, home, e);
		r = p->rootfs_upper ? 0 : -1;
		break;
	default:
		break;
	}
	if (r < 0)
		moat_err_prefix(e, "%s", what);
	return r;
}

/* Every network rule is checked, gateway or not: a typo in a deny rule
 * must not pass silently. */
static int check_net_rules(const struct moat_policy *p, struct moat_err *e)
{
	struct gate_policy g;
	gate_policy_init(&g);
	const struct moat_strv *lists[] = {&p->net_allow, &p->net_deny, &p->net_resolve};
	const char *what[] = {"--allow-domain/network.allow", "--deny-domain/network.deny",
			      "--resolve/network.resolve"};
	int rc = 0;
	for (int k = 0; k < GATE_LISTS && rc == 0; k++)
		for (size_t i = 0; i < lists[k]->n && rc == 0; i++) {
			rc = gate_policy_add(&g, (enum gate_list)k, lists[k]->v[i], e);
			if (rc < 0)
				moat_err_prefix(e, "%s", what[k]);
		}
	gate_policy_free(&g);
	return rc;
}

/* Signals a terminal or a supervisor sends us, passed on to the command. */
static const int forward[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1,
			      SIGUSR2, SIGWINCH, SIGCONT, 0};

static int wait_for(struct run_tty *t, struct moat_jail *j, int64_t deadline,
		    struct moat_jail_status *st, struct moat_err *e)
{
	return t ? run_tty_wait(t, j, deadline, forward, st, e)
		 : moat_jail_wait(j, deadline, forward, st, e);
}

int moat_cmd_run(int argc, char **argv)
{
	_cleanup_free_ struct flag *flags = calloc((size_t)argc + 1, sizeof *flags);
	if (!flags)
		return moat_cli_fail("out of memory");
	size_t nflags = 0;
	const char *mode = NULL, *policy = NULL, *srt = NULL, *net_log = NULL, *upstream_ca = NULL;
	const char *user = NULL;
	bool users = false;
	int tty_mode = -1; /* --tty 1, --no-tty 0, else as stdin and stdout are */
	struct moat_strv ceiling = {0};
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+w:htT", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case '?':
			if (optopt && optopt < 256)
				return moat_cli_fail("unknown option '-%c' (see moat run --help)", optopt);
			return moat_cli_fail("unknown or incomplete option '%s' (see moat run --help)",
					     argv[optind - 1]);
		case ':':
			return moat_cli_fail("option '%s' needs a value", argv[optind - 1]);
		case OPT_MODE:
			mode = optarg;
			break;
		case OPT_POLICY:
			policy = optarg;
			break;
		case OPT_SRT:
			srt = optarg;
			break;
		case OPT_NET_LOG:
			net_log = optarg;
			break;
		case OPT_UPSTREAM_CA:
			upstream_ca = optarg;
			break;
		case OPT_NET_CEILING:
			moat_strv_add(&ceiling, optarg);
			break;
		case OPT_USERS:
			users = true;
			break;
		case 't':
			tty_mode = 1;
			break;
		case 'T':
			tty_mode = 0;
			break;
		case OPT_USER:
			if (strcmp(optarg, "root") != 0 && strcmp(optarg, "user") != 0)
				return moat_cli_fail("--user: '%s' (expected root or user)", optarg);
			user = optarg;
			break;
		default:
			/* "--memory -- cmd" would take "--" as the size */
			if (optarg && strcmp(optarg, "--") == 0)
				return moat_cli_fail("option '%s' needs a value", argv[optind - 2]);
			flags[nflags++] = (struct flag){c, optarg};
		}
	}
	if (optind >= argc) {
		moat_strv_free(&ceiling);
		return moat_cli_fail("no command given (usage: moat run [OPTIONS] -- COMMAND [ARG...])");
	}
	char *const *cmd = argv + optind;
	/* As docker -t: a terminal only when asked, or when both ends are
	 * one (moat run -- cmd > file keeps its plain stdout and stderr). */
	if (tty_mode == 1 && !isatty(STDIN_FILENO)) {
		moat_strv_free(&ceiling);
		return moat_cli_fail("--tty: standard input is not a terminal");
	}
	bool tty = tty_mode == 1 || (tty_mode < 0 && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO));

	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd))
		return moat_cli_fail("current directory: %s", strerror(errno));
	_cleanup_free_ char *home = find_home();
	if (!home) {
		moat_strv_free(&ceiling);
		return moat_cli_fail("cannot tell your home directory: HOME is unset and uid %u "
				     "is not in /etc/passwd (set HOME)", (unsigned)getuid());
	}

	struct moat_policy p;
	struct moat_err e = {0};
	moat_policy_init(&p);
	int rc = 125;
	struct moat_strv env = {0};
	struct moat_jail *j = NULL;
	struct run_gate *gate = NULL;
	struct run_tty relay = {.master = -1, .in = STDIN_FILENO, .out = STDOUT_FILENO};
	struct run_tty *rt = NULL;
	struct termios modes;
	struct run_dns *dns = NULL;
	if (mode && moat_policy_set_mode(&p, mode, &e) < 0) {
		moat_err_prefix(&e, "--mode");
		goto out_err;
	}
	if (policy && moat_policy_load_json(&p, policy, cwd, home, &e) < 0)
		goto out_err;
	if (srt && moat_policy_load_srt(&p, srt, cwd, home, &e) < 0)
		goto out_err;
	for (size_t i = 0; i < nflags; i++)
		if (apply_flag(&p, &flags[i], cwd, home, &e) < 0)
			goto out_err;
	if (user && !users) {
		moat_err_set(&e, MOAT_E_USAGE, 0, "--user: only with --users");
		goto out_err;
	}
	p.users = users;
	p.users_root = user && strcmp(user, "root") == 0;
	if (moat_policy_finalize(&p, cwd, home, &e) < 0)
		goto out_err;
	/* users mode: the secrets hidden are the caller's home's (above),
	 * the sandbox's own home is user's or root's */
	const char *in_home = !users ? home : p.users_root ? "/root" : "/home/user";
	for (size_t i = 0; i < p.warnings.n; i++)
		fprintf(stderr, "moat: warning: %s\n", p.warnings.v[i]);
	if (p.net == MOAT_NET_HOST)
		fprintf(stderr, "moat: warning: --net host: the sandbox shares the host's network\n");
	if (p.fs_base == MOAT_FS_HOST_WRITE)
		fprintf(stderr, "moat: warning: danger-full-access: the host filesystem is writable\n");
	if (moat_policy_build_env(&p, environ, in_home, &env, &e) < 0)
		goto out_err;
	/* No network: npm would retry every failed fetch for 70 s (its
	 * backoff, whatever the lookup answers); nothing can come back. */
	bool npm_set = false;
	for (size_t i = 0; i < env.n; i++)
		npm_set |= !strncmp(env.v[i], "npm_config_fetch_retries=", 25);
	if (p.net == MOAT_NET_NONE && !p.gateway && !npm_set)
		moat_strv_add(&env, "npm_config_fetch_retries=0");
	if (users) {
		moat_strv_take(&env, moat_strdupf("USER=%s", p.users_root ? "root" : "user"));
		moat_strv_take(&env, moat_strdupf("LOGNAME=%s", p.users_root ? "root" : "user"));
	}
	if (check_net_rules(&p, &e) < 0)
		goto out_err;
	if (p.gateway && run_gate_start(&p, &env, net_log, upstream_ca, &ceiling, &gate, &e) < 0)
		goto out_err;
	if (!p.gateway && (net_log || upstream_ca || ceiling.n)) {
		moat_err_set(&e, MOAT_E_USAGE, 0, "%s: only with --allow-domain or --secret "
			     "(the egress gateway)", net_log ? "--net-log" : upstream_ca ?
			     "--upstream-ca" : "--net-ceiling");
		goto out_err;
	}

	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t i = 0; forward[i]; i++)
		sigaddset(&set, forward[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);

	struct moat_launch l = {
		.argv = cmd,
		.envp = env.v,
		.home = in_home,
		.die_with_parent = true,
		.warn = warn_cb,
	};
	if (tty) {
		l.tty = true;
		if (tcgetattr(STDIN_FILENO, &modes) == 0)
			l.tty_modes = &modes;
		if (!moat_term_size(STDIN_FILENO, &l.tty_cols, &l.tty_rows))
			(void)moat_term_size(STDOUT_FILENO, &l.tty_cols, &l.tty_rows);
	}
	if (moat_jail_spawn(&p, &l, &j, &e) < 0)
		goto out_err;
	if (tty) {
		relay.master = moat_jail_tty(j);
		rt = &relay;
		/* raw only now: moat's own messages until here print normally;
		 * restored on every way out (below, atexit) */
		if (relay.master < 0 || moat_term_raw(STDIN_FILENO, &e) < 0) {
			if (relay.master < 0)
				moat_err_set(&e, MOAT_E_SYSTEM, 0, "the sandbox has no terminal");
			goto out_err;
		}
	}
	if (gate) {
		int gfds[2];
		if (moat_jail_gate_fds(j, gfds) < 0) {
			moat_err_set(&e, MOAT_E_SYSTEM, 0, "the sandbox has no gateway sockets");
			goto out_err;
		}
		if (run_gate_attach(gate, gfds, &e) < 0)
			goto out_err;
	}

	int dfds[2];
	if (moat_jail_dns_fds(j, dfds) == 0 && !(dns = run_dns_start(dfds, &e)))
		goto out_err;

	int64_t deadline = p.timeout_ms ? moat_now_ms() + (int64_t)p.timeout_ms : -1;
	struct moat_jail_status st;
	int r = wait_for(rt, j, deadline, &st, &e);
	if (r == 0) {
		/* Timed out: TERM first, the whole sandbox a second later. */
		moat_jail_signal(j, SIGTERM);
		r = wait_for(rt, j, moat_now_ms() + 1000, &st, &e);
		if (r == 0) {
			moat_jail_kill(j);
			r = wait_for(rt, j, -1, &st, &e);
		}
		moat_term_restore();
		if (r < 0)
			goto out_err;
		fprintf(stderr, "moat: timed out after %.3gs; the sandbox was killed\n",
			(double)p.timeout_ms / 1000);
		rc = 124;
		goto out;
	}
	moat_term_restore();
	if (r < 0)
		goto out_err;
	if (st.oom) {
		char lim[32];
		if (p.memory >= (1ULL << 20) && !(p.memory & ((1ULL << 20) - 1)))
			snprintf(lim, sizeof lim, "%lluM", (unsigned long long)(p.memory >> 20));
		else
			snprintf(lim, sizeof lim, "%llu", (unsigned long long)p.memory);
		fprintf(stderr, "moat: out of memory: the sandbox reached its memory limit "
				"(--memory %s) and the kernel killed a process\n", lim);
	}
	rc = st.exit_code;
	goto out;

out_err:
	moat_term_restore();
	rc = moat_cli_fail("%s", e.msg);
	rc = moat_err_exit_code(&e);
out:
	moat_term_restore();
	if (relay.master >= 0)
		close(relay.master);
	moat_jail_destroy(j);
	run_dns_finish(dns, &p);
	run_gate_finish(gate);
	moat_strv_free(&env);
	moat_strv_free(&ceiling);
	moat_policy_free(&p);
	return rc;
}
