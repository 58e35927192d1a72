/* TEMPORARY (branch e2b/cp): weak stand-ins for the operation core, the
 * box door-data calls and the envd door, so that the E2B control plane
 * links before core.c, box.c's additions and e2b_envd.c land. Every
 * symbol is weak: the real one wins at link time. DELETE THIS FILE AT
 * MERGE. */
#define _GNU_SOURCE
#include "box.h"
#include "core.h"
#include "e2b_int.h"
#include "http.h"

#include <string.h>

#define WEAK __attribute__((weak))

static struct core_config stub_conf;

WEAK void core_init(const struct core_config *c)
{
	stub_conf = *c;
}

WEAK const struct core_config *core_config(void)
{
	return &stub_conf;
}

WEAK void core_op_cancel(struct core_op *op)
{
}

WEAK struct core_op *core_create(json_t *body, const struct core_create_opts *o,
				 core_create_cb cb, void *arg, struct core_err *e)
{
	*e = (struct core_err){.status = 501, .code = "internal"};
	strcpy(e->msg, "core_create: the operation core is not merged yet (core_stub.c)");
	return NULL;
}

WEAK void core_delete(struct box *b)
{
	box_delete(b);
}

WEAK const json_t *box_door(const struct box *b, const char *door)
{
	return NULL;
}

WEAK int box_set_door(struct box *b, const char *door, json_t *data)
{
	return -1;
}

WEAK int64_t box_created_at(const struct box *b)
{
	return 0;
}

WEAK int64_t box_end_at(const struct box *b)
{
	return 0;
}

WEAK int box_set_end(struct box *b, int64_t end_unix)
{
	return -1;
}

WEAK bool box_users(const struct box *b)
{
	return false;
}

WEAK void box_limits(const struct box *b, uint64_t *memory, uint64_t *disk, uint64_t *cpu_milli)
{
	*memory = *disk = *cpu_milli = 0;
}

WEAK void box_usage(const struct box *b, int64_t *cpu_usec, int64_t *mem_bytes)
{
	*cpu_usec = *mem_bytes = -1;
}

WEAK void e2b_envd_route(struct evhttp_request *req, struct box *b, const char *id, int port,
			 const char *path)
{
	e2b_api_error(req, 501, "envd is not merged yet (core_stub.c)");
}
