/* moat image pull / import: one request whose answer is a stream of
 * server-sent events ("progress" {layers_done, layers_total, bytes_done,
 * bytes_total}, then "image" with the image or "error"), shown as one
 * updating line on a terminal's stderr and one final line otherwise; the
 * image id goes to stdout. */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"
#include "image.h"
#include "sse.h"

#include "../base/cleanup.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An event's data is a small JSON object. */
#define EVENT_MAX ((size_t)1 << 20)

struct xfer {
	struct sse sse;
	const char *what;     /* the ref or the path, as the user gave it */
	bool tty;             /* stderr is a terminal: one line rewritten */
	bool drawn;           /* a progress line is on the terminal */
	json_t *image;        /* the "image" event's object */
	char error[512];      /* the "error" event's message */
	long long layers_done, layers_total, bytes_done, bytes_total;
};

static void draw(struct xfer *x)
{
	char done[32], total[32];
	image_size_text(x->bytes_done, done, sizeof done);
	image_size_text(x->bytes_total, total, sizeof total);
	fprintf(stderr, "\r\033[K%s: layers %lld/%lld, %s of %s", x->what, x->layers_done,
		x->layers_total, done, total);
	fflush(stderr);
	x->drawn = true;
}

static int on_event(void *arg, const char *type, const char *data, size_t len,
		    struct moat_err *e)
{
	struct xfer *x = arg;
	json_error_t jerr;
	_cleanup_json_ json_t *o = json_loadb(data, len, 0, &jerr);
	if (!o)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "a %s event that is not JSON: %s", type,
				    jerr.text);
	if (!strcmp(type, "progress")) {
		json_int_t a = 0, b = 0, c = 0, d = 0;
		if (json_unpack(o, "{s:I,s:I,s:I,s:I}", "layers_done", &a, "layers_total", &b,
				"bytes_done", &c, "bytes_total", &d) == 0) {
			x->layers_done = a;
			x->layers_total = b;
			x->bytes_done = c;
			x->bytes_total = d;
			if (x->tty)
				draw(x);
		}
	} else if (!strcmp(type, "image")) {
		json_decref(x->image);
		x->image = json_incref(o);
	} else if (!strcmp(type, "error")) {
		const char *code = "?", *msg = "error";
		int status = 0;
		json_unpack(o, "{s:{s?s,s?s,s?i}}", "error", "code", &code, "message", &msg,
			    "status", &status);
		snprintf(x->error, sizeof x->error, "%s (%s, HTTP %d)", msg, code, status);
	}
	return 0;
}

static int on_bytes(void *arg, const char *data, size_t n, struct moat_err *e)
{
	struct xfer *x = arg;
	return sse_feed(&x->sse, data, n, on_event, x, e);
}

/* The end: the terminal's line replaced by the final one, the id printed. */
static int finish(struct xfer *x, const char *cmd, const char *verb)
{
	if (x->drawn)
		fputs("\r\033[K", stderr);
	const char *id = json_string_value(json_object_get(x->image, "id"));
	if (!id)
		return client_fail(cmd, "%s: the answer has no image id", x->what);
	char size[32];
	image_size_text(json_integer_value(json_object_get(x->image, "size")), size, sizeof size);
	json_t *names = json_object_get(x->image, "names");
	const char *name = json_string_value(json_array_get(names, 0));
	fprintf(stderr, "%s %s: %lld layer%s, %s%s%s\n", verb, x->what,
		(long long)json_integer_value(json_object_get(x->image, "layer_count")),
		json_integer_value(json_object_get(x->image, "layer_count")) == 1 ? "" : "s",
		size, name ? ", named " : "", name ? name : "");
	if (printf("%s\n", id) < 0 || fflush(stdout) != 0)
		return client_fail(cmd, "write: %s", strerror(errno));
	return 0;
}

/* Send rq (its answer streamed into x) and turn what came back into x's
 * image or e. */
static int run(struct moat_http *h, struct moat_http_req *rq, struct xfer *x,
	       struct moat_err *e)
{
	rq->accept = "text/event-stream";
	rq->sink = on_bytes;
	rq->sink_arg = x;
	rq->stream_type = "text/event-stream";
	struct moat_http_resp rs;
	if (moat_http_do(h, rq, &rs, e) < 0)
		return -1;
	int r = 0;
	if (rs.status < 200 || rs.status >= 300) {
		r = moat_http_error(&rs, e);
	} else if (!rs.streamed) { /* a server that answered at once, in JSON */
		json_error_t jerr;
		x->image = json_loadb(rs.body, rs.len, 0, &jerr);
		if (!x->image)
			r = moat_err_set(e, MOAT_E_SYSTEM, 0, "invalid JSON answer: %s", jerr.text);
	} else if (x->error[0]) {
		r = moat_err_set(e, MOAT_E_SYSTEM, 0, "%s", x->error);
	} else if (!x->image) {
		r = moat_err_set(e, MOAT_E_SYSTEM, 0, "the server ended the stream without "
				 "the image (was moat serve stopped?)");
	}
	moat_http_resp_free(&rs);
	return r;
}

static void xfer_init(struct xfer *x, const char *what)
{
	memset(x, 0, sizeof *x);
	sse_init(&x->sse, EVENT_MAX);
	x->what = what;
	x->tty = isatty(STDERR_FILENO);
}

static void xfer_free(struct xfer *x)
{
	if (x->drawn && !x->image)
		fputs("\r\033[K", stderr); /* the error line replaces the progress */
	sse_free(&x->sse);
	json_decref(x->image);
}

