/* Users mode (docs/policy.md "Users mode", docs/SECURITY.md "Users mode"):
 * the sandbox is a small computer with root (0) and user (1000).
 *
 * Ids: inside 0..65535 map onto a host range nobody else uses.
 *   run as root: a slot of the band MOAT_USERS_BAND (65536 ids per slot),
 *     checked against /etc/passwd, /etc/group, /etc/subuid, /etc/subgid;
 *     moat serve names its slot (recorded with the sandbox), moat run
 *     takes a free one of the upper half, held by a lock file for the run.
 *   rootless: the caller's first /etc/subuid and /etc/subgid range of at
 *     least 65535 ids, written by newuidmap/newgidmap; the caller itself is
 *     user (1000), so the workspace stays the caller's.
 * Capabilities: root keeps Docker's default set, only inside its own user
 * namespace; user holds none (caps.c calls jail_users_caps). */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/tooltail.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <pwd.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define RANGE 65536u
#define SLOT_DIR "/run/moat-ids"

/* Does [lo, lo+n) meet any range "name:start:count" of a subid file? */
static bool subid_overlaps(const char *file, uint64_t lo, uint64_t n)
{
	_cleanup_fclose_ FILE *f = fopen(file, "re");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		char *a = strchr(line, ':');
		char *b = a ? strchr(a + 1, ':') : NULL;
		if (!b)
			continue;
		uint64_t s = strtoull(a + 1, NULL, 10), c = strtoull(b + 1, NULL, 10);
		if (s < lo + n && lo < s + c)
			return true;
	}
	return false;
}

static bool band_in_use(uint32_t base)
{
	uint64_t lo = base;
	if (subid_overlaps("/etc/subuid", lo, RANGE) || subid_overlaps("/etc/subgid", lo, RANGE))
		return true;
	bool used = false;
	_cleanup_fclose_ FILE *f = fopen("/etc/passwd", "re");
	struct passwd *pw;
	while (f && !used && (pw = fgetpwent(f)))
		used = pw->pw_uid >= lo && pw->pw_uid < lo + RANGE;
	_cleanup_fclose_ FILE *g = fopen("/etc/group", "re");
	struct group *gr;
	while (g && !used && (gr = fgetgrent(g)))
		used = gr->gr_gid >= lo && gr->gr_gid < lo + RANGE;
	return used;
}

/* moat run as root: a free slot of the upper half, locked while we live. */
static int take_slot(struct jail_ctx *c, struct moat_err *e)
{
	if (mkdir(SLOT_DIR, 0700) < 0 && errno != EEXIST)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: %s", SLOT_DIR);
	struct stat st;
	if (lstat(SLOT_DIR, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EPERM,
				    "users mode: %s is not root's directory", SLOT_DIR);
	for (int s = MOAT_USERS_SLOTS / 2; s < MOAT_USERS_SLOTS; s++) {
		char path[64];
		snprintf(path, sizeof path, SLOT_DIR "/%d", s);
		int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: %s", path);
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			c->users_lock = fd;
			return s;
		}
		close(fd);
	}
	return moat_err_set(e, MOAT_E_SYSTEM, EAGAIN, "users mode: every id slot is in use");
}

/* The caller's first range of at least n ids in a subid file, by name or uid. */
static int subid_range(const char *file, const char *name, uid_t uid, uint32_t n,
		       uint32_t *start, struct moat_err *e)
{
	_cleanup_fclose_ FILE *f = fopen(file, "re");
	char line[512], num[16];
	snprintf(num, sizeof num, "%u", (unsigned)uid);
	while (f && fgets(line, sizeof line, f)) {
		char *a = strchr(line, ':');
		char *b = a ? strchr(a + 1, ':') : NULL;
		if (!b)
			continue;
		*a = '\0';
		if (strcmp(line, num) != 0 && (!name || strcmp(line, name) != 0))
			continue;
		unsigned long long s = strtoull(a + 1, NULL, 10), cnt = strtoull(b + 1, NULL, 10);
		if (cnt >= n && s + n <= 0xffffffffull) {
			*start = (uint32_t)s;
			return 0;
		}
	}
	return moat_err_set(e, MOAT_E_USAGE, 0,
			    "users mode without root needs a range of %u subordinate ids "
			    "for %s (uid %u) in %s (e.g. \"%s:100000:65536\", see subuid(5)), "
			    "and newuidmap/newgidmap (Debian package uidmap)",
			    (unsigned)n, name ? name : num, (unsigned)uid, file, name ? name : num);
}

