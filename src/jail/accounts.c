/* The sandbox's own /etc/passwd and /etc/group (docs/policy.md "Who am I
 * inside"): the host's account list is none of the sandbox's business, and
 * with one id mapped, every other owner shows as nobody anyway.
 *
 *   host root:  root (0), sandbox (the one mapped id, 1000), nobody (65534)
 *   rootless:   root (0), the caller's own name and id, nobody (65534)
 *   an image (--rootfs): the image's files, kept as they are when they
 *     name the sandbox's ids; else the image's text with the sandbox's
 *     line added (so `id` and `whoami` resolve), read beneath the image's
 *     root without following a link out of it. Of several layers, the
 *     top-most that has the file (its upper on disk first), whiteouts and
 *     opaque directories respected.
 * The home is the sandbox's home (HOME inside). Users mode has its own
 * (users.c: root and user); the host-write mode shows the host's. */
#define _GNU_SOURCE
#include "internal.h"

#include "../base/cleanup.h"
#include "../base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

/* An image's account file is a few KB; more than this is not one. */
#define IMAGE_FILE_MAX (1u << 20)

/* A passwd field: printable, no ':' or newline (else the fallback). */
static const char *field(const char *s, const char *fallback)
{
	if (!s || !*s)
		return fallback;
	for (const char *p = s; *p; p++)
		if (*p == ':' || (unsigned char)*p < 0x20 || *p == 0x7f)
			return fallback;
	return s;
}

/* A file (rel beneath root: an image's, or the host's with root "/"),
 * NUL-terminated, or NULL (missing, not a regular file, too big). */
static char *image_file(const char *root, const char *rel)
{
	_cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return NULL;
	struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC,
			       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	_cleanup_close_ int fd = (int)syscall(SYS_openat2, rfd, rel, &how, sizeof how);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > IMAGE_FILE_MAX)
		return NULL;
	char *buf = malloc((size_t)st.st_size + 2);
	if (!buf)
		return NULL;
	size_t n = 0;
	while (n < (size_t)st.st_size) {
		ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	if (n && buf[n - 1] != '\n')
		buf[n++] = '\n';
	buf[n] = '\0';
	return buf;
}

/* Is this directory of a layer opaque (overlayfs: the layers below it do
 * not show through)? Either mark: the unpacker sets both. */
static bool opaque(int dirfd_)
{
	char v[4];
	ssize_t n = fgetxattr(dirfd_, "user.overlay.opaque", v, sizeof v);
	if (n < 0)
		n = fgetxattr(dirfd_, "trusted.overlay.opaque", v, sizeof v);
	return n == 1 && v[0] == 'y';
}

enum { L_MISSING, L_GONE, L_FOUND };

/* rel ("etc/passwd") in one layer, as overlayfs would see it: L_GONE when
 * the layer hides what is below (a whiteout, a 0/0 character device, on
 * the way; an opaque directory without it), L_FOUND with *out (the file,
 * as image_file reads it, or NULL when not a regular file). A component
 * that is a link: looked up in this layer only (image_file). */
static int layer_file(const char *layer, const char *rel, char **out)
{
	*out = NULL;
	_cleanup_close_ int fd = open(layer, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return L_MISSING;
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", rel);
	for (char *name = buf, *next; name; name = next) {
		next = strchr(name, '/');
		if (next)
			*next++ = '\0';
		struct stat st;
		if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) /* not here */
			return opaque(fd) ? L_GONE : L_MISSING;
		if (S_ISCHR(st.st_mode) && st.st_rdev == 0)
			return L_GONE;
		if (S_ISLNK(st.st_mode) || !next) {
			*out = image_file(layer, rel);
			return L_FOUND;
		}
		if (!S_ISDIR(st.st_mode))
			return L_GONE; /* a file where a directory was: hides it */
		int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0)
			return L_MISSING;
		close(fd);
		fd = sub;
	}
	return L_MISSING;
}

/* rel in an image: the top-most layer that has it, or none when a layer
 * above hides it; the upper on disk (earlier changes) comes first. */
static char *image_lookup(const struct moat_policy *p, const char *rel)
{
	char *out = NULL;
	if (p->rootfs_upper) {
		char up[PATH_MAX];
		snprintf(up, sizeof up, "%s/upper", p->rootfs_upper);
		if (layer_file(up, rel, &out) != L_MISSING)
			return out;
	}
	if (!p->rootfs_layers.n)
		return image_file(p->rootfs, rel);
	for (size_t i = 0; i < p->rootfs_layers.n; i++)
		if (layer_file(p->rootfs_layers.v[i], rel, &out) != L_MISSING)
			return out;
	return NULL;
}

/* The line of a passwd/group text whose third field is id, or NULL. */
static const char *line_of_id(const char *text, unsigned id)
{
	for (const char *l = text; l && *l;) {
		const char *c1 = strchr(l, ':');
		const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		const char *nl = strchr(l, '\n');
		if (c2 && (!nl || c2 < nl)) {
			char *end;
			unsigned long v = strtoul(c2 + 1, &end, 10);
			if (end != c2 + 1 && *end == ':' && v == id)
				return l;
		}
		l = nl ? nl + 1 : NULL;
	}
	return NULL;
}

/* The host's name for id in its /etc/passwd or /etc/group (rel), or "":
 * the file read, not NSS (none in a static moat: an account only NSS
 * knows is "sandbox" inside). */
static void host_name(const char *rel, unsigned id, char *out, size_t cap)
{
	_cleanup_free_ char *t = image_file("/", rel);
	const char *l = t ? line_of_id(t, id) : NULL;
	snprintf(out, cap, "%.*s", l ? (int)strcspn(l, ":") : 0, l ? l : "");
}

void jail_accounts(const struct jail_ctx *c, char **passwd, char **group)
{
	unsigned uid = (unsigned)c->uid_in, gid = (unsigned)c->gid_in;
	const char *user = "sandbox", *grp = "sandbox";
	char ubuf[64] = "", gbuf[64] = "";
	if (!c->host_root) { /* rootless: the caller's own names */
		host_name("etc/passwd", uid, ubuf, sizeof ubuf);
		host_name("etc/group", gid, gbuf, sizeof gbuf);
		user = field(ubuf[0] ? ubuf : NULL, "sandbox");
		grp = field(gbuf[0] ? gbuf : NULL, user);
	}
	const char *home = field(c->l->home, "/");
	const char *shell = !c->p->rootfs && access("/bin/bash", X_OK) == 0 ? "/bin/bash"
									   : "/bin/sh";
	char *pl = moat_strdupf("%s:x:%u:%u:%s:%s:%s\n", user, uid, gid, user, home, shell);
	char *gl = moat_strdupf("%s:x:%u:\n", grp, gid);
	if (c->p->rootfs) {
		_cleanup_free_ char *ip = image_lookup(c->p, "etc/passwd");
		_cleanup_free_ char *ig = image_lookup(c->p, "etc/group");
		*passwd = ip && line_of_id(ip, uid) ? NULL : moat_strdupf("%s%s", ip ? ip : "", pl);
		*group = ig && line_of_id(ig, gid) ? NULL : moat_strdupf("%s%s", ig ? ig : "", gl);
		free(pl);
		free(gl);
		return;
	}
	bool nobody = uid != 65534, nogroup = gid != 65534;
	*passwd = moat_strdupf("root:x:0:0:root:/root:/bin/sh\n%s%s", uid ? pl : "",
			       nobody ? "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
				      : "");
	*group = moat_strdupf("root:x:0:\n%s%s", gid ? gl : "", nogroup ? "nogroup:x:65534:\n" : "");
	free(pl);
	free(gl);
}