int image_pull(int argc, char **argv)
{
	const char *cmd = "image pull";
	static const struct option opts[] = {{"insecure", no_argument, NULL, 'k'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	bool insecure = false;
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'k') {
			insecure = true;
			continue;
		}
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		fputs("usage: moat image pull [--insecure] REF\n\n"
		      "Pull an image from an OCI registry into moat serve's store and print its\n"
		      "id (the manifest digest). REF is [HOST[:PORT]/]REPO[:TAG][@DIGEST];\n"
		      "the registries a pull may reach are moat serve's --registry list.\n"
		      "Progress (layers, bytes) is shown on stderr.\n\n"
		      "      --insecure   plain http: a loopback registry, or one moat serve\n"
		      "                   lists with --insecure-registry\n", stdout);
		client_help_footer(stdout);
		return 0;
	}
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one image reference (usage: moat image pull REF)");
	const char *ref = argv[optind];
	_cleanup_json_ json_t *body = json_pack("{s:s}", "ref", ref);
	if (!body)
		return client_fail(cmd, "'%s': not valid UTF-8", ref);
	if (insecure && json_object_set_new(body, "insecure", json_true()))
		return client_fail(cmd, "out of memory");
	_cleanup_free_ char *text = json_dumps(body, JSON_COMPACT);
	struct moat_err e = {0};
	_cleanup_http_ struct moat_http *h = moat_http_new(&e);
	if (!text || !h)
		return client_fail(cmd, "%s", text ? e.msg : "out of memory");
	struct moat_http_req rq = {.method = "POST", .path = "/v1/images", .body = text,
				   .body_len = strlen(text), .content_type = "application/json"};
	struct xfer x;
	xfer_init(&x, ref);
	int r = 0;
	if (run(h, &rq, &x, &e) < 0) /* the daemon's message names the ref, mostly */
		r = strstr(e.msg, ref) ? client_fail_err(cmd, &e)
				       : client_fail(cmd, "%s: %s", ref, e.msg);
	else
		r = finish(&x, cmd, "pulled");
	xfer_free(&x);
	return r;
}

/* The upload: the file itself, or a tar of the directory made as it goes. */
static int import_open(const char *path, FILE **f, long long *len, pid_t *pid,
		       struct moat_err *e)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s", path);
	if (S_ISDIR(st.st_mode)) {
		int fd;
		if (tardir_start(path, &fd, pid, e) < 0)
			return -1;
		if (!(*f = fdopen(fd, "r"))) {
			int err = errno;
			close(fd);
			tardir_wait(*pid, path, e);
			*pid = 0;
			return moat_err_set(e, MOAT_E_SYSTEM, err, "fdopen");
		}
		*len = -1; /* sent chunked */
		return 0;
	}
	if (!S_ISREG(st.st_mode))
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s: not a file or a directory", path);
	if (!(*f = fopen(path, "re")))
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s", path);
	*len = st.st_size;
	return 0;
}

/* The tar's child, reaped at the upload's end: a tar it could not finish
 * aborts the request, so the daemon never imports a cut one. */
struct tarjob {
	pid_t pid;
	const char *dir;
	bool reaped;
	int rc;
	struct moat_err err;
};

static int tar_done(void *arg, struct moat_err *e)
{
	struct tarjob *t = arg;
	if (!t->reaped) {
		t->rc = tardir_wait(t->pid, t->dir, &t->err);
		t->reaped = true;
	}
	if (t->rc < 0)
		*e = t->err;
	return t->rc;
}

int image_import(int argc, char **argv)
{
	const char *cmd = "image import";
	static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	const char *name = NULL;
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'n') {
			name = optarg;
			continue;
		}
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		fputs("usage: moat image import [--name NAME] PATH\n\n"
		      "Import an image into moat serve's store and print its id. PATH is an\n"
		      "OCI layout directory (sent as a tar made on the fly), an OCI archive\n"
		      "(buildah's oci-archive:, skopeo's) or a `docker save` tar, plain or\n"
		      "gzip/zstd-compressed. Progress (layers, bytes) is shown on stderr.\n\n"
		      "      --name NAME  the image's name (default: the archive's own\n"
		      "                   ref.name or RepoTags, else only its digest)\n", stdout);
		client_help_footer(stdout);
		return 0;
	}
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one path (usage: moat image import PATH)");
	if (name && !*name)
		return client_fail(cmd, "--name: empty name");
	const char *path = argv[optind];
	struct moat_err e = {0};
	FILE *f = NULL;
	long long len = 0;
	pid_t pid = 0;
	/* before libcurl: the tar's child forks from a process without it */
	if (import_open(path, &f, &len, &pid, &e) < 0)
		return client_fail_err(cmd, &e);
	const char *query[] = {"name", name, NULL};
	struct tarjob tj = {.pid = pid, .dir = path};
	struct moat_http_req rq = {.method = "POST", .path = "/v1/images/import",
				   .query = name ? query : NULL, .upload = f, .upload_len = len,
				   .content_type = "application/x-tar",
				   .upload_eof = pid ? tar_done : NULL, .upload_arg = &tj};
	struct xfer x;
	xfer_init(&x, path);
	struct moat_http *h = moat_http_new(&e);
	int rc = h ? run(h, &rq, &x, &e) : -1;
	moat_http_free(h);
	fclose(f); /* the tar's child, if it still writes, gets EPIPE */
	struct moat_err te = {0};
	int tr = pid ? tar_done(&tj, &te) : 0;
	int r;
	if (tr < 0 && (rc == 0 || te.kind == MOAT_E_USAGE))
		r = client_fail_err(cmd, &te); /* the tar failed: the request was aborted */
	else if (rc < 0)
		r = client_fail(cmd, "%s: %s", path, e.msg);
	else
		r = finish(&x, cmd, "imported");
	xfer_free(&x);
	return r;
}