int jail_users_prepare(struct jail_ctx *c, struct moat_err *e)
{
	c->users = true;
	if (c->host_root) {
		int slot = c->p->users_slot;
		if (slot < 0 && (slot = take_slot(c, e)) < 0)
			return -1;
		c->users_base = MOAT_USERS_BAND + (uint32_t)slot * RANGE;
		if (band_in_use(c->users_base))
			return moat_err_set(e, MOAT_E_SYSTEM, EEXIST,
					    "users mode: host ids %u-%u (slot %d) are used by "
					    "/etc/passwd, /etc/group or /etc/subuid",
					    c->users_base, c->users_base + RANGE - 1, slot);
		c->users_gbase = c->users_base;
		/* id-mapped writable binds belong to user inside */
		c->uid_out = c->gid_out = c->users_base + MOAT_USERS_UID;
	} else {
		/* fgetpwent, not getpwuid: no NSS in a static moat */
		char name_buf[256] = "";
		_cleanup_fclose_ FILE *f = fopen("/etc/passwd", "re");
		struct passwd *pw;
		while (f && !name_buf[0] && (pw = fgetpwent(f)))
			if (pw->pw_uid == geteuid())
				snprintf(name_buf, sizeof name_buf, "%s", pw->pw_name);
		const char *name = name_buf[0] ? name_buf : NULL;
		/* 0..999 and 1001..65535 from the range: 65535 ids */
		if (subid_range("/etc/subuid", name, geteuid(), RANGE - 1, &c->users_base, e) < 0 ||
		    subid_range("/etc/subgid", name, geteuid(), RANGE - 1, &c->users_gbase, e) < 0)
			return -1;
		if (access("/usr/bin/newuidmap", X_OK) < 0 || access("/usr/bin/newgidmap", X_OK) < 0)
			return moat_err_set(e, MOAT_E_USAGE, errno,
					    "users mode without root needs newuidmap and newgidmap "
					    "(Debian package uidmap)");
	}
	/* set-up runs as root inside; caps.c makes the final identity */
	c->uid_in = c->gid_in = 0;
	jail_users_accounts(&c->users_passwd, &c->users_group);
	return 0;
}

static int run_map_tool(const char *tool, pid_t pid, uint32_t sub, unsigned self,
			struct moat_err *e)
{
	char a[6][16];
	snprintf(a[0], sizeof a[0], "%d", (int)pid);
	snprintf(a[1], sizeof a[1], "%u", (unsigned)sub);
	snprintf(a[2], sizeof a[2], "%u", (unsigned)self);
	snprintf(a[3], sizeof a[3], "%u", (unsigned)(sub + MOAT_USERS_UID));
	snprintf(a[4], sizeof a[4], "%u", RANGE - MOAT_USERS_UID - 1);
	snprintf(a[5], sizeof a[5], "%u", (unsigned)MOAT_USERS_UID);
	char path[64];
	snprintf(path, sizeof path, "/usr/bin/%s", tool);
	/* inside outside count: 0 sub 1000; 1000 self 1; 1001 sub+1000 64535 */
	char *argv[] = {path, a[0], "0", a[1], a[5], a[5], a[2], "1", "1001", a[3], a[4], NULL};
	char *envp[] = {"PATH=/usr/bin:/bin", NULL};
	/* its stderr is its reason, which goes into the error (not raw into
	 * the caller's terminal or log) */
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: pipe");
	posix_spawn_file_actions_t fa;
	int rc = posix_spawn_file_actions_init(&fa);
	if (rc == 0 && (rc = posix_spawn_file_actions_adddup2(&fa, p[1], 2)) == 0)
		rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	pid_t child;
	if (rc == 0)
		rc = posix_spawn(&child, path, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		return moat_err_set(e, MOAT_E_SYSTEM, rc, "users mode: run %s", path);
	}
	char why[MOAT_TAIL_MAX + 1];
	moat_tail_read(p[0], why, sizeof why);
	close(p[0]);
	int st;
	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "users mode: wait for %s", tool);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EPERM,
				    "users mode: %s failed (status %d)%s%s: check /etc/subuid and "
				    "/etc/subgid", tool, st, why[0] ? ": " : "", why);
	return 0;
}

int jail_users_parent(struct jail_ctx *c, pid_t pid, struct moat_err *e)
{
	if (!c->host_root)
		return run_map_tool("newuidmap", pid, c->users_base, (unsigned)geteuid(), e) < 0 ||
			       run_map_tool("newgidmap", pid, c->users_gbase, (unsigned)getegid(), e) < 0
			       ? -1
			       : 0;
	char um[64], gm[64], path[64];
	snprintf(um, sizeof um, "0 %u %u\n", c->users_base, RANGE);
	snprintf(gm, sizeof gm, "0 %u %u\n", c->users_gbase, RANGE);
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
	if (moat_write_file(path, um, e) < 0)
		return moat_err_prefix(e, "users mode uid map");
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
	if (moat_write_file(path, gm, e) < 0)
		return moat_err_prefix(e, "users mode gid map");
	return 0;
}

void jail_users_free(struct jail_ctx *c)
{
	free(c->users_passwd);
	free(c->users_group);
	c->users_passwd = c->users_group = NULL;
	if (c->users_lock >= 0) {
		close(c->users_lock);
		c->users_lock = -1;
	}
	if (c->users_range_ns >= 0) {
		close(c->users_range_ns);
		c->users_range_ns = -1;
	}
}

