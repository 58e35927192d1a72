/* OCI / Docker v2 image documents with jansson. Every field is checked:
 * the documents come from a registry or an archive, and what they name
 * (digests) become paths of the store. */
#include "manifest.h"

#include "image.h"

#include <jansson.h>

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#define OCI_MAX_MANIFESTS 1024 /* entries in an index */
#define OCI_MAX_VEC 4096       /* Env / Cmd / Entrypoint entries */
#define OCI_MAX_STR 65536      /* one Env / Cmd string */

static void json_freep(json_t **j)
{
	if (*j)
		json_decref(*j);
}
#define _cleanup_json_ __attribute__((cleanup(json_freep)))

int oci_json_bad(struct moat_err *e, const char *what, const char *fmt, ...)
{
	char m[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	moat_err_set(e, MOAT_E_USAGE, 0, "%s: %s", what, m);
	if (e)
		e->errnum = EBADMSG;
	return -1;
}
#define bad oci_json_bad

json_t *oci_json_load(const char *json, size_t len, const char *what, struct moat_err *e)
{
	json_error_t je;
	json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		bad(e, what, "not JSON: %.200s (line %d)", je.text, je.line);
	return j;
}

static json_t *load(const char *json, size_t len, const char *what, struct moat_err *e)
{
	json_t *j = oci_json_load(json, len, what, e);
	if (!j)
		return NULL;
	if (!json_is_object(j)) {
		json_decref(j);
		bad(e, what, "not a JSON object");
		return NULL;
	}
	return j;
}

/* A string member: NULL when absent; *err set when present but not a
 * string, or holding a NUL or more than max bytes. */
static const char *str_member(json_t *o, const char *k, size_t max, bool *err)
{
	json_t *v = json_object_get(o, k);
	if (!v || json_is_null(v))
		return NULL;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
	    json_string_length(v) > max) {
		*err = true;
		return NULL;
	}
	return json_string_value(v);
}

static int schema2(json_t *j, const char *what, struct moat_err *e)
{
	json_t *v = json_object_get(j, "schemaVersion");
	if (!v)
		return 0; /* OCI makes it required, but index.json of some tools omits it */
	if (!json_is_integer(v) || json_integer_value(v) != 2)
		return bad(e, what,
			   "schemaVersion is not 2 (Docker schema 1 manifests are not supported)");
	return 0;
}

int oci_desc_parse(json_t *d, const char *what, bool need_type, struct oci_desc *out,
		   struct moat_err *e)
{
	bool err = false;
	if (!json_is_object(d))
		return bad(e, what, "a descriptor is not an object");
	const char *mt = str_member(d, "mediaType", sizeof out->media_type - 1, &err);
	const char *dg = str_member(d, "digest", OCI_DIGEST_LEN, &err);
	json_t *sz = json_object_get(d, "size");
	if (err || (need_type && (!mt || !mt[0])))
		return bad(e, what, "a descriptor has no valid mediaType");
	if (!dg || !oci_digest_valid(dg))
		return bad(e, what, "descriptor digest \"%.80s\" is not sha256:<64 lowercase hex>",
			   dg ? dg : "(none)");
	if (!json_is_integer(sz) || json_integer_value(sz) < 0)
		return bad(e, what, "descriptor %s has no valid size (an integer >= 0)", dg);
	snprintf(out->media_type, sizeof out->media_type, "%s", mt ? mt : "");
	memcpy(out->digest, dg, OCI_DIGEST_LEN + 1);
	out->size = json_integer_value(sz);
	return 0;
}

