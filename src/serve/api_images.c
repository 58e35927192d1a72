/* /v1/images (docs/API.md "Images"): the door onto images.h. A name is
 * one path segment, percent-encoded ("/" as %2F, ":" as %3A), or a
 * manifest digest. A pull or an import waits for its job; with Accept:
 * text/event-stream it streams "progress" events, then "image" or "error". */
#define _GNU_SOURCE
#include "api.h"

#include "http.h"
#include "images.h"
#include "jfield.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct ipend {
	struct evhttp_request *req;
	struct images_wait *w;
	bool sse;
	int status; /* of the answer: 201 for an import, 200 for a pull */
	struct http_wait wait;
};

static void fail(struct evhttp_request *req, const struct core_err *e)
{
	http_error(req, e->status ? e->status : 500, e->code[0] ? e->code : "internal", "%s",
		   e->msg);
}

static void ipend_free(struct ipend *p)
{
	http_wait_stop(&p->wait);
	images_wait_cancel(p->w);
	free(p);
}

static void on_gone(void *arg)
{
	ipend_free(arg); /* the job goes on: another waiter, or the store, keeps it */
}

static void on_progress(void *arg, const struct oci_progress *pr)
{
	struct ipend *p = arg;
	if (!p->sse)
		return;
	if (!p->wait.streaming)
		http_wait_stream(&p->wait, "text/event-stream");
	json_t *o = json_pack("{s:I,s:I,s:I,s:I}", "layers_done", (json_int_t)pr->layers_done,
			      "layers_total", (json_int_t)pr->layers_total, "bytes_done",
			      (json_int_t)pr->bytes_done, "bytes_total", (json_int_t)pr->bytes_total);
	api_sse_event(p->req, "progress", o);
}

static void on_done(void *arg, json_t *image, const struct core_err *e)
{
	struct ipend *p = arg;
	p->w = NULL; /* freed by the service */
	http_wait_stop(&p->wait);
	if (p->wait.streaming) {
		if (image) {
			api_sse_event(p->req, "image", json_incref(image));
		} else {
			json_t *o = json_pack("{s:{s:s,s:s,s:i}}", "error", "code", e->code, "message",
					      e->msg, "status", e->status);
			api_sse_event(p->req, "error", o);
		}
		evhttp_send_reply_end(p->req);
	} else if (image) {
		http_json(p->req, p->status, json_incref(image));
	} else {
		fail(p->req, e);
	}
	ipend_free(p);
}

static const struct images_cbs cbs = {.progress = on_progress, .done = on_done};

static struct ipend *ipend_new(struct evhttp_request *req, struct event_base *base, int status)
{
	struct ipend *p = calloc(1, sizeof *p);
	if (!p) {
		http_error(req, 500, "internal", "out of memory");
		return NULL;
	}
	p->req = req;
	p->status = status;
	const char *accept = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept");
	p->sse = accept && strstr(accept, "text/event-stream");
	http_wait_start(&p->wait, base, req, on_gone, p);
	return p;
}

/* The core (images.c) refused at once: answer, free. */
static void started(struct ipend *p, struct images_wait *w, const struct core_err *e)
{
	if (w) {
		p->w = w;
		if (p->sse) /* the stream starts now: a client sees it is under way */
			http_wait_stream(&p->wait, "text/event-stream");
		return;
	}
	http_wait_stop(&p->wait);
	fail(p->req, e);
	free(p);
}

static void h_pull(struct evhttp_request *req, struct event_base *base)
{
	json_t *body = http_body_json(req, false);
	if (!body)
		return;
	static const char *const keys[] = {"ref", "insecure", NULL};
	struct core_err e = {0};
	bool insecure = false;
	json_t *ref = json_object_get(body, "ref");
	if (!jf_only_keys(&e, body, "body", keys) || !jf_bool(&e, body, "insecure", &insecure)) {
		fail(req, &e);
	} else if (!json_is_string(ref) || !json_string_length(ref) ||
		   strlen(json_string_value(ref)) != json_string_length(ref)) {
		http_error(req, 400, "invalid_request", "ref must be an image reference (a string)");
	} else {
		struct ipend *p = ipend_new(req, base, 200);
		if (p)
			started(p, images_pull(json_string_value(ref), insecure, &cbs, p, &e), &e);
	}
	json_decref(body);
}

static void h_import(struct evhttp_request *req, struct event_base *base)
{
	const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
	static const char *const types[] = {"application/x-tar", "application/tar",
					    "application/gzip", "application/x-gzip",
					    "application/zstd", "application/octet-stream", NULL};
	bool ok = !ct;
	for (size_t i = 0; !ok && types[i]; i++)
		ok = !strncasecmp(ct, types[i], strlen(types[i]));
	if (!ok) {
		http_error(req, 415, "unsupported_media_type",
			   "an import's body is an archive (application/x-tar), not %.100s", ct);
		return;
	}
	char *name = http_query(req, "name");
	struct core_err e = {0};
	struct ipend *p = ipend_new(req, base, 201);
	if (p)
		started(p,
			images_import(evhttp_request_get_input_buffer(req), name, &cbs, p, &e), &e);
	free(name);
}

void api_images_route(struct evhttp_request *req, struct event_base *base, char **seg, int n)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	struct core_err e = {0};
	if (n == 2) {
		if (m == EVHTTP_REQ_GET)
			http_json(req, 200, images_list());
		else if (m == EVHTTP_REQ_POST)
			h_pull(req, base);
		else
			http_error(req, 405, "method_not_allowed", "method not allowed on /v1/images");
		return;
	}
	if (n == 3 && !strcmp(seg[2], "import") && m == EVHTTP_REQ_POST) {
		h_import(req, base);
		return;
	}
	if (n != 3) {
		http_error(req, 404, "not_found",
			   "no such route: an image name is one path segment, percent-encoded "
			   "(/v1/images/127.0.0.1%%3A5000%%2Frepo%%3Atag), or its digest");
		return;
	}
	size_t len = 0;
	char *name = evhttp_uridecode(seg[2], 0, &len);
	if (!name || !*name || strlen(name) != len || len > 600) {
		http_error(req, 400, "invalid_request", "bad image name");
	} else if (m == EVHTTP_REQ_GET) {
		json_t *o = images_inspect(name, &e);
		if (o)
			http_json(req, 200, o);
		else
			fail(req, &e);
	} else if (m == EVHTTP_REQ_DELETE) {
		if (images_remove(name, &e) == 0)
			http_no_content(req);
		else
			fail(req, &e);
	} else {
		http_error(req, 405, "method_not_allowed", "method not allowed on an image");
	}
	free(name);
}