/* Docker's default capabilities less NET_RAW (no raw sockets in moat):
 * root's set, within the sandbox's user namespace only. */
/* Docker's default set without NET_RAW (no raw sockets here) and without
 * SETFCAP: a file capability root writes in a directory id-mapped to its
 * host owner (the workspace) is stored with that owner's root id, so it
 * would be a real capability for whoever runs the file on the host. */
static const int docker_caps[] = {
	CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FSETID,     CAP_FOWNER,      CAP_MKNOD,
	CAP_SETGID, CAP_SETUID,       CAP_SETPCAP,    CAP_NET_BIND_SERVICE,
	CAP_SYS_CHROOT, CAP_KILL,     CAP_AUDIT_WRITE,
};

uint64_t jail_users_capset(void)
{
	uint64_t m = 0;
	for (size_t i = 0; i < sizeof docker_caps / sizeof docker_caps[0]; i++)
		m |= 1ull << docker_caps[i];
	return m;
}

/* Securebits locked, but NOROOT off: root (0) gets its set back on execve
 * (no_new_privs keeps it to the set it holds). No setuid fix-up disabled:
 * leaving uid 0 clears every capability. Then the bounding set becomes
 * Docker's, and the process is root with it, or user with none. */
int jail_users_caps(struct jail_ctx *c, struct moat_err *e)
{
	unsigned long bits = SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
			     SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
			     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "PR_SET_SECUREBITS");
	uint64_t keep = jail_users_capset();
	for (int cap = 0; cap <= 63; cap++) {
		if (keep & (1ull << cap))
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break;
			return moat_err_set(e, MOAT_E_SYSTEM, errno,
					    "drop capability %d from bounding set", cap);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "clear ambient capabilities");
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {
		{(uint32_t)keep, (uint32_t)keep, 0},
		{(uint32_t)(keep >> 32), (uint32_t)(keep >> 32), 0},
	};
	if (syscall(SYS_capset, &h, d) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "set capabilities");
	/* moat run as user: the supervisor and the command are user (1000),
	 * and setresuid away from 0 empties every set. An agent stays root. */
	if (!c->l->agent && !c->p->users_root) {
		if (setgroups(0, NULL) < 0 || setresgid(MOAT_USERS_UID, MOAT_USERS_UID, MOAT_USERS_UID) < 0 ||
		    setresuid(MOAT_USERS_UID, MOAT_USERS_UID, MOAT_USERS_UID) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "become user %u", MOAT_USERS_UID);
	}
	return 0;
}

/* The sandbox's /etc/passwd and /etc/group: the host's system accounts
 * (ids below 1000, and 65534: packages' files and dpkg's statoverride name
 * them; no human account, no group member list), then user (1000). */
static bool system_id(unsigned id)
{
	return id < MOAT_USERS_UID || id == 65534;
}

static void append(char **buf, size_t *len, const char *s)
{
	size_t n = strlen(s);
	char *nb = realloc(*buf, *len + n + 1);
	if (!nb)
		abort();
	memcpy(nb + *len, s, n + 1);
	*buf = nb;
	*len += n;
}

void jail_users_accounts(char **passwd, char **group)
{
	char *pw_buf = NULL, *gr_buf = NULL, line[1024];
	size_t pl = 0, gl = 0;
	bool root = false, rootg = false;
	FILE *f = fopen("/etc/passwd", "re");
	struct passwd *pw;
	while (f && (pw = fgetpwent(f))) {
		if (!system_id(pw->pw_uid) || !strcmp(pw->pw_name, "user") ||
		    strchr(pw->pw_name, ':') || strchr(pw->pw_dir, ':') || strchr(pw->pw_shell, ':'))
			continue;
		root |= pw->pw_uid == 0;
		snprintf(line, sizeof line, "%s:x:%u:%u:%s:%s:%s\n", pw->pw_name, (unsigned)pw->pw_uid,
			 (unsigned)pw->pw_gid, pw->pw_uid == 0 ? "root" : "", pw->pw_dir, pw->pw_shell);
		append(&pw_buf, &pl, line);
	}
	if (f)
		fclose(f);
	if (!root)
		append(&pw_buf, &pl, "root:x:0:0:root:/root:/bin/bash\n");
	append(&pw_buf, &pl, "user:x:1000:1000:user:/home/user:/bin/bash\n");
	FILE *g = fopen("/etc/group", "re");
	struct group *gr;
	while (g && (gr = fgetgrent(g))) {
		if (!system_id(gr->gr_gid) || !strcmp(gr->gr_name, "user") || strchr(gr->gr_name, ':'))
			continue;
		rootg |= gr->gr_gid == 0;
		snprintf(line, sizeof line, "%s:x:%u:\n", gr->gr_name, (unsigned)gr->gr_gid);
		append(&gr_buf, &gl, line);
	}
	if (g)
		fclose(g);
	if (!rootg)
		append(&gr_buf, &gl, "root:x:0:\n");
	append(&gr_buf, &gl, "user:x:1000:\n");
	*passwd = pw_buf;
	*group = gr_buf;
}
