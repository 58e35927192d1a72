/* The MCP tools' table and argument checks: see mcp_schema.h. The limits
 * are /v1's (api.c), so a call is refused here for what /v1 would refuse,
 * and the core checks the rest (paths, manifests, networks) in both. */
#define _GNU_SOURCE
#include "mcp_schema.h"

#include "../base/utf8.h"

#include <stdio.h>
#include <string.h>

#define ID_ARG {"id", MA_STRING, true, 0, 0, "the sandbox id (from sandbox_create or sandbox_list)"}
#define END_ARG {NULL, MA_STRING, false, 0, 0, NULL}

static const struct mcp_arg create_args[] = {
	{"image", MA_STRING, false, 0, 0,
	 "\"host\" (the default: the host's system directories, read-only) or the absolute "
	 "path of a root filesystem directory the operator allowed"},
	{"manifest", MA_OBJECT, false, 0, 0,
	 "files to put in the workspace first: {\"entries\":{\"README.md\":{\"type\":\"file\","
	 "\"content\":\"...\"},\"src\":{\"type\":\"dir\",\"children\":{...}}},\"environment\":"
	 "{\"K\":\"V\"}} (moat's API manifest: file, dir, local_file, local_dir, git_repo)"},
	{"network", MA_OBJECT, false, 0, 0,
	 "egress allowlist, e.g. {\"allow\":[\"pypi.org\",\"*.pythonhosted.org\"]}; without "
	 "it the sandbox has no network"},
	END_ARG};
static const struct mcp_arg list_args[] = {END_ARG};
static const struct mcp_arg delete_args[] = {ID_ARG, END_ARG};
static const struct mcp_arg exec_args[] = {
	ID_ARG,
	{"cmd", MA_CMD, true, 0, 0,
	 "a shell command line (run by /bin/sh -c) or an argv array"},
	{"cwd", MA_STRING, false, 0, 0,
	 "working directory: absolute, or relative to /workspace (the default)"},
	{"timeout_ms", MA_INT, false, 0, 86400000LL * 30,
	 "kill the command after this many milliseconds (0: no limit)"},
	{"yield_ms", MA_INT, false, 0, 3600000,
	 "return after this many milliseconds if the command still runs, with a process_id "
	 "for write_stdin (its stdin stays open); without it the call waits for the exit"},
	END_ARG};
static const struct mcp_arg stdin_args[] = {
	ID_ARG,
	{"process_id", MA_INT, true, 1, 2000000000, "the process_id exec returned"},
	{"data", MA_TEXT, true, 0, 0,
	 "bytes to write to its stdin (\"\" to only collect new output)"},
	{"yield_ms", MA_INT, false, 0, 3600000,
	 "how long to collect output before returning (default 250)"},
	END_ARG};
static const struct mcp_arg read_args[] = {
	ID_ARG, {"path", MA_STRING, true, 0, 0, "absolute, or relative to /workspace"}, END_ARG};
static const struct mcp_arg write_args[] = {
	ID_ARG,
	{"path", MA_STRING, true, 0, 0,
	 "absolute, or relative to /workspace; missing parent directories are created"},
	{"content", MA_TEXT, true, 0, 0, "the whole new content of the file (UTF-8 text)"},
	END_ARG};
static const struct mcp_arg ls_args[] = {
	ID_ARG,
	{"path", MA_STRING, false, 0, 0, "directory to list (default: /workspace)"},
	{"depth", MA_INT, false, 1, 64, "levels to descend (default 1)"},
	END_ARG};
static const struct mcp_arg patch_args[] = {
	ID_ARG,
	{"patch", MA_STRING, true, 0, 0,
	 "*** Begin Patch / *** Add File: P / *** Update File: P (with @@ hunks of ' ', '-', "
	 "'+' lines, optional *** Move to: Q) / *** Delete File: P / *** End Patch; or a "
	 "unified diff (git diff, diff -u: paths relative to /workspace, context exact)"},
	END_ARG};
