/* Policy model: defaults, Codex presets, path lists, validation, the
 * command's environment, and the fixed lists of hidden and write-protected
 * paths. See include/moat/policy.h. */
#define _GNU_SOURCE
#include <moat/policy.h>

#include "../base/cleanup.h"
#include "../base/util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const moat_mandatory_deny[] = {
	/* shell start-up */
	".bashrc", ".bash_profile", ".bash_login", ".profile", ".bash_logout",
	".bash_aliases", ".zshrc", ".zprofile", ".zshenv", ".zlogin",
	/* git: hooks and config run code; modules/worktrees hold more of both */
	".gitconfig", ".gitmodules", ".git/hooks/", ".git/config",
	".git/config.worktree", ".git/modules/", ".git/worktrees/",
	/* editors, agents, tools that execute what their config says */
	".mcp.json", ".vscode/", ".idea/", ".claude/commands/", ".claude/agents/",
	".claude/hooks/", ".claude/settings.json", ".claude/settings.local.json",
	".ripgreprc", NULL,
};

/* Protected where they exist, but never given a placeholder: git refuses
 * to work with an unreadable .git/commondir. One created by the sandbox is
 * removed when the run ends (it would send git to another config and hooks). */
const char *const moat_mandatory_deny_existing[] = {".git/commondir", NULL};

/* Relative to a home directory. */
static const char *const hidden_in_home[] = {
	".ssh", ".aws", ".gnupg", ".config/gcloud", ".kube", ".docker", ".netrc", NULL,
};
static const char *const hidden_abs[] = {
	"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", NULL,
};

void moat_policy_init(struct moat_policy *p)
{
	memset(p, 0, sizeof *p);
	p->workspace_write = true;
	p->fs_base = MOAT_FS_SYSTEM;
	p->net = MOAT_NET_NONE;
	for (int i = 0; i < MOAT_QUOTAS; i++)
		p->quotas[i] = -1;
	p->users_slot = -1;
}

void moat_policy_free(struct moat_policy *p)
{
	free(p->workspace);
	free(p->workspace_at);
	free(p->rootfs);
	moat_strv_free(&p->rootfs_layers);
	free(p->rootfs_upper);
	moat_strv_free(&p->allow_read);
	moat_strv_free(&p->deny_read);
	moat_strv_free(&p->allow_write);
	moat_strv_free(&p->deny_write);
	moat_strv_free(&p->protect_repos);
	moat_strv_free(&p->net_allow);
	moat_strv_free(&p->net_deny);
	moat_strv_free(&p->net_secrets);
	moat_strv_free(&p->net_resolve);
	moat_strv_free(&p->env);
	moat_strv_free(&p->warnings);
	moat_strv_free(&p->hidden);
	moat_strv_free(&p->origins);
	memset(p, 0, sizeof *p);
}

int moat_policy_set_mode(struct moat_policy *p, const char *mode,
			 struct moat_err *e)
{
	if (strcmp(mode, "read-only") == 0) {
		p->fs_base = MOAT_FS_HOST_READ;
		p->workspace_write = false;
		p->net = MOAT_NET_NONE;
	} else if (strcmp(mode, "workspace-write") == 0) {
		p->fs_base = MOAT_FS_HOST_READ;
		p->workspace_write = true;
		p->net = MOAT_NET_NONE;
	} else if (strcmp(mode, "danger-full-access") == 0) {
		p->fs_base = MOAT_FS_HOST_WRITE;
		p->workspace_write = true;
		p->net = MOAT_NET_HOST;
	} else {
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "unknown mode '%s' (expected read-only, "
				    "workspace-write or danger-full-access)", mode);
	}
	return 0;
}

int moat_policy_add_path(struct moat_strv *list, const char *path,
			 const char *cwd, const char *home, const char *what,
			 struct moat_err *e)
{
	char *abs = moat_path_absolute(path, cwd, home, e);
	if (!abs)
		return moat_err_prefix(e, "%s", what);
	if (moat_strv_contains(list, abs)) {
		free(abs);
		return 0;
	}
	moat_strv_take(list, abs);
	return 0;
}

void moat_policy_note_origin(struct moat_policy *p, const char *path,
			     const char *where)
{
	moat_strv_take(&p->origins, moat_strdupf("%s\x1f%s", path, where));
}