/* media type without parameters ("; charset=...") */
static bool mt_is(const char *ct, const char *mt)
{
	size_t n = strlen(mt);
	return strncmp(ct, mt, n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static int kind_of(const char *mt, enum oci_doc *kind)
{
	if (mt_is(mt, OCI_MT_INDEX) || mt_is(mt, DOCKER_MT_LIST))
		*kind = OCI_DOC_INDEX;
	else if (mt_is(mt, OCI_MT_MANIFEST) || mt_is(mt, DOCKER_MT_MANIFEST))
		*kind = OCI_DOC_MANIFEST;
	else
		return -1;
	return 0;
}

int oci_doc_kind(const char *json, size_t len, const char *content_type, enum oci_doc *kind,
		 struct moat_err *e)
{
	_cleanup_json_ json_t *j = load(json, len, "manifest", e);
	if (!j)
		return -1;
	if (schema2(j, "manifest", e) < 0)
		return -1;
	bool err = false;
	const char *mt = str_member(j, "mediaType", 255, &err);
	if (err)
		return bad(e, "manifest", "mediaType is not a string");
	if (mt) {
		if (kind_of(mt, kind) < 0)
			return bad(e, "manifest", "unsupported media type \"%.200s\"", mt);
		return 0;
	}
	if (content_type && kind_of(content_type, kind) == 0)
		return 0;
	bool has_m = json_is_array(json_object_get(j, "manifests"));
	bool has_l = json_is_array(json_object_get(j, "layers"));
	if (has_m == has_l)
		return bad(e, "manifest", "neither an index (manifests) nor a manifest (layers)");
	*kind = has_m ? OCI_DOC_INDEX : OCI_DOC_MANIFEST;
	return 0;
}

int oci_index_pick(const char *json, size_t len, const char *os, const char *arch,
		   const char *variant, struct oci_desc *out, struct moat_err *e)
{
	_cleanup_json_ json_t *j = load(json, len, "index", e);
	if (!j)
		return -1;
	if (schema2(j, "index", e) < 0)
		return -1;
	json_t *ms = json_object_get(j, "manifests");
	if (!json_is_array(ms))
		return bad(e, "index", "no manifests array");
	size_t n = json_array_size(ms);
	if (n > OCI_MAX_MANIFESTS)
		return bad(e, "index", "more than 1024 manifests");
	char seen[400] = "";
	size_t used = 0, unplatformed = 0;
	struct oci_desc lone = {0};
	for (size_t i = 0; i < n; i++) {
		json_t *m = json_array_get(ms, i);
		struct oci_desc d;
		if (oci_desc_parse(m, "index", true, &d, e) < 0)
			return -1;
		enum oci_doc k;
		if (kind_of(d.media_type, &k) < 0 || k != OCI_DOC_MANIFEST)
			continue; /* nested indexes, attestations of other types: not images */
		json_t *p = json_object_get(m, "platform");
		if (!p) {
			if (unplatformed++ == 0)
				lone = d;
			continue;
		}
		bool err = false;
		const char *pos = json_is_object(p) ? str_member(p, "os", 64, &err) : NULL;
		const char *parch = json_is_object(p) ? str_member(p, "architecture", 64, &err) : NULL;
		const char *pvar = json_is_object(p) ? str_member(p, "variant", 64, &err) : NULL;
		if (err || !json_is_object(p))
			return bad(e, "index", "a platform is not {os, architecture[, variant]}");
		if (pos && parch && strcmp(pos, os) == 0 && strcmp(parch, arch) == 0 &&
		    (!variant || !pvar || strcmp(pvar, variant) == 0)) {
			*out = d;
			return 0;
		}
		if (used < sizeof seen - 1) {
			int w = snprintf(seen + used, sizeof seen - used, "%s%s/%s%s%s", used ? ", " : "",
					 pos ? pos : "?", parch ? parch : "?", pvar ? "/" : "",
					 pvar ? pvar : "");
			used = w > 0 ? used + (size_t)w : used;
			if (used >= sizeof seen)
				used = sizeof seen - 1;
		}
	}
	/* an index without platforms (an OCI layout's index.json) with one image */
	if (unplatformed == 1 && used == 0) {
		*out = lone;
		return 0;
	}
	char m[600];
	snprintf(m, sizeof m, "no image for %s/%s%s%s (there are: %s)", os, arch, variant ? "/" : "",
		 variant ? variant : "", used ? seen : "none");
	moat_err_set(e, MOAT_E_USAGE, 0, "index: %s", m);
	if (e)
		e->errnum = ENOENT;
	return -1;
}

static bool layer_type_ok(const char *mt)
{
	static const char *ok[] = {
		"application/vnd.oci.image.layer.v1.tar",
		"application/vnd.oci.image.layer.v1.tar+gzip",
		"application/vnd.oci.image.layer.v1.tar+zstd",
		"application/vnd.docker.image.rootfs.diff.tar.gzip",
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (strcmp(mt, ok[i]) == 0)
			return true;
	return false;
}

int oci_manifest_parse(const char *json, size_t len, struct oci_manifest *m, struct moat_err *e)
{
	memset(m, 0, sizeof *m);
	_cleanup_json_ json_t *j = load(json, len, "manifest", e);
	if (!j)
		return -1;
	json_t *sv = json_object_get(j, "schemaVersion");
	if (!json_is_integer(sv) || json_integer_value(sv) != 2)
		return bad(e, "manifest",
			   "schemaVersion is not 2 (Docker schema 1 manifests are not supported)");
	bool err = false;
	const char *mt = str_member(j, "mediaType", 255, &err);
	if (err || (mt && strcmp(mt, OCI_MT_MANIFEST) != 0 && strcmp(mt, DOCKER_MT_MANIFEST) != 0))
		return bad(e, "manifest", "media type \"%.200s\" is not an image manifest",
			   mt ? mt : "(not a string)");
	if (oci_desc_parse(json_object_get(j, "config"), "manifest: config", true, &m->config,
			   e) < 0)
		return -1;
	if (strcmp(m->config.media_type, OCI_MT_CONFIG) != 0 &&
	    strcmp(m->config.media_type, DOCKER_MT_CONFIG) != 0)
		return bad(e, "manifest",
			   "config media type \"%.200s\" is not an image config (an artifact?)",
			   m->config.media_type);
	json_t *ls = json_object_get(j, "layers");
	if (!json_is_array(ls))
		return bad(e, "manifest", "no layers array");
	if (json_array_size(ls) > OCI_MAX_LAYERS)
		return bad(e, "manifest", "more than 128 layers");
	for (size_t i = 0; i < json_array_size(ls); i++) {
		struct oci_desc *d = &m->layers[i];
		if (oci_desc_parse(json_array_get(ls, i), "manifest: layer", true, d, e) < 0)
			return -1;
		if (!layer_type_ok(d->media_type)) {
			char w[128];
			snprintf(w, sizeof w, "manifest: layer %s", d->digest);
			return bad(e, w,
				   "media type \"%.200s\" refused (only tar, tar+gzip, tar+zstd; "
				   "foreign layers are not fetched)",
				   d->media_type);
		}
		m->nlayers++;
	}
	return 0;
}

/* A vector of strings (Env, Cmd, Entrypoint): NULL when absent or null. */
static int vec_member(json_t *o, const char *k, char ***out, struct moat_err *e)
{
	*out = NULL;
	json_t *v = json_object_get(o, k);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) > OCI_MAX_VEC)
		return bad(e, "image config", "%s is not an array of at most 4096 strings", k);
	size_t n = json_array_size(v);
	char **r = calloc(n + 1, sizeof *r);
	if (!r)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "image config");
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_array_get(v, i);
		if (!json_is_string(s) || strlen(json_string_value(s)) != json_string_length(s) ||
		    json_string_length(s) > OCI_MAX_STR) {
			for (size_t k2 = 0; k2 < i; k2++)
				free(r[k2]);
			free(r);
			return bad(e, "image config", "%s holds a non-string or a string with NUL", k);
		}
		r[i] = strdup(json_string_value(s));
		if (!r[i]) {
			for (size_t k2 = 0; k2 < i; k2++)
				free(r[k2]);
			free(r);
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "image config");
		}
	}
	*out = r;
	return 0;
}

