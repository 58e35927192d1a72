/* index.json / manifest.json of image archives: see layout_json.h. */
#include "layout_json.h"

#include <jansson.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MAX_ENTRIES 1024

static void json_freep(json_t **j)
{
	if (*j)
		json_decref(*j);
}
#define _cleanup_json_ __attribute__((cleanup(json_freep)))

#define bad(e, what, msg) oci_json_bad(e, what, "%s", msg)
#define load oci_json_load

/* A string without NUL and of at most max bytes, or NULL. */
static const char *str_of(json_t *v, size_t max)
{
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
	    json_string_length(v) > max)
		return NULL;
	return json_string_value(v);
}

/* "a, b, c" of the names there are, for the error. */
static void add_name(char *list, size_t cap, const char *n)
{
	size_t l = strlen(list);
	if (l + 8 >= cap)
		return;
	snprintf(list + l, cap - l, "%s\"%.100s\"", l ? ", " : "", n);
}

/* No image, or several, answer which: the error lists what there is. */
static int not_one(struct moat_err *e, const char *what, const char *how, const char *which,
		   const char *list)
{
	if (which)
		return oci_json_bad(e, what, "no single image %s \"%.200s\"; it has: %s", how, which,
				    list);
	return oci_json_bad(e, what, "several images and none chosen; it has: %s", list);
}

int oci_layout_version_check(const char *json, size_t len, struct moat_err *e)
{
	_cleanup_json_ json_t *j = load(json, len, "oci-layout", e);
	if (!j)
		return -1;
	const char *v = str_of(json_object_get(j, "imageLayoutVersion"), 32);
	if (!v || strncmp(v, "1.", 2) != 0)
		return bad(e, "oci-layout", "imageLayoutVersion is not 1.x");
	return 0;
}

static const char *entry_name(json_t *m)
{
	json_t *a = json_object_get(m, "annotations");
	if (!json_is_object(a))
		return NULL;
	const char *n = str_of(json_object_get(a, OCI_REF_NAME), 500);
	return n ? n : str_of(json_object_get(a, "io.containerd.image.name"), 500);
}

static bool names_match(json_t *m, const char *which)
{
	json_t *a = json_object_get(m, "annotations");
	if (!json_is_object(a))
		return false;
	const char *n = str_of(json_object_get(a, OCI_REF_NAME), 500);
	const char *c = str_of(json_object_get(a, "io.containerd.image.name"), 500);
	return (n && strcmp(n, which) == 0) || (c && strcmp(c, which) == 0);
}

int oci_layout_pick(const char *json, size_t len, const char *which, struct oci_desc *out,
		    char *name, size_t name_cap, struct moat_err *e)
{
	_cleanup_json_ json_t *j = load(json, len, "index.json", e);
	if (!j)
		return -1;
	json_t *ms = json_object_get(j, "manifests");
	if (!json_is_object(j) || !json_is_array(ms))
		return bad(e, "index.json", "no manifests array");
	size_t n = json_array_size(ms);
	if (n == 0)
		return bad(e, "index.json", "no image in it");
	if (n > MAX_ENTRIES)
		return bad(e, "index.json", "too many manifests");
	json_t *pick = NULL;
	char list[600] = "";
	size_t hits = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *m = json_array_get(ms, i);
		if (!json_is_object(m))
			return bad(e, "index.json", "a manifests entry is not an object");
		const char *nm = entry_name(m);
		add_name(list, sizeof list, nm ? nm : "(unnamed)");
		if (which ? names_match(m, which) : n == 1) {
			pick = m;
			hits++;
		}
	}
	if (!pick || hits > 1)
		return not_one(e, "index.json", "named", which, list);
	if (oci_desc_parse(pick, "index.json", false, out, e) < 0)
		return -1;
	const char *nm = entry_name(pick);
	if (name_cap)
		snprintf(name, name_cap, "%s", nm ? nm : "");
	return 0;
}

/* which, or which:latest when which has no tag */
static bool tag_match(const char *tag, const char *which)
{
	if (strcmp(tag, which) == 0)
		return true;
	const char *slash = strrchr(which, '/');
	if (strchr(slash ? slash : which, ':') || strchr(which, '@'))
		return false;
	size_t wl = strlen(which);
	return strncmp(tag, which, wl) == 0 && strcmp(tag + wl, ":latest") == 0;
}

int oci_docker_pick(const char *json, size_t len, const char *which, struct oci_docker_pick *out,
		    struct moat_err *e)
{
	_cleanup_json_ json_t *j = load(json, len, "manifest.json", e);
	if (!j)
		return -1;
	if (!json_is_array(j) || json_array_size(j) == 0)
		return bad(e, "manifest.json", "not a non-empty array");
	size_t n = json_array_size(j);
	if (n > MAX_ENTRIES)
		return bad(e, "manifest.json", "too many images");
	json_t *pick = NULL;
	const char *picked_tag = NULL;
	char list[600] = "";
	size_t hits = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *m = json_array_get(j, i);
		if (!json_is_object(m))
			return bad(e, "manifest.json", "an entry is not an object");
		json_t *tags = json_object_get(m, "RepoTags");
		if (tags && !json_is_null(tags) && !json_is_array(tags))
			return bad(e, "manifest.json", "RepoTags is not an array");
		const char *hit = NULL;
		size_t nt = json_array_size(tags);
		if (nt == 0)
			add_name(list, sizeof list, "(untagged)");
		for (size_t t = 0; t < nt && t < MAX_ENTRIES; t++) {
			const char *tag = str_of(json_array_get(tags, t), 500);
			if (!tag)
				return bad(e, "manifest.json", "a RepoTags entry is not a string");
			add_name(list, sizeof list, tag);
			if (!hit && (which ? tag_match(tag, which) : t == 0))
				hit = tag;
		}
		if (which ? hit != NULL : n == 1) {
			pick = m;
			picked_tag = hit;
			hits++;
		}
	}
	if (!pick || hits > 1)
		return not_one(e, "manifest.json", "tagged", which, list);
	const char *cfg = str_of(json_object_get(pick, "Config"), sizeof out->config - 1);
	if (!cfg || !*cfg)
		return bad(e, "manifest.json", "the image has no Config");
	snprintf(out->config, sizeof out->config, "%s", cfg);
	json_t *ls = json_object_get(pick, "Layers");
	if (!json_is_array(ls))
		return bad(e, "manifest.json", "the image has no Layers array");
	if (json_array_size(ls) > OCI_MAX_LAYERS)
		return bad(e, "manifest.json", "too many layers");
	out->nlayers = json_array_size(ls);
	for (size_t i = 0; i < out->nlayers; i++) {
		const char *l = str_of(json_array_get(ls, i), sizeof out->layers[i] - 1);
		if (!l || !*l)
			return bad(e, "manifest.json", "a Layers entry is not a member name");
		snprintf(out->layers[i], sizeof out->layers[i], "%s", l);
	}
	snprintf(out->name, sizeof out->name, "%s", picked_tag ? picked_tag : "");
	return 0;
}