static const char *origin_of(const struct moat_policy *p, const char *path,
			     const char *fallback)
{
	size_t n = strlen(path);
	for (size_t i = p->origins.n; i-- > 0;)
		if (strncmp(p->origins.v[i], path, n) == 0 && p->origins.v[i][n] == '\x1f')
			return p->origins.v[i] + n + 1;
	return fallback;
}

/* A path no root-run sandbox may write: below these trees (devices,
 * character files like /dev/null, are fine: nodev), or exactly one of the
 * top-level directories that hold other users' and services' data. */
static bool system_path(const char *path)
{
	static const char *const trees[] = {"/etc", "/usr", "/bin", "/sbin", "/lib",
					    "/lib32", "/lib64", "/libx32", "/boot",
					    "/proc", "/sys", "/dev", "/var", "/run", NULL};
	static const char *const exact[] = {"/root", "/home", "/opt", "/srv", "/mnt",
					    "/media", "/tmp", NULL};
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return false;
	if (moat_path_within(path, "/dev/shm") || moat_path_within(path, "/var/tmp"))
		return false; /* everyone's scratch space */
	for (size_t i = 0; trees[i]; i++)
		if (moat_path_within(path, trees[i]))
			return true;
	for (size_t i = 0; exact[i]; i++)
		if (strcmp(path, exact[i]) == 0)
			return true;
	return false;
}

static bool env_name_ok(const char *s, size_t n)
{
	if (n == 0 || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') ||
			(s[0] >= 'a' && s[0] <= 'z')))
		return false;
	for (size_t i = 1; i < n; i++) {
		char c = s[i];
		if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (c >= '0' && c <= '9')))
			return false;
	}
	return true;
}

int moat_policy_add_env(struct moat_policy *p, const char *entry,
			struct moat_err *e)
{
	const char *eq = strchr(entry, '=');
	size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
	if (!env_name_ok(entry, n))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "invalid environment variable name in '%s'", entry);
	moat_strv_add(&p->env, entry);
	return 0;
}

int moat_policy_add_secret(struct moat_policy *p, const char *spec, struct moat_err *e)
{
	const char *at = strchr(spec, '@');
	if (!at || at == spec || !env_name_ok(spec, (size_t)(at - spec)))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "'%s': expected NAME@HOST[,HOST...] with a variable name", spec);
	const char *h = at + 1;
	if (!*h || strstr(h, ",,") || h[strlen(h) - 1] == ',' || *h == ',' ||
	    strpbrk(h, " /@:\t"))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "'%s': expected one or more host names after '@', "
				    "separated by commas", spec);
	for (size_t i = 0; i < p->net_secrets.n; i++) {
		const char *o = p->net_secrets.v[i];
		if (!strncmp(o, spec, (size_t)(at - spec) + 1))
			return moat_err_set(e, MOAT_E_USAGE, 0, "'%s': %.*s is a secret already",
					    spec, (int)(at - spec), spec);
	}
	moat_strv_add(&p->net_secrets, spec);
	return 0;
}

static bool is_hidden(const char *path, const struct moat_strv *hidden)
{
	for (size_t i = 0; i < hidden->n; i++)
		if (moat_path_within(path, hidden->v[i]))
			return true;
	return false;
}

/* realpath() of the longest existing prefix, plus the missing rest: a
 * missing deny path under a symlinked directory must still name the place
 * the sandbox's writable root really is. */
static char *resolve_partial(const char *path)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return NULL;
	for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
		*slash = '\0';
		char *real = realpath(buf[0] ? buf : "/", NULL);
		if (real) {
			char *r = moat_strdupf("%s/%s", strcmp(real, "/") ? real : "",
					       path + (slash - buf) + 1);
			free(real);
			moat_path_normalize(r);
			return r;
		}
	}
	return NULL;
}

/* Resolve symlinks of every path in a list. Paths that must exist (allow
 * lists) fail when missing; deny lists keep a missing path (resolved as far
 * as it exists) so that it stays protected if it is created later. */
static int resolve_list(const struct moat_policy *p, struct moat_strv *list,
			bool must_exist, const char *what, struct moat_err *e)
{
	for (size_t i = 0; i < list->n; i++) {
		char *real = realpath(list->v[i], NULL);
		if (!real) {
			if (must_exist || errno != ENOENT)
				return moat_err_set(e, MOAT_E_USAGE, errno, "%s: %s",
						    origin_of(p, list->v[i], what),
						    list->v[i]);
			real = resolve_partial(list->v[i]);
			if (!real)
				continue;
		}
		free(list->v[i]);
		list->v[i] = real;
	}
	return 0;
}