static int str_dup_member(json_t *o, const char *k, char **out, struct moat_err *e)
{
	bool err = false;
	const char *s = str_member(o, k, 4096, &err);
	if (err)
		return bad(e, "image config", "%s is not a string (at most 4096 bytes, no NUL)", k);
	*out = NULL;
	if (s && !(*out = strdup(s)))
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "image config");
	return 0;
}

int oci_config_parse(const char *json, size_t len, struct oci_config *c, struct moat_err *e)
{
	memset(c, 0, sizeof *c);
	_cleanup_json_ json_t *j = load(json, len, "image config", e);
	if (!j)
		return -1;
	bool err = false;
	const char *os = str_member(j, "os", sizeof c->os - 1, &err);
	const char *arch = str_member(j, "architecture", sizeof c->arch - 1, &err);
	if (err)
		return bad(e, "image config", "os / architecture not short strings");
	snprintf(c->os, sizeof c->os, "%s", os ? os : "");
	snprintf(c->arch, sizeof c->arch, "%s", arch ? arch : "");
	json_t *rootfs = json_object_get(j, "rootfs");
	json_t *ids = json_is_object(rootfs) ? json_object_get(rootfs, "diff_ids") : NULL;
	const char *type = json_is_object(rootfs) ? str_member(rootfs, "type", 32, &err) : NULL;
	if (!json_is_array(ids) || err || !type || strcmp(type, "layers") != 0)
		return bad(e, "image config", "no rootfs {type: \"layers\", diff_ids: [...]}");
	if (json_array_size(ids) > OCI_MAX_LAYERS)
		return bad(e, "image config", "more than 128 diff_ids");
	for (size_t i = 0; i < json_array_size(ids); i++) {
		json_t *d = json_array_get(ids, i);
		if (!json_is_string(d) || !oci_digest_valid(json_string_value(d)))
			return bad(e, "image config", "a diff_id is not sha256:<64 lowercase hex>");
		memcpy(c->diff_ids[i], json_string_value(d), OCI_DIGEST_LEN + 1);
		c->ndiff++;
	}
	json_t *cfg = json_object_get(j, "config");
	if (!cfg || json_is_null(cfg))
		return 0;
	if (!json_is_object(cfg))
		return bad(e, "image config", "config is not an object");
	if (vec_member(cfg, "Env", &c->env, e) < 0 || vec_member(cfg, "Entrypoint", &c->entrypoint, e) < 0 ||
	    vec_member(cfg, "Cmd", &c->cmd, e) < 0 || str_dup_member(cfg, "WorkingDir", &c->workdir, e) < 0 ||
	    str_dup_member(cfg, "User", &c->user, e) < 0) {
		oci_config_free(c);
		return -1;
	}
	return 0;
}

static void vec_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

void oci_config_free(struct oci_config *c)
{
	vec_free(c->env);
	vec_free(c->entrypoint);
	vec_free(c->cmd);
	free(c->workdir);
	free(c->user);
	c->env = c->entrypoint = c->cmd = NULL;
	c->workdir = c->user = NULL;
}

void oci_host_platform(const char **os, const char **arch, const char **variant)
{
	*os = "linux";
	*variant = NULL;
#if defined(__x86_64__)
	*arch = "amd64";
#elif defined(__aarch64__)
	*arch = "arm64";
#elif defined(__arm__)
	*arch = "arm";
	*variant = "v7";
#elif defined(__i386__)
	*arch = "386";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	*arch = "ppc64le";
#elif defined(__s390x__)
	*arch = "s390x";
#elif defined(__riscv) && __riscv_xlen == 64
	*arch = "riscv64";
#else
	*arch = "unknown";
#endif
}

/* (image.h) */
void oci_image_free(struct oci_image *im)
{
	oci_config_free(&im->config);
}