static const struct mcp_arg image_args[] = {
	ID_ARG, {"path", MA_STRING, true, 0, 0, "a PNG, JPEG, GIF or WebP file"}, END_ARG};

static const struct mcp_tool tools[] = {
	{"sandbox_create", "Create a sandbox",
	 "Create an isolated Linux sandbox (no network unless asked, the host hidden) and "
	 "return its id, which every other tool takes. The workspace is /workspace.",
	 MCP_OP_CREATE, create_args, false, false, false},
	{"sandbox_list", "List sandboxes", "List the sandboxes of this moat daemon.",
	 MCP_OP_LIST, list_args, true, false, true},
	{"sandbox_delete", "Delete a sandbox",
	 "Kill every process of a sandbox and remove it with all its files.", MCP_OP_DELETE,
	 delete_args, false, true, true},
	{"exec", "Run a command",
	 "Run a command in a sandbox and return its exit code, stdout and stderr; with yield_ms, "
	 "a command still running by then returns a process_id to continue with write_stdin.",
	 MCP_OP_EXEC, exec_args, false, true, false},
	{"write_stdin", "Write to a running process",
	 "Write to the stdin of a process that exec left running (yield_ms) and return the "
	 "output since the last call, or its exit code once it ended.",
	 MCP_OP_STDIN, stdin_args, false, true, false},
	{"read_file", "Read a file", "Read a UTF-8 text file of a sandbox.", MCP_OP_READ,
	 read_args, true, false, true},
	{"write_file", "Write a file", "Create or replace a file of a sandbox.", MCP_OP_WRITE,
	 write_args, false, true, true},
	{"list_files", "List a directory",
	 "List a directory of a sandbox: type, size and path of each entry.", MCP_OP_LS, ls_args,
	 true, false, true},
	{"apply_patch", "Apply a patch",
	 "Apply a patch in the Codex apply_patch format, or a unified diff (git diff, diff -u), "
	 "to a sandbox's files, all or nothing: "
	 "when a hunk does not match, no file is changed.",
	 MCP_OP_PATCH, patch_args, false, true, false},
	{"view_image", "View an image", "Return an image file of a sandbox as MCP image content.",
	 MCP_OP_IMAGE, image_args, true, false, true},
	{NULL, NULL, NULL, MCP_OP_CREATE, NULL, false, false, false}};

const struct mcp_tool *mcp_tool_find(const char *name)
{
	for (const struct mcp_tool *t = tools; name && t->name; t++)
		if (!strcmp(t->name, name))
			return t;
	return NULL;
}

static json_t *arg_schema(const struct mcp_arg *a)
{
	json_t *s = NULL;
	switch (a->kind) {
	case MA_STRING:
		s = json_pack("{s:s,s:i}", "type", "string", "minLength", 1);
		break;
	case MA_TEXT:
		s = json_pack("{s:s}", "type", "string");
		break;
	case MA_INT:
		s = json_pack("{s:s,s:I,s:I}", "type", "integer", "minimum", (json_int_t)a->min,
			      "maximum", (json_int_t)a->max);
		break;
	case MA_CMD:
		s = json_pack("{s:[s,s],s:{s:s},s:i,s:i}", "type", "string", "array", "items", "type",
			      "string", "minLength", 1, "minItems", 1);
		break;
	case MA_OBJECT:
		s = json_pack("{s:s}", "type", "object");
		break;
	}
	if (s)
		json_object_set_new(s, "description", json_string(a->desc));
	return s;
}