/* An image's directory (a layer, the upper): resolved, a directory, and
 * a path overlayfs options could carry (',' ':' '\\' separate them; the
 * engine mounts at neutral paths, but a path that would break a plain
 * overlay mount is refused up front, naming it). */
static char *image_dir(const char *path, const char *what, struct moat_err *e)
{
	char *real = realpath(path, NULL);
	if (!real) {
		moat_err_set(e, MOAT_E_USAGE, errno, "%s %s", what, path);
		return NULL;
	}
	struct stat st;
	int err = stat(real, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if (err)
		moat_err_set(e, MOAT_E_USAGE, err, "%s %s", what, real);
	else if (strpbrk(real, ",:\\"))
		moat_err_set(e, MOAT_E_USAGE, 0, "%s %s: no ',' ':' '\\' allowed in its "
			     "path (overlayfs options)", what, real);
	else
		return real;
	free(real);
	return NULL;
}

/* rootfs and rootfs_layers made one (see MOAT_ROOTFS_LAYERS_MAX), each
 * layer and the upper resolved and checked. */
static int resolve_image(struct moat_policy *p, struct moat_err *e)
{
	if (p->rootfs && !p->rootfs_layers.n)
		moat_strv_add(&p->rootfs_layers, p->rootfs);
	if (!p->rootfs_layers.n) {
		if (p->rootfs_upper)
			return moat_err_set(e, MOAT_E_USAGE, 0, "rootfs upper %s: only with an "
					    "image (--rootfs)", p->rootfs_upper);
		return 0;
	}
	if (p->fs_base != MOAT_FS_SYSTEM)
		return moat_err_set(e, MOAT_E_USAGE, 0, "an image (--rootfs) needs the default "
				    "filesystem view (no --mode read-only/workspace-write/"
				    "danger-full-access)");
	if (p->rootfs_layers.n > MOAT_ROOTFS_LAYERS_MAX)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%zu image layers: at most %d",
				    p->rootfs_layers.n, MOAT_ROOTFS_LAYERS_MAX);
	for (size_t i = 0; i < p->rootfs_layers.n; i++) {
		char *real = image_dir(p->rootfs_layers.v[i], "image layer", e);
		if (!real)
			return -1;
		free(p->rootfs_layers.v[i]);
		p->rootfs_layers.v[i] = real;
		for (size_t k = 0; k < i; k++)
			if (moat_path_within(real, p->rootfs_layers.v[k]) ||
			    moat_path_within(p->rootfs_layers.v[k], real))
				return moat_err_set(e, MOAT_E_USAGE, 0, "image layers %s and %s "
						    "overlap", p->rootfs_layers.v[k], real);
	}
	if (p->rootfs) {
		char *real = realpath(p->rootfs, NULL);
		bool same = real && strcmp(real, p->rootfs_layers.v[0]) == 0;
		free(real);
		if (!same)
			return moat_err_set(e, MOAT_E_USAGE, 0, "rootfs %s is not the top image "
					    "layer %s", p->rootfs, p->rootfs_layers.v[0]);
	}
	free(p->rootfs);
	p->rootfs = strdup(p->rootfs_layers.v[0]);
	if (!p->rootfs)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "rootfs");
	if (!p->rootfs_upper)
		return 0;
	char *up = image_dir(p->rootfs_upper, "rootfs upper", e);
	if (!up)
		return -1;
	free(p->rootfs_upper);
	p->rootfs_upper = up;
	if (access(up, W_OK | X_OK) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "rootfs upper %s", up);
	for (size_t i = 0; i < p->rootfs_layers.n; i++)
		if (moat_path_within(up, p->rootfs_layers.v[i]) ||
		    moat_path_within(p->rootfs_layers.v[i], up))
			return moat_err_set(e, MOAT_E_USAGE, 0, "rootfs upper %s and image layer "
					    "%s overlap", up, p->rootfs_layers.v[i]);
	return 0;
}

