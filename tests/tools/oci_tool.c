/* oci-tool: drive src/oci from tests and benchmarks, without the daemon.
 *
 *   oci-tool pull REF --store DIR [--insecure] [--auth FILE] [--max BYTES] [--progress]
 *       pull REF into the blob store DIR (oci_blobs_open first), print the
 *       image as JSON on stdout; exit 1 with the error on stderr.
 *   oci-tool open --store DIR
 *       oci_blobs_open: create the store, empty its tmp/.
 */
#include "oci/blobs.h"
#include "oci/registry.h"

#include <jansson.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
	fprintf(stderr, "usage: oci-tool pull REF --store DIR [--insecure] [--auth FILE] [--max BYTES] "
			"[--progress]\n       oci-tool open --store DIR\n");
	exit(2);
}

static json_t *vec(char **v)
{
	if (!v)
		return json_null();
	json_t *a = json_array();
	for (size_t i = 0; v[i]; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static void on_progress(void *arg, const struct oci_progress *p)
{
	fprintf(stderr, "progress layers %zu/%zu bytes %lld/%lld %s\n", p->layers_done,
		p->layers_total, (long long)p->bytes_done, (long long)p->bytes_total,
		p->current ? p->current : "-");
}

static int fail(const struct moat_err *e)
{
	fprintf(stderr, "oci-tool: %s (errno %d)\n", e->msg, e->errnum);
	return 1;
}

int oci_tool_layer(int argc, char **argv); /* oci_tool_layer.c */

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	int lrc = oci_tool_layer(argc, argv); /* unpack, pack, import, export */
	if (lrc >= 0)
		return lrc;
	const char *cmd = argv[1], *ref = NULL, *store = NULL, *auth = NULL;
	struct oci_pull_opts o = {0};
	bool progress = false;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--store") == 0 && i + 1 < argc)
			store = argv[++i];
		else if (strcmp(argv[i], "--auth") == 0 && i + 1 < argc)
			auth = argv[++i];
		else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc)
			o.max_bytes = strtoll(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--insecure") == 0)
			o.insecure = true;
		else if (strcmp(argv[i], "--progress") == 0)
			progress = true;
		else if (argv[i][0] != '-' && !ref)
			ref = argv[i];
		else
			usage();
	}
	if (!store)
		usage();
	struct moat_err e = {0};
	if (oci_blobs_open(store, &e) < 0)
		return fail(&e);
	if (strcmp(cmd, "open") == 0)
		return 0;
	if (strcmp(cmd, "pull") != 0 || !ref)
		usage();
	struct oci_ref r;
	if (oci_ref_parse(ref, &r, &e) < 0)
		return fail(&e);
	o.auth_file = auth;
	if (progress)
		o.progress = on_progress;
	struct oci_image im;
	if (oci_pull(store, &r, &o, &im, &e) < 0)
		return fail(&e);
	json_t *layers = json_array();
	for (size_t i = 0; i < im.m.nlayers; i++)
		json_array_append_new(layers, json_pack("{s:s, s:I, s:s, s:s}", "digest",
							 im.m.layers[i].digest, "size",
							 (json_int_t)im.m.layers[i].size, "mediaType",
							 im.m.layers[i].media_type, "diff_id",
							 im.config.diff_ids[i]));
	json_t *out = json_pack(
		"{s:s, s:s, s:I, s:o, s:{s:s, s:I, s:s, s:s, s:o, s:o, s:o, s:o, s:o}}", "manifest",
		im.manifest, "name", im.name, "size", (json_int_t)im.size, "layers", layers, "config",
		"digest", im.m.config.digest, "size", (json_int_t)im.m.config.size, "os", im.config.os,
		"architecture", im.config.arch, "Env", vec(im.config.env), "Cmd", vec(im.config.cmd),
		"Entrypoint", vec(im.config.entrypoint), "WorkingDir", str_or_null(im.config.workdir),
		"User", str_or_null(im.config.user));
	oci_image_free(&im);
	if (!out) {
		fprintf(stderr, "oci-tool: out of memory\n");
		return 1;
	}
	json_dumpf(out, stdout, JSON_INDENT(1) | JSON_SORT_KEYS);
	putchar('\n');
	json_decref(out);
	return 0;
}
