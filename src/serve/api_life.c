/* /v1's pause and resume (docs/API.md "Pause and resume"): a thin door
 * onto life.h. */
#define _GNU_SOURCE
#include "api_life.h"

#include "box.h"
#include "http.h"
#include "jfield.h"
#include "life.h"

#include <string.h>

void api_life_route(struct evhttp_request *req, struct box *b, const char *what)
{
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		http_error(req, 405, "method_not_allowed", "%s takes POST", what);
		return;
	}
	json_t *body = http_body_json(req, true);
	if (!body)
		return;
	static const char *const pause_keys[] = {"release", NULL};
	static const char *const resume_keys[] = {NULL};
	bool pause = !strcmp(what, "pause"), release = false;
	struct core_err e = {0};
	int rc = jf_only_keys(&e, body, "body", pause ? pause_keys : resume_keys) &&
			 (!pause || jf_bool(&e, body, "release", &release))
		 ? 0 : -1;
	json_decref(body);
	/* what became of its processes: a hibernated sandbox's start again */
	const char *procs = pause ? (release ? "stopped" : "frozen")
			    : box_hibernated(b) ? "restarted" : "thawed";
	if (rc == 0)
		rc = pause ? core_pause(b, release, &e) : core_resume(b, &e);
	if (rc < 0) {
		http_error(req, e.status, e.code, "%s", e.msg);
		return;
	}
	json_t *o = box_json(b);
	json_object_set_new(o, "processes", json_string(procs));
	http_json(req, 200, o);
}