int moat_policy_finalize(struct moat_policy *p, const char *cwd,
			 const char *home, struct moat_err *e)
{
	if (!cwd || cwd[0] != '/')
		return moat_err_set(e, MOAT_E_USAGE, 0, "current directory unknown");
	char *ws = moat_path_absolute(p->workspace ? p->workspace : cwd, cwd, home, e);
	if (!ws)
		return moat_err_prefix(e, "workspace");
	char *real = realpath(ws, NULL);
	if (!real) {
		int err = errno;
		moat_err_set(e, MOAT_E_USAGE, err, "workspace %s", ws);
		free(ws);
		return -1;
	}
	free(ws);
	free(p->workspace);
	p->workspace = real;
	struct stat st;
	if (stat(real, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "workspace %s", real);
	if (!S_ISDIR(st.st_mode))
		return moat_err_set(e, MOAT_E_USAGE, ENOTDIR, "workspace %s", real);
	if (p->fs_base != MOAT_FS_HOST_WRITE && strcmp(real, "/") == 0)
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "workspace /: refusing to make the whole "
				    "filesystem writable (use --mode danger-full-access)");

	if (resolve_image(p, e) < 0)
		return -1;
	/* Users mode builds its own system view: only over the host's system
	 * directories, and a slot is the host band's (docs/policy.md). */
	if (p->users && (p->fs_base != MOAT_FS_SYSTEM || p->rootfs))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "users mode needs the default filesystem view (no --mode "
				    "read-only/workspace-write/danger-full-access, no image)");
	if (p->users && p->users_slot >= MOAT_USERS_SLOTS)
		return moat_err_set(e, MOAT_E_USAGE, 0, "users mode: id slot %d out of range",
				    (int)p->users_slot);

	if (resolve_list(p, &p->allow_read, true, "allow-read", e) < 0 ||
	    resolve_list(p, &p->allow_write, true, "allow-write", e) < 0 ||
	    resolve_list(p, &p->deny_read, false, "deny-read", e) < 0 ||
	    resolve_list(p, &p->deny_write, false, "deny-write", e) < 0)
		return -1;

	moat_strv_free(&p->hidden);
	if (p->fs_base != MOAT_FS_HOST_WRITE) {
		moat_policy_hidden_paths(home, &p->hidden);
		if (is_hidden(real, &p->hidden))
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "workspace %s is inside a protected "
					    "secrets path", real);
		for (size_t i = 0; i < p->allow_write.n; i++)
			if (is_hidden(p->allow_write.v[i], &p->hidden))
				return moat_err_set(e, MOAT_E_USAGE, 0,
						    "allow-write %s is inside a "
						    "protected secrets path",
						    p->allow_write.v[i]);
	}
	/* Run as root, a writable host directory is id-mapped to the sandbox,
	 * which then writes it with its owner's rights (root's, for system
	 * directories). So no writable system directory, whatever path led
	 * there (a symlink planted by an earlier run): the trees below, and
	 * some top-level directories themselves. Rootless runs write with the
	 * user's own rights and need no such rule. */
	if (p->fs_base != MOAT_FS_HOST_WRITE && geteuid() == 0) {
		for (size_t j = 0; j <= p->allow_write.n; j++) {
			const char *w = j < p->allow_write.n ? p->allow_write.v[j]
							     : (p->workspace_write ? real : NULL);
			if (!w || !system_path(w))
				continue;
			if (j == p->allow_write.n)
				return moat_err_set(e, MOAT_E_USAGE, 0,
						    "workspace %s is a system directory; refusing "
						    "to make it writable (use --mode "
						    "danger-full-access)", real);
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "%s: %s is a system directory; refusing to "
					    "make it writable", origin_of(p, w, "allow-write"), w);
		}
	}
	/* A workspace inside a writable path is writable (srt lists "." in
	 * allowWrite); the workspace itself needs no second bind. */
	struct moat_strv aw = {0};
	for (size_t i = 0; i < p->allow_write.n; i++) {
		if (moat_path_within(real, p->allow_write.v[i]))
			p->workspace_write = true;
		if (strcmp(p->allow_write.v[i], real) != 0)
			moat_strv_add(&aw, p->allow_write.v[i]);
	}
	moat_strv_free(&p->allow_write);
	p->allow_write = aw;
	for (size_t i = 0; i < p->allow_write.n; i++)
		if (strcmp(p->allow_write.v[i], "/") == 0 &&
		    p->fs_base != MOAT_FS_HOST_WRITE)
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "allow-write /: refusing to make the whole "
					    "filesystem writable (use --mode danger-full-access)");
	/* An allowlist (or secrets to inject) means the egress gateway: the
	 * sandbox keeps its own network namespace and reaches out only
	 * through the gateway's proxies. */
	p->gateway = p->net == MOAT_NET_NONE &&
		     (p->net_allow.n || p->net_secrets.n);
	if (p->net == MOAT_NET_HOST && (p->net_allow.n || p->net_deny.n || p->net_secrets.n))
		return moat_err_set(e, MOAT_E_USAGE, 0,
				    "--net host with domain rules or secrets: the host network "
				    "bypasses the gateway (drop --net host)");
	p->finalized = true;
	return 0;
}

