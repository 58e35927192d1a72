/* moat image ls / inspect / rm, and the dispatch of `moat image` to them
 * and to pull / import (image_pull.c). docs/API.md "Image store". */
#define _GNU_SOURCE
#include "client.h"
#include "http.h"
#include "image.h"

#include "../base/cleanup.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void image_usage(FILE *f)
{
	fputs("usage: moat image pull [--insecure] REF       pull from an OCI registry\n"
	      "       moat image import [--name NAME] PATH  an OCI layout dir, OCI archive\n"
	      "                                             or `docker save` tar\n"
	      "       moat image ls [--json]                list the images\n"
	      "       moat image inspect NAME|DIGEST        an image's details (JSON)\n"
	      "       moat image rm NAME|DIGEST...          remove names (a digest: the image)\n"
	      "\n"
	      "The image store of moat serve. pull and import print the image's id (its\n"
	      "manifest digest) and show progress on stderr; a sandbox starts from an\n"
	      "image with moat create's image option (a name or the digest).\n"
	      "`moat image COMMAND --help` lists a command's options.\n", f);
	client_help_footer(f);
}

/* Options of a command with no option but --help (and --json when json is
 * not NULL). 1: help printed; 0: go on; CLIENT_FAIL: bad option. */
static int simple_opts(int argc, char **argv, const char *cmd, const char *help,
		       bool *json)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (c == 'j' && json) {
			*json = true;
			continue;
		}
		if (c != 'h')
			return client_bad_option(cmd, c, argv);
		fputs(help, stdout);
		client_help_footer(stdout);
		return 1;
	}
	return 0;
}

/* "/v1/images/<name, one escaped segment>" (malloc'd; NULL on OOM). */
static char *image_path(struct moat_http *h, const char *name)
{
	return moat_http_path(h, "images", name, "");
}

/* "1.5 MB" style size into buf. */
void image_size_text(long long n, char *buf, size_t len)
{
	static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
	double v = (double)n;
	size_t u = 0;
	while (v >= 1000 && u + 1 < sizeof units / sizeof units[0]) {
		v /= 1000;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* The names of an image, comma-separated, or "-" (malloc'd; NULL on OOM). */
static char *names_text(json_t *names)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n)
		fprintf(f, "%s%s", i ? "," : "", json_string_value(n) ? json_string_value(n) : "?");
	if (!json_array_size(names))
		fputc('-', f);
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

static const char *str_of(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "?";
}

static int print_images(json_t *list)
{
	size_t i;
	json_t *im;
	if (printf("%-19s  %-9s  %-6s  %-20s  %s\n", "ID", "SIZE", "LAYERS", "CREATED",
		   "NAMES") < 0)
		return -1;
	json_array_foreach(list, i, im) {
		char size[32];
		image_size_text(json_integer_value(json_object_get(im, "size")), size, sizeof size);
		_cleanup_free_ char *names = names_text(json_object_get(im, "names"));
		const char *id = str_of(im, "id");
		/* "sha256:" and 12 hex digits, as docker shows ids */
		if (!names || printf("%-19.19s  %-9s  %-6lld  %-20s  %s\n", id, size,
				     (long long)json_integer_value(json_object_get(im, "layer_count")),
				     str_of(im, "created"), names) < 0)
			return -1;
	}
	return 0;
}

static int image_ls(int argc, char **argv)
{
	const char *cmd = "image ls";
	bool as_json = false;
	int r = simple_opts(argc, argv, cmd, "usage: moat image ls [--json]\n\n"
			    "List the images of moat serve's store.\n\n"
			    "      --json   print the server's JSON answer\n", &as_json);
	if (r)
		return r == 1 ? 0 : r;
	if (optind < argc)
		return client_fail(cmd, "unexpected argument '%s'", argv[optind]);
	return client_list(cmd, "/v1/images", NULL, "images", as_json, print_images);
}

static int image_inspect(int argc, char **argv)
{
	const char *cmd = "image inspect";
	int r = simple_opts(argc, argv, cmd, "usage: moat image inspect NAME|DIGEST\n\n"
			    "Print an image's details as JSON: names, size, layers, and the\n"
			    "config (env, workdir, user, entrypoint, cmd) a sandbox made from it "
			    "starts with.\n", NULL);
	if (r)
		return r == 1 ? 0 : r;
	if (optind + 1 != argc)
		return client_fail(cmd, "expected one image name (usage: moat image inspect NAME)");
	return client_show(cmd, argv[optind], image_path);
}

static int image_rm(int argc, char **argv)
{
	const char *cmd = "image rm";
	int r = simple_opts(argc, argv, cmd, "usage: moat image rm NAME|DIGEST...\n\n"
			    "Remove image names; a digest removes every name of that image. The\n"
			    "image itself goes once no name, sandbox or snapshot uses it (an image\n"
			    "a sandbox uses keeps its last name: 409).\n", NULL);
	if (r)
		return r == 1 ? 0 : r;
	if (optind >= argc)
		return client_fail(cmd, "no image given (usage: moat image rm NAME...)");
	return client_delete_each(cmd, argv + optind, argc - optind, image_path);
}

int moat_client_image(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} subs[] = {
		{"pull", image_pull}, {"import", image_import}, {"ls", image_ls},
		{"list", image_ls}, {"inspect", image_inspect}, {"rm", image_rm},
	};
	if (argc < 2) {
		image_usage(stderr);
		return CLIENT_FAIL;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		image_usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1);
	return client_fail("image", "unknown command '%s' (try moat image --help)", argv[1]);
}
