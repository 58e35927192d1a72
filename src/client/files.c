/* moat cp / patch: files in a sandbox. */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"

#include "../base/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Uploads that are not regular files (stdin, pipes) are held in memory. */
#define MAX_UPLOAD ((size_t)1 << 30)
#define MAX_PATCH ((size_t)64 << 20)

static int help_only(const char *cmd, int argc, char **argv, const char *usage)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	optind = 0;
	int c;
	/* '+': a path such as "-" or "-x" after the first operand is an operand. */
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		fputs(usage, stdout);
		client_help_footer(stdout);
		return 0;
	}
	return -1;
}

/* ---- cp ---------------------------------------------------------------- */

static const char cp_usage[] =
	"usage: moat cp SRC DST\n"
	"\n"
	"Copy one file into or out of a sandbox. Exactly one of SRC and DST is\n"
	"ID:PATH (PATH relative to /workspace, or absolute inside the sandbox);\n"
	"the other is a local path, or - for stdin / stdout. A local directory as\n"
	"DST, or a sandbox PATH ending in /, receives the file under its own name.\n"
	"Write ./NAME for a local file whose name contains a colon.\n";

/* "ID:PATH" with ID made of lowercase letters and digits (the server's ids). */
static bool split_remote(const char *arg, char **id, const char **path)
{
	const char *colon = strchr(arg, ':');
	if (!colon || colon == arg)
		return false;
	for (const char *p = arg; p < colon; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
			return false;
	*id = strndup(arg, (size_t)(colon - arg));
	*path = colon + 1;
	return *id != NULL;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static char *join(const char *dir, const char *name)
{
	char *r;
	size_t n = strlen(dir);
	return asprintf(&r, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < 0 ? NULL : r;
}

struct download {
	const char *dest; /* NULL: stdout */
	int fd;
};

static int download_open(struct download *d, struct moat_err *e)
{
	if (d->fd >= 0)
		return 0;
	d->fd = open(d->dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (d->fd < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", d->dest);
	return 0;
}

static int download_sink(void *arg, const char *data, size_t n, struct moat_err *e)
{
	struct download *d = arg;
	if (!d->dest)
		return client_write(stdout, data, n, e);
	/* Opened on the first byte of a good answer: an error leaves DST alone. */
	if (download_open(d, e) < 0)
		return -1;
	while (n) {
		ssize_t w = write(d->fd, data, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "%s", d->dest);
		data += w;
		n -= (size_t)w;
	}
	return 0;
}

static int cp_from(const char *cmd, struct moat_http *h, const char *id,
		   const char *rpath, const char *local)
{
	struct moat_err e = {0};
	if (!*rpath)
		return client_fail(cmd, "no path after '%s:'", id);
	_cleanup_free_ char *dest = NULL;
	struct stat st;
	if (strcmp(local, "-") != 0) {
		if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
			const char *name = base_name(rpath);
			if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
				return client_fail(cmd, "'%s' names a directory; give a file", rpath);
			dest = join(local, name);
		} else {
			dest = strdup(local);
		}
		if (!dest)
			return client_fail(cmd, "out of memory");
	}
	_cleanup_free_ char *path = moat_http_sandbox_path(h, id, "/files");
	if (!path)
		return client_fail(cmd, "out of memory");
	const char *query[] = {"path", rpath, NULL};
	struct download d = {.dest = dest, .fd = -1};
	struct moat_http_req rq = {
		.method = "GET", .path = path, .query = query,
		.sink = download_sink, .sink_arg = &d,
	};
	struct moat_http_resp rs;
	int r = 0;
	if (moat_http_do(h, &rq, &rs, &e) < 0) {
		r = client_fail_err(cmd, &e);
	} else {
		if (rs.status < 200 || rs.status >= 300) {
			moat_http_error(&rs, &e);
			r = client_fail_err(cmd, &e);
		} else if (dest && download_open(&d, &e) < 0) { /* an empty file */
			r = client_fail_err(cmd, &e);
		} else if (!dest && fflush(stdout) != 0) {
			r = client_fail(cmd, "write: %s", strerror(errno));
		}
		moat_http_resp_free(&rs);
	}
	if (d.fd >= 0 && close(d.fd) < 0 && r == 0)
		r = client_fail(cmd, "%s: %s", dest, strerror(errno));
	return r;
}

/* The local source: an open regular file to stream, or its bytes. */
struct upload {
	FILE *f;
	long long size;
	char *buf;
	size_t len;
};

static int upload_open(const char *local, struct upload *u, struct moat_err *e)
{
	if (strcmp(local, "-") == 0)
		return client_read_all(STDIN_FILENO, MAX_UPLOAD, "stdin", &u->buf, &u->len, e);
	int fd = open(local, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s", local);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int err = errno;
		close(fd);
		return moat_err_set(e, MOAT_E_SYSTEM, err, "%s", local);
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s is a directory: moat cp copies "
				    "single files (pack directories with tar and unpack them "
				    "with moat exec)", local);
	}
	if (!S_ISREG(st.st_mode)) {
		int r = client_read_all(fd, MAX_UPLOAD, local, &u->buf, &u->len, e);
		close(fd);
		return r;
	}
	u->f = fdopen(fd, "rb");
	if (!u->f) {
		int err = errno;
		close(fd);
		return moat_err_set(e, MOAT_E_SYSTEM, err, "%s", local);
	}
	u->size = (long long)st.st_size;
	return 0;
}

static int put_file(struct moat_http *h, const char *path, const char *rpath,
		    struct upload *u, struct moat_http_resp *rs, struct moat_err *e)
{
	const char *query[] = {"path", rpath, NULL};
	struct moat_http_req rq = {
		.method = "PUT", .path = path, .query = query,
		.body = u->f ? NULL : (u->buf ? u->buf : ""), .body_len = u->len,
		.upload = u->f, .upload_len = u->size,
		.content_type = "application/octet-stream",
	};
	if (u->f && fseek(u->f, 0, SEEK_SET) != 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "rewinding the upload");
	return moat_http_do(h, &rq, rs, e);
}

static int cp_to(const char *cmd, struct moat_http *h, const char *local,
		 const char *id, const char *rpath)
{
	struct moat_err e = {0};
	const char *name = strcmp(local, "-") == 0 ? NULL : base_name(local);
	size_t rl = strlen(rpath);
	_cleanup_free_ char *target = NULL;
	if (rl == 0 || rpath[rl - 1] == '/') {
		if (!name || !*name)
			return client_fail(cmd, "'%s:%s' needs a file name", id, rpath);
		target = rl ? join(rpath, name) : strdup(name);
	} else {
		target = strdup(rpath);
	}
	_cleanup_free_ char *path = moat_http_sandbox_path(h, id, "/files");
	if (!target || !path)
		return client_fail(cmd, "out of memory");
	struct upload u = {0};
	if (upload_open(local, &u, &e) < 0)
		return client_fail_err(cmd, &e);
	struct moat_http_resp rs = {0};
	int r = put_file(h, path, target, &u, &rs, &e);
	/* An existing directory as DST receives the file under its own name. */
	if (r == 0 && rs.status == 400 && name && *name && moat_http_error_is(&rs, "is_directory")) {
		_cleanup_free_ char *inside = join(target, name);
		moat_http_resp_free(&rs);
		r = inside ? put_file(h, path, inside, &u, &rs, &e)
			   : moat_err_set(&e, MOAT_E_SYSTEM, ENOMEM, "path");
	}
	if (r < 0) {
		r = client_fail_err(cmd, &e);
	} else {
		if (rs.status < 200 || rs.status >= 300) {
			moat_http_error(&rs, &e);
			r = client_fail_err(cmd, &e);
		}
		moat_http_resp_free(&rs);
	}
	if (u.f)
		fclose(u.f);
	free(u.buf);
	return r;
}

int moat_client_cp(int argc, char **argv)
{
	const char *cmd = "cp";
	int r = help_only(cmd, argc, argv, cp_usage);
	if (r >= 0)
		return r;
	if (argc - optind != 2)
		return client_fail(cmd, "expected SRC and DST (usage: moat cp SRC DST)");
	const char *src = argv[optind], *dst = argv[optind + 1];
	_cleanup_free_ char *sid = NULL;
	_cleanup_free_ char *did = NULL;
	const char *spath = NULL, *dpath = NULL;
	bool sr = split_remote(src, &sid, &spath);
	bool dr = split_remote(dst, &did, &dpath);
	if (sr == dr)
		return client_fail(cmd, "exactly one of SRC and DST must be ID:PATH "
				   "(a sandbox file), the other a local path or -");
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	return sr ? cp_from(cmd, h, sid, spath, dst) : cp_to(cmd, h, src, did, dpath);
}

/* ---- patch ------------------------------------------------------------- */

static const char patch_usage[] =
	"usage: moat patch ID FILE|-\n"
	"\n"
	"Apply a patch in the apply_patch format (*** Begin Patch ... *** End Patch)\n"
	"or a unified diff (git diff, diff -u; paths relative to /workspace, a/ and b/\n"
	"stripped, context matched exactly) in sandbox ID, all or nothing, and print\n"
	"each changed file as \"OP PATH\".\n";

int moat_client_patch(int argc, char **argv)
{
	const char *cmd = "patch";
	int r = help_only(cmd, argc, argv, patch_usage);
	if (r >= 0)
		return r;
	if (argc - optind != 2)
		return client_fail(cmd, "expected ID and FILE (usage: moat patch ID FILE|-)");
	const char *id = argv[optind], *file = argv[optind + 1];
	struct moat_err e = {0};
	_cleanup_free_ char *text = NULL;
	size_t len;
	_cleanup_close_ int fd = strcmp(file, "-") == 0 ? dup(STDIN_FILENO)
						       : open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return client_fail(cmd, "%s: %s", file, strerror(errno));
	if (client_read_all(fd, MAX_PATCH, file, &text, &len, &e) < 0)
		return client_fail_err(cmd, &e);
	_cleanup_json_ json_t *body = json_object();
	json_t *pt = json_stringn(text, len);
	if (!pt)
		return client_fail(cmd, "%s is not UTF-8 text", file);
	if (!body || json_object_set_new(body, "patch", pt))
		return client_fail(cmd, "out of memory");
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!h)
		return client_fail_err(cmd, &e);
	_cleanup_free_ char *path = moat_http_sandbox_path(h, id, "/patch");
	if (!path)
		return client_fail(cmd, "out of memory");
	_cleanup_json_ json_t *ans = NULL;
	if (moat_http_json(h, "POST", path, NULL, body, &ans, &e) < 0)
		return client_fail_err(cmd, &e);
	json_t *files = json_object_get(ans, "files");
	if (!json_is_array(files))
		return client_fail(cmd, "the answer from %s has no file list", moat_http_url(h));
	size_t i;
	json_t *f;
	json_array_foreach(files, i, f) {
		const char *op = json_string_value(json_object_get(f, "op"));
		const char *p = json_string_value(json_object_get(f, "path"));
		printf("%s %s\n", op ? op : "?", p ? p : "?");
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		return client_fail(cmd, "write: %s", strerror(errno));
	return 0;
}
