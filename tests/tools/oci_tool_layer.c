/* oci-tool's layer commands (src/oci/unpack.h, layout.h), for tests and
 * bench/oci_unpack.py:
 *
 *   oci-tool unpack BLOB DIR [--keep-owners] [--max-bytes N] [--max-entries N]
 *       oci_unpack_layer of the file BLOB into DIR (must not exist);
 *       prints the diff_id; exit 1 with the error on stderr.
 *   oci-tool pack DIR OUT
 *       oci_pack_layer of the tree DIR into the file OUT; prints
 *       "digest diff_id size".
 *   oci-tool import PATH --store DIR [--name NAME] [--max BYTES]
 *       oci_import; prints the image as JSON (manifest, name, layers with
 *       digest, mediaType and diff_id).
 *   oci-tool export MANIFEST --store DIR [--name NAME] OUT
 *       oci_export of an image of the store into the tar OUT.
 */
#include "oci/blobs.h"
#include "oci/layout.h"
#include "oci/unpack.h"

#include <jansson.h>

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int oci_tool_layer(int argc, char **argv);

static int lfail(const struct moat_err *e)
{
	fprintf(stderr, "oci-tool: %s (errno %d)\n", e->msg, e->errnum);
	return 1;
}

static int lusage(void)
{
	fprintf(stderr, "usage: oci-tool unpack BLOB DIR [--keep-owners] [--max-bytes N] [--max-entries N]\n"
			"       oci-tool pack DIR OUT\n"
			"       oci-tool import PATH --store DIR [--name NAME] [--max BYTES]\n"
			"       oci-tool export MANIFEST --store DIR [--name NAME] OUT\n");
	return 2;
}

/* 0..n positional arguments and the options of every command */
struct largs {
	const char *pos[3];
	int npos;
	const char *store, *name;
	bool keep;
	unsigned long long max_bytes, max_entries;
};

static int parse(int argc, char **argv, struct largs *a)
{
	memset(a, 0, sizeof *a);
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--store") && i + 1 < argc)
			a->store = argv[++i];
		else if (!strcmp(argv[i], "--name") && i + 1 < argc)
			a->name = argv[++i];
		else if ((!strcmp(argv[i], "--max-bytes") || !strcmp(argv[i], "--max")) && i + 1 < argc)
			a->max_bytes = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--max-entries") && i + 1 < argc)
			a->max_entries = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--keep-owners"))
			a->keep = true;
		else if (argv[i][0] != '-' && a->npos < 3)
			a->pos[a->npos++] = argv[i];
		else
			return -1;
	}
	return 0;
}

static int cmd_import(struct largs *a)
{
	struct moat_err e = {0};
	struct oci_image im;
	/* oci_import takes an opened store (as the daemon opens its own once) */
	if (oci_blobs_open(a->store, &e) < 0 ||
	    oci_import(a->store, a->pos[0], a->name, (int64_t)a->max_bytes, NULL, NULL, &im, &e) < 0)
		return lfail(&e);
	json_t *layers = json_array();
	for (size_t i = 0; i < im.m.nlayers; i++)
		json_array_append_new(layers, json_pack("{s:s, s:I, s:s, s:s}", "digest",
							 im.m.layers[i].digest, "size",
							 (json_int_t)im.m.layers[i].size, "mediaType",
							 im.m.layers[i].media_type, "diff_id",
							 im.config.diff_ids[i]));
	json_t *out = json_pack("{s:s, s:s, s:I, s:o, s:s}", "manifest", im.manifest, "name", im.name,
				"size", (json_int_t)im.size, "layers", layers, "config",
				im.m.config.digest);
	oci_image_free(&im);
	if (!out)
		return 1;
	json_dumpf(out, stdout, JSON_INDENT(1) | JSON_SORT_KEYS);
	putchar('\n');
	json_decref(out);
	return 0;
}

/* -1: not a layer command */
int oci_tool_layer(int argc, char **argv)
{
	const char *cmd = argv[1];
	if (strcmp(cmd, "unpack") && strcmp(cmd, "pack") && strcmp(cmd, "import") &&
	    strcmp(cmd, "export"))
		return -1;
	struct largs a;
	if (parse(argc, argv, &a) < 0)
		return lusage();
	struct moat_err e = {0};
	if (!strcmp(cmd, "unpack")) {
		if (a.npos != 2)
			return lusage();
		int fd = open(a.pos[0], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			perror(a.pos[0]);
			return 1;
		}
		struct oci_unpack_opts o = {.keep_owners = a.keep,
					    .max_bytes = a.max_bytes,
					    .max_entries = a.max_entries};
		char diff_id[OCI_DIGEST_LEN + 1];
		int rc = oci_unpack_layer(fd, a.pos[1], &o, diff_id, &e);
		close(fd);
		if (rc < 0)
			return lfail(&e);
		printf("%s\n", diff_id);
		return 0;
	}
	if (!strcmp(cmd, "pack")) {
		if (a.npos != 2)
			return lusage();
		int dfd = open(a.pos[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		int ofd = open(a.pos[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (dfd < 0 || ofd < 0) {
			perror("pack");
			return 1;
		}
		char dg[OCI_DIGEST_LEN + 1], di[OCI_DIGEST_LEN + 1];
		int64_t size;
		int rc = oci_pack_layer(dfd, ofd, dg, di, &size, &e);
		close(dfd);
		close(ofd);
		if (rc < 0)
			return lfail(&e);
		printf("%s %s %lld\n", dg, di, (long long)size);
		return 0;
	}
	if (!a.store)
		return lusage();
	if (!strcmp(cmd, "import"))
		return a.npos == 1 ? cmd_import(&a) : lusage();
	if (a.npos != 2)
		return lusage();
	int fd = open(a.pos[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(a.pos[1]);
		return 1;
	}
	int rc = oci_export(a.store, a.pos[0], a.name, fd, &e);
	close(fd);
	return rc < 0 ? lfail(&e) : 0;
}