json_t *mcp_tools_json(void)
{
	json_t *list = json_array();
	for (const struct mcp_tool *t = tools; list && t->name; t++) {
		json_t *props = json_object(), *req = json_array();
		for (const struct mcp_arg *a = t->args; a->name; a++) {
			json_object_set_new(props, a->name, arg_schema(a));
			if (a->required)
				json_array_append_new(req, json_string(a->name));
		}
		json_t *schema = json_pack("{s:s,s:o,s:b}", "type", "object", "properties", props,
					   "additionalProperties", 0);
		if (schema && json_array_size(req))
			json_object_set(schema, "required", req);
		json_decref(req);
		json_t *ann = json_pack("{s:s,s:b,s:b,s:b,s:b}", "title", t->title, "readOnlyHint",
					t->read_only, "destructiveHint", t->destructive,
					"idempotentHint", t->idempotent, "openWorldHint", 0);
		json_array_append_new(list, json_pack("{s:s,s:s,s:s,s:o,s:o}", "name", t->name,
						      "title", t->title, "description", t->desc,
						      "inputSchema", schema, "annotations", ann));
	}
	return list ? json_pack("{s:o}", "tools", list) : NULL;
}

static bool plain_string(json_t *v)
{
	return json_is_string(v) && json_string_length(v) &&
	       strlen(json_string_value(v)) == json_string_length(v);
}

static bool check_one(const struct mcp_arg *a, json_t *v, char *err, size_t n)
{
	switch (a->kind) {
	case MA_STRING:
		if (plain_string(v))
			return true;
		snprintf(err, n, "argument \"%s\" must be a non-empty string without NUL", a->name);
		return false;
	case MA_TEXT:
		if (json_is_string(v))
			return true;
		snprintf(err, n, "argument \"%s\" must be a string", a->name);
		return false;
	case MA_INT:
		if (json_is_integer(v) && json_integer_value(v) >= a->min &&
		    json_integer_value(v) <= a->max)
			return true;
		snprintf(err, n, "argument \"%s\" must be an integer from %lld to %lld", a->name,
			 (long long)a->min, (long long)a->max);
		return false;
	case MA_CMD: {
		bool ok = plain_string(v) || (json_is_array(v) && json_array_size(v) > 0);
		for (size_t i = 0; ok && json_is_array(v) && i < json_array_size(v); i++)
			ok = plain_string(json_array_get(v, i));
		if (ok)
			return true;
		snprintf(err, n,
			 "argument \"%s\" must be a non-empty string or a non-empty array of "
			 "non-empty strings",
			 a->name);
		return false;
	}
	case MA_OBJECT:
		if (json_is_object(v))
			return true;
		snprintf(err, n, "argument \"%s\" must be an object", a->name);
		return false;
	}
	return false;
}

bool mcp_args_check(const struct mcp_tool *t, json_t *args, char *err, size_t n)
{
	if (args && !json_is_object(args)) {
		snprintf(err, n, "%s: the arguments must be an object", t->name);
		return false;
	}
	const char *k;
	json_t *v;
	json_object_foreach(args, k, v)
	{
		const struct mcp_arg *a = t->args;
		while (a->name && strcmp(a->name, k))
			a++;
		if (!a->name) {
			char names[256] = "";
			size_t o = 0;
			for (const struct mcp_arg *b = t->args; b->name && o < sizeof names; b++)
				o += (size_t)snprintf(names + o, sizeof names - o, "%s%s",
						      o ? ", " : "", b->name);
			snprintf(err, n, "%s: unknown argument \"%.64s\" (it takes %s)", t->name, k,
				 t->args->name ? names : "none");
			moat_utf8_clean(err);
			return false;
		}
	}
	for (const struct mcp_arg *a = t->args; a->name; a++) {
		json_t *x = json_object_get(args, a->name);
		if (!x || json_is_null(x)) {
			if (!a->required)
				continue;
			snprintf(err, n, "%s: missing argument \"%s\"", t->name, a->name);
			return false;
		}
		char why[200];
		if (!check_one(a, x, why, sizeof why)) {
			snprintf(err, n, "%s: %s", t->name, why);
			return false;
		}
	}
	return true;
}

const char *mcp_arg_str(json_t *args, const char *name, size_t *len)
{
	json_t *v = json_object_get(args, name);
	if (len)
		*len = json_is_string(v) ? json_string_length(v) : 0;
	return json_string_value(v);
}

int64_t mcp_arg_int(json_t *args, const char *name, int64_t dflt)
{
	json_t *v = json_object_get(args, name);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}