static const char *getenv_in(char *const *env, const char *name, size_t n)
{
	for (size_t i = 0; env && env[i]; i++)
		if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
			return env[i] + n + 1;
	return NULL;
}

static void env_set(struct moat_strv *out, const char *name, size_t n,
		    const char *value)
{
	for (size_t i = 0; i < out->n; i++) {
		if (strncmp(out->v[i], name, n) == 0 && out->v[i][n] == '=') {
			free(out->v[i]);
			out->v[i] = moat_strdupf("%.*s=%s", (int)n, name, value);
			return;
		}
	}
	moat_strv_take(out, moat_strdupf("%.*s=%s", (int)n, name, value));
}

int moat_policy_build_env(const struct moat_policy *p, char *const *caller,
			  const char *home, struct moat_strv *out,
			  struct moat_err *e)
{
	static const char *const keep[] = {"TERM", "LANG", "TZ", "COLORTERM", NULL};
	const char *path = getenv_in(caller, "PATH", 4);
	env_set(out, "PATH", 4,
		path ? path : "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin");
	env_set(out, "HOME", 4, home);
	for (size_t i = 0; keep[i]; i++) {
		const char *v = getenv_in(caller, keep[i], strlen(keep[i]));
		if (v)
			env_set(out, keep[i], strlen(keep[i]), v);
	}
	for (size_t i = 0; caller && caller[i]; i++) {
		const char *eq = strchr(caller[i], '=');
		if (eq && strncmp(caller[i], "LC_", 3) == 0)
			env_set(out, caller[i], (size_t)(eq - caller[i]), eq + 1);
	}
	for (size_t i = 0; i < p->env.n; i++) {
		const char *ent = p->env.v[i];
		const char *eq = strchr(ent, '=');
		if (eq) {
			env_set(out, ent, (size_t)(eq - ent), eq + 1);
			continue;
		}
		const char *v = getenv_in(caller, ent, strlen(ent));
		if (v)
			env_set(out, ent, strlen(ent), v);
	}
	env_set(out, "MOAT_SANDBOX", 12, "1");
	(void)e;
	return 0;
}

static void add_hidden(struct moat_strv *out, char *path)
{
	moat_path_normalize(path);
	if (!moat_strv_contains(out, path)) {
		/* Also hide where a symlinked secret really lives. Only paths
		 * through a symlink need realpath (most do not exist at all). */
		struct stat st;
		char *real = NULL;
		if (lstat(path, &st) == 0)
			real = realpath(path, NULL);
		else if (errno != ENOENT)
			real = realpath(path, NULL);
		if (real && strcmp(real, path) != 0 && !moat_strv_contains(out, real))
			moat_strv_take(out, real);
		else
			free(real);
		moat_strv_take(out, path);
	} else {
		free(path);
	}
}

static void add_home(struct moat_strv *out, const char *home)
{
	if (!home || home[0] != '/')
		return;
	for (size_t i = 0; hidden_in_home[i]; i++)
		add_hidden(out, moat_strdupf("%s/%s", home, hidden_in_home[i]));
}

void moat_policy_hidden_paths(const char *home, struct moat_strv *out)
{
	add_home(out, home);
	add_home(out, "/root");
	DIR *d = opendir("/home");
	if (d) {
		struct dirent *de;
		while ((de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			_cleanup_free_ char *h = moat_strdupf("/home/%s", de->d_name);
			add_home(out, h);
		}
		closedir(d);
	}
	for (size_t i = 0; hidden_abs[i]; i++)
		add_hidden(out, moat_strdupf("%s", hidden_abs[i]));
	/* /etc/sudoers* : every entry whose name starts with "sudoers". */
	d = opendir("/etc");
	if (d) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (strncmp(de->d_name, "sudoers", 7) == 0)
				add_hidden(out, moat_strdupf("/etc/%s", de->d_name));
		closedir(d);
	}
	add_hidden(out, moat_strdupf("/etc/sudoers"));
	add_hidden(out, moat_strdupf("/etc/sudoers.d"));
}
