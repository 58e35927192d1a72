/* Import of OCI layouts, OCI archives and docker save tars; export: see
 * layout.h.
 *
 * A source is a directory (members opened with openat2 RESOLVE_BENEATH)
 * or a tar read twice: the first pass keeps the small members (the JSON
 * documents) and notes every name and link; the image is chosen and the
 * blobs it needs listed from those; the second pass streams the needed
 * members into the store. Every blob goes through oci_blob_begin with the
 * digest it must have (a docker save layer's is computed as it is copied)
 * and the image manifest is stored last. */
#define _GNU_SOURCE
#include "layout.h"

#include "blobs.h"
#include "layout_json.h"
#include "tarname.h"

#include "base/cleanup.h"

#include <archive.h>
#include <archive_entry.h>
#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SMALL_MAX (4u << 20)     /* a member kept from the first pass */
#define SMALL_TOTAL (64u << 20)  /* all of them */
#define DOC_MAX (4u << 20)       /* a manifest, an index, a config */
#define MAX_MEMBERS 100000
#define COPY_BUF (1u << 20)

struct member {
	char *name;
	char *link;  /* an alias (hard or symbolic link inside), or NULL */
	int64_t size;
	char *data;  /* kept from the first pass, or NULL */
};

struct src {
	const char *path;
	int dirfd; /* a directory, or -1 for a tar */
	struct member *m;
	size_t n, cap, kept;
};

/* One blob to copy into the store. */
struct copy {
	char member[PATH_MAX]; /* resolved name in the source */
	char expect[OCI_DIGEST_LEN + 1]; /* "" to compute */
	int64_t size;
	char digest[OCI_DIGEST_LEN + 1]; /* what it was stored as */
	unsigned char magic[4];
	size_t nmagic;
	bool done, layer;
};

struct run {
	const char *root;
	int64_t left; /* store room, -1 unlimited */
	oci_progress_cb progress;
	void *arg;
	struct oci_progress p;
	unsigned char *buf;
};

static void src_free(struct src *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->m[i].name);
		free(s->m[i].link);
		free(s->m[i].data);
	}
	free(s->m);
	if (s->dirfd >= 0)
		close(s->dirfd);
}

static int open_in(int dirfd, const char *name)
{
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	long fd;
	do
		fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
	while (fd < 0 && errno == EAGAIN);
	return (int)fd;
}

/* A link's target, lexically, from the member's directory: it must stay
 * in the archive. */
static int link_target(const char *name, const char *target, bool hard, char *out, size_t cap,
		       struct moat_err *e)
{
	char joined[PATH_MAX * 2];
	if (hard || target[0] == '/') {
		if (target[0] == '/')
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "archive member \"%.200s\": a link out of the archive (%.200s)",
					    name, target);
		snprintf(joined, sizeof joined, "%s", target);
	} else {
		const char *slash = strrchr(name, '/');
		int dl = slash ? (int)(slash - name) : 0;
		snprintf(joined, sizeof joined, "%.*s%s%s", dl, name, dl ? "/" : "", target);
	}
	/* resolve "." and ".." by hand; above the top is out */
	size_t o = 0;
	char *save = NULL;
	for (char *c = strtok_r(joined, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (strcmp(c, ".") == 0)
			continue;
		if (strcmp(c, "..") == 0) {
			if (o == 0)
				return moat_err_set(e, MOAT_E_USAGE, 0,
						    "archive member \"%.200s\": a link out of the archive (%.200s)",
						    name, target);
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
			continue;
		}
		size_t l = strlen(c);
		if (o + l + 2 > cap)
			return moat_err_set(e, MOAT_E_USAGE, ENAMETOOLONG, "archive member \"%.200s\"", name);
		if (o)
			out[o++] = '/';
		memcpy(out + o, c, l);
		o += l;
	}
	out[o] = 0;
	if (!o)
		return moat_err_set(e, MOAT_E_USAGE, 0, "archive member \"%.200s\": a link to the top", name);
	return 0;
}

static struct archive *tar_open(const char *path, struct moat_err *e)
{
	struct archive *a = archive_read_new();
	if (!a) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "archive");
		return NULL;
	}
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	if (archive_read_open_filename(a, path, COPY_BUF) != ARCHIVE_OK) {
		moat_err_set(e, MOAT_E_USAGE, archive_errno(a) > 0 ? archive_errno(a) : 0, "%s: %s",
			     path, archive_error_string(a));
		archive_read_free(a);
		return NULL;
	}
	return a;
}

/* The next member of a tar and its cleaned name (PATH_MAX): 1 a member,
 * 0 the end, -1 an error (e), 2 a member whose name does not clean when
 * !strict (the caller passes it over). */
static int next_header(struct archive *a, const char *path, struct archive_entry **ae,
		       char *name, bool strict, struct moat_err *e)
{
	int r = archive_read_next_header(a, ae);
	if (r == ARCHIVE_EOF)
		return 0;
	if (r < ARCHIVE_WARN)
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s: %s", path, archive_error_string(a));
	if (oci_tar_name_clean(archive_entry_pathname(*ae), name, PATH_MAX, strict ? e : NULL) < 0)
		return strict ? moat_err_prefix(e, "%s", path) : 2;
	return 1;
}

/* The first pass over a tar: names, links, small members. */
static int tar_scan(struct src *s, struct moat_err *e)
{
	struct archive *a = tar_open(s->path, e);
	if (!a)
		return -1;
	int rc = -1;
	struct archive_entry *ae;
	for (;;) {
		char name[PATH_MAX];
		int r = next_header(a, s->path, &ae, name, true, e);
		if (r == 0)
			break;
		if (r < 0)
			goto out;
		mode_t t = archive_entry_filetype(ae);
		const char *hl = archive_entry_hardlink(ae);
		if (!hl && t == AE_IFDIR)
			continue;
		if (!hl && t != AE_IFREG && t != AE_IFLNK) {
			moat_err_set(e, MOAT_E_USAGE, 0, "%s: member \"%.200s\" is not a file", s->path,
				     name);
			goto out;
		}
		if (s->n == MAX_MEMBERS) {
			moat_err_set(e, MOAT_E_USAGE, EFBIG, "%s: too many members", s->path);
			goto out;
		}
		if (s->n == s->cap) {
			size_t cap = s->cap ? s->cap * 2 : 64;
			struct member *m = realloc(s->m, cap * sizeof *m);
			if (!m) {
				moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "archive");
				goto out;
			}
			s->m = m;
			s->cap = cap;
		}
		struct member *m = &s->m[s->n];
		memset(m, 0, sizeof *m);
		m->name = strdup(name);
		if (!m->name) {
			moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "archive");
			goto out;
		}
		s->n++;
		if (hl || t == AE_IFLNK) {
			char tgt[PATH_MAX];
			const char *raw = hl ? hl : archive_entry_symlink(ae);
			if (!raw || link_target(name, raw, hl != NULL, tgt, sizeof tgt, e) < 0) {
				if (!raw)
					moat_err_set(e, MOAT_E_USAGE, 0, "%s: member \"%.200s\": empty link",
						     s->path, name);
				goto out;
			}
			if (!(m->link = strdup(tgt))) {
				moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "archive");
				goto out;
			}
			continue;
		}
		m->size = archive_entry_size(ae);
		if (m->size < 0 || (uint64_t)m->size > SMALL_MAX || s->kept + (size_t)m->size > SMALL_TOTAL)
			continue;
		m->data = malloc((size_t)m->size + 1);
		if (!m->data) {
			moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "archive");
			goto out;
		}
		la_ssize_t got = archive_read_data(a, m->data, (size_t)m->size);
		if (got != m->size) {
			moat_err_set(e, MOAT_E_USAGE, 0, "%s: member \"%.200s\": %s", s->path, name,
				     got < 0 ? archive_error_string(a) : "short");
			goto out;
		}
		m->data[m->size] = 0;
		s->kept += (size_t)m->size;
	}
	rc = 0;
out:
	archive_read_free(a);
	return rc;
}

/* A tar member by name, through links (a few hops). */
static struct member *find(struct src *s, const char *name)
{
	char cur[PATH_MAX];
	snprintf(cur, sizeof cur, "%s", name);
	for (int hop = 0; hop < 8; hop++) {
		struct member *hit = NULL;
		for (size_t i = 0; i < s->n; i++)
			if (strcmp(s->m[i].name, cur) == 0)
				hit = &s->m[i]; /* the later one wins, as on extraction */
		if (!hit || !hit->link)
			return hit;
		snprintf(cur, sizeof cur, "%s", hit->link);
	}
	return NULL;
}

/* A small document of the source (malloc'd, NUL-terminated). */
static int read_doc(struct src *s, const char *name, char **data, size_t *len, struct moat_err *e)
{
	char clean[PATH_MAX];
	if (oci_tar_name_clean(name, clean, sizeof clean, e) < 0)
		return moat_err_prefix(e, "%s", s->path);
	if (s->dirfd < 0) {
		struct member *m = find(s, clean);
		if (!m)
			return moat_err_set(e, MOAT_E_USAGE, ENOENT, "%s: no member \"%.200s\"", s->path,
					    clean);
		if (!m->data || m->size > (int64_t)DOC_MAX)
			return moat_err_set(e, MOAT_E_USAGE, EFBIG, "%s: member \"%.200s\" too large",
					    s->path, clean);
		*data = malloc((size_t)m->size + 1);
		if (!*data)
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "archive");
		memcpy(*data, m->data, (size_t)m->size + 1);
		*len = (size_t)m->size;
		return 0;
	}
	_cleanup_close_ int fd = open_in(s->dirfd, clean);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s/%s", s->path, clean);
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)DOC_MAX)
		return moat_err_set(e, MOAT_E_USAGE, EFBIG, "%s/%s: not a file of at most %u bytes",
				    s->path, clean, DOC_MAX);
	char *d = malloc((size_t)st.st_size + 1);
	if (!d)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "archive");
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, d + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(d);
			return moat_err_set(e, MOAT_E_SYSTEM, n < 0 ? errno : EIO, "%s/%s", s->path, clean);
		}
		got += (size_t)n;
	}
	d[got] = 0;
	*data = d;
	*len = got;
	return 0;
}

static bool has(struct src *s, const char *name)
{
	if (s->dirfd < 0)
		return find(s, name) != NULL;
	struct stat st;
	return fstatat(s->dirfd, name, &st, 0) == 0;
}

/* ---- copying into the store ---------------------------------------- */

static void report(struct run *r)
{
	if (r->progress)
		r->progress(r->arg, &r->p);
}

struct sink {
	struct copy *c;
	struct oci_blob_writer *w;
};

static int sink_write(struct run *r, struct sink *k, const void *p, size_t n, struct moat_err *e)
{
	if (k->c->nmagic < sizeof k->c->magic) {
		size_t take = sizeof k->c->magic - k->c->nmagic;
		if (take > n)
			take = n;
		memcpy(k->c->magic + k->c->nmagic, p, take);
		k->c->nmagic += take;
	}
	if (oci_blob_write(k->w, p, n, e) < 0)
		return -1;
	r->p.bytes_done += (int64_t)n;
	report(r);
	return 0;
}

static int sink_begin(struct run *r, struct copy *c, struct sink *k, struct moat_err *e)
{
	k->c = c;
	r->p.current = c->expect[0] ? c->expect : NULL;
	k->w = oci_blob_begin(r->root, c->expect[0] ? c->expect : NULL, c->size, r->left, e);
	return k->w ? 0 : moat_err_prefix(e, "%s", c->member);
}

static int sink_end(struct run *r, struct sink *k, struct moat_err *e)
{
	struct oci_blob_writer *w = k->w;
	k->w = NULL;
	if (oci_blob_commit(w, k->c->digest, e) < 0)
		return moat_err_prefix(e, "%s", k->c->member);
	if (r->left >= 0)
		r->left = r->left > k->c->size ? r->left - k->c->size : 0;
	k->c->done = true;
	if (k->c->layer)
		r->p.layers_done++;
	report(r);
	return 0;
}

/* Where a copy's bytes come from: up to n into buf; 0 at the end, -1
 * with e. */
typedef ssize_t (*copy_read)(void *ctx, const struct copy *c, void *buf, size_t n,
			     struct moat_err *e);

/* One blob into the store, read through rd: the one copy loop of this file. */
static int copy_from(struct run *r, struct copy *c, copy_read rd, void *ctx, struct moat_err *e)
{
	struct sink k;
	if (sink_begin(r, c, &k, e) < 0)
		return -1;
	for (;;) {
		ssize_t n = rd(ctx, c, r->buf, COPY_BUF, e);
		if (n < 0) {
			oci_blob_abort(k.w);
			return -1;
		}
		if (n == 0)
			break;
		if (sink_write(r, &k, r->buf, (size_t)n, e) < 0) {
			oci_blob_abort(k.w);
			return moat_err_prefix(e, "%s", c->member);
		}
	}
	return sink_end(r, &k, e);
}

static ssize_t read_fd(void *ctx, const struct copy *c, void *buf, size_t n, struct moat_err *e)
{
	for (;;) {
		ssize_t got = read(*(int *)ctx, buf, n);
		if (got >= 0)
			return got;
		if (errno != EINTR)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "reading %s", c->member);
	}
}

struct mem {
	const char *p;
	size_t left;
};

static ssize_t read_mem(void *ctx, const struct copy *c, void *buf, size_t n, struct moat_err *e)
{
	struct mem *m = ctx;
	if (n > m->left)
		n = m->left;
	memcpy(buf, m->p, n);
	m->p += n;
	m->left -= n;
	return (ssize_t)n;
}

static int copy_mem(struct run *r, struct copy *c, const char *data, size_t len, struct moat_err *e)
{
	struct mem m = {data, len};
	return copy_from(r, c, read_mem, &m, e);
}

static ssize_t read_tar(void *ctx, const struct copy *c, void *buf, size_t n, struct moat_err *e)
{
	struct archive *a = ctx;
	la_ssize_t got = archive_read_data(a, buf, n);
	if (got < 0)
		return moat_err_set(e, MOAT_E_USAGE, 0, "member \"%.200s\": %s", c->member,
				    archive_error_string(a));
	return got;
}

/* Every copy of the list into the store: from a directory one by one,
 * from a tar in one more pass (kept members straight from memory). */
static int copy_all(struct run *r, struct src *s, struct copy *cs, size_t n, struct moat_err *e)
{
	size_t pending = 0;
	for (size_t i = 0; i < n; i++) {
		struct copy *c = &cs[i];
		if (c->done)
			continue;
		if (s->dirfd >= 0) {
			_cleanup_close_ int fd = open_in(s->dirfd, c->member);
			if (fd < 0)
				return moat_err_set(e, MOAT_E_USAGE, errno, "%s/%s", s->path, c->member);
			if (copy_from(r, c, read_fd, &fd, e) < 0)
				return -1;
			continue;
		}
		struct member *m = find(s, c->member);
		if (!m)
			return moat_err_set(e, MOAT_E_USAGE, ENOENT, "%s: no member \"%.200s\"", s->path,
					    c->member);
		snprintf(c->member, sizeof c->member, "%s", m->name); /* through links */
		if (m->data) {
			if (copy_mem(r, c, m->data, (size_t)m->size, e) < 0)
				return -1;
		} else
			pending++;
	}
	if (!pending)
		return 0;
	struct archive *a = tar_open(s->path, e);
	if (!a)
		return -1;
	int rc = -1;
	struct archive_entry *ae;
	while (pending) {
		char name[PATH_MAX];
		int x = next_header(a, s->path, &ae, name, false, e);
		if (x == 0)
			break;
		if (x < 0)
			goto out;
		if (x == 2 || archive_entry_hardlink(ae) || archive_entry_filetype(ae) != AE_IFREG)
			continue;
		for (size_t i = 0; i < n; i++) {
			struct copy *c = &cs[i];
			if (c->done || strcmp(c->member, name) != 0)
				continue;
			if (copy_from(r, c, read_tar, a, e) < 0) {
				moat_err_prefix(e, "%s", s->path);
				goto out;
			}
			pending--;
			/* the same member for another copy: copied again from the store is
			 * not needed; blobs are by digest, so mark equal ones done */
			for (size_t j = 0; j < n; j++)
				if (!cs[j].done && strcmp(cs[j].member, name) == 0) {
					memcpy(cs[j].digest, c->digest, sizeof c->digest);
					cs[j].done = true;
					pending--;
				}
			break;
		}
	}
	if (pending) {
		for (size_t i = 0; i < n; i++)
			if (!cs[i].done) {
				moat_err_set(e, MOAT_E_USAGE, ENOENT, "%s: member \"%.200s\" not found",
					     s->path, cs[i].member);
				break;
			}
		goto out;
	}
	rc = 0;
out:
	archive_read_free(a);
	return rc;
}

static void blob_member(const char *digest, char *out, size_t cap)
{
	snprintf(out, cap, "blobs/sha256/%s", digest + 7);
}

/* ---- the two kinds of image ---------------------------------------- */

static int finish(struct run *r, const char *mdigest, const char *mjson, size_t mlen,
		  const char *cjson, size_t clen, const char *name, struct oci_image *out,
		  struct moat_err *e)
{
	memset(out, 0, sizeof *out);
	snprintf(out->manifest, sizeof out->manifest, "%s", mdigest);
	if (oci_manifest_parse(mjson, mlen, &out->m, e) < 0)
		return moat_err_prefix(e, "import: the image manifest");
	if (oci_config_parse(cjson, clen, &out->config, e) < 0)
		return moat_err_prefix(e, "import: the image config");
	out->size = (int64_t)mlen + out->m.config.size;
	for (size_t i = 0; i < out->m.nlayers; i++)
		out->size += out->m.layers[i].size;
	snprintf(out->name, sizeof out->name, "%s", name);
	return 0;
}

static int import_oci(struct run *r, struct src *s, const char *which, struct oci_image *out,
		      struct moat_err *e)
{
	_cleanup_free_ char *lay = NULL, *idx = NULL, *mj = NULL, *cj = NULL;
	size_t ll, il, ml, cl;
	if (read_doc(s, "oci-layout", &lay, &ll, e) < 0 || oci_layout_version_check(lay, ll, e) < 0)
		return moat_err_prefix(e, "import %s", s->path);
	if (read_doc(s, "index.json", &idx, &il, e) < 0)
		return moat_err_prefix(e, "import");
	struct oci_desc d;
	char name[512];
	if (oci_layout_pick(idx, il, which, &d, name, sizeof name, e) < 0)
		return moat_err_prefix(e, "import %s", s->path);
	char member[PATH_MAX];
	/* an index in the index (a multi-platform image): the host's */
	for (int depth = 0;; depth++) {
		blob_member(d.digest, member, sizeof member);
		_cleanup_free_ char *doc = NULL;
		size_t dl;
		if (read_doc(s, member, &doc, &dl, e) < 0)
			return moat_err_prefix(e, "import");
		char got[OCI_DIGEST_LEN + 1];
		if (oci_sha256_buf(doc, dl, got) < 0 || strcmp(got, d.digest) != 0)
			return moat_err_set(e, MOAT_E_USAGE, EBADMSG,
					    "import %s: blob %s does not match its digest", s->path,
					    d.digest);
		enum oci_doc kind;
		if (oci_doc_kind(doc, dl, d.media_type[0] ? d.media_type : NULL, &kind, e) < 0)
			return moat_err_prefix(e, "import %s: %s", s->path, d.digest);
		if (kind == OCI_DOC_MANIFEST) {
			mj = steal_ptr(&doc);
			ml = dl;
			break;
		}
		if (depth == 2)
			return moat_err_set(e, MOAT_E_USAGE, EBADMSG, "import %s: indexes nested too deep",
					    s->path);
		const char *os, *arch, *variant;
		oci_host_platform(&os, &arch, &variant);
		if (oci_index_pick(doc, dl, os, arch, variant, &d, e) < 0)
			return moat_err_prefix(e, "import %s", s->path);
	}
	struct oci_manifest m;
	if (oci_manifest_parse(mj, ml, &m, e) < 0)
		return moat_err_prefix(e, "import %s: manifest %s", s->path, d.digest);
	blob_member(m.config.digest, member, sizeof member);
	if (read_doc(s, member, &cj, &cl, e) < 0)
		return moat_err_prefix(e, "import");
	_cleanup_free_ struct copy *cs = calloc(m.nlayers + 2, sizeof *cs);
	if (!cs)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "import");
	size_t n = 0;
	r->p.layers_total = m.nlayers;
	r->p.bytes_total = (int64_t)ml;
	struct oci_desc *all[OCI_MAX_LAYERS + 1];
	all[0] = &m.config;
	for (size_t i = 0; i < m.nlayers; i++)
		all[i + 1] = &m.layers[i];
	for (size_t i = 0; i <= m.nlayers; i++) {
		r->p.bytes_total += all[i]->size;
		if (oci_blob_has(r->root, all[i]->digest)) {
			if (i)
				r->p.layers_done++;
			continue;
		}
		bool dup = false;
		for (size_t j = 0; j < n; j++)
			dup |= strcmp(cs[j].expect, all[i]->digest) == 0;
		if (dup)
			continue;
		struct copy *c = &cs[n++];
		blob_member(all[i]->digest, c->member, sizeof c->member);
		snprintf(c->expect, sizeof c->expect, "%s", all[i]->digest);
		c->size = all[i]->size;
		c->layer = i > 0;
		if (!has(s, c->member))
			return moat_err_set(e, MOAT_E_USAGE, ENOENT, "import %s: blob %s is missing",
					    s->path, all[i]->digest);
	}
	if (copy_all(r, s, cs, n, e) < 0)
		return moat_err_prefix(e, "import %s", s->path);
	/* the manifest last: once it is in, so is every blob it names */
	struct copy mc = {.size = (int64_t)ml};
	snprintf(mc.member, sizeof mc.member, "%s", "manifest");
	snprintf(mc.expect, sizeof mc.expect, "%s", d.digest);
	if (copy_mem(r, &mc, mj, ml, e) < 0)
		return moat_err_prefix(e, "import %s", s->path);
	return finish(r, d.digest, mj, ml, cj, cl, which && !name[0] ? which : name, out, e);
}

static const char *layer_type(const struct copy *c)
{
	if (c->nmagic >= 2 && c->magic[0] == 0x1f && c->magic[1] == 0x8b)
		return "application/vnd.oci.image.layer.v1.tar+gzip";
	if (c->nmagic >= 4 && c->magic[0] == 0x28 && c->magic[1] == 0xb5 && c->magic[2] == 0x2f &&
	    c->magic[3] == 0xfd)
		return "application/vnd.oci.image.layer.v1.tar+zstd";
	return "application/vnd.oci.image.layer.v1.tar";
}

/* "blobs/sha256/<hex>" or "<hex>.json" name their digest. */
static void digest_from_name(const char *member, char out[OCI_DIGEST_LEN + 1])
{
	out[0] = 0;
	const char *b = strrchr(member, '/');
	b = b ? b + 1 : member;
	char d[OCI_DIGEST_LEN + 8];
	snprintf(d, sizeof d, "sha256:%.64s", b);
	if (strlen(b) >= 64 && (b[64] == 0 || strcmp(b + 64, ".json") == 0) && oci_digest_valid(d))
		snprintf(out, OCI_DIGEST_LEN + 1, "%s", d);
}

static int import_docker(struct run *r, struct src *s, const char *which, struct oci_image *out,
			 struct moat_err *e)
{
	_cleanup_free_ char *mf = NULL, *cj = NULL;
	size_t ml, cl;
	if (read_doc(s, "manifest.json", &mf, &ml, e) < 0)
		return moat_err_prefix(e, "import");
	_cleanup_free_ struct oci_docker_pick *pk = malloc(sizeof *pk);
	if (!pk)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "import");
	if (oci_docker_pick(mf, ml, which, pk, e) < 0)
		return moat_err_prefix(e, "import %s", s->path);
	if (read_doc(s, pk->config, &cj, &cl, e) < 0)
		return moat_err_prefix(e, "import");
	_cleanup_free_ struct copy *cs = calloc(pk->nlayers + 1, sizeof *cs);
	if (!cs)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "import");
	/* the config: its digest from its bytes (its name says it too) */
	struct copy *cc = &cs[0];
	snprintf(cc->member, sizeof cc->member, "%s", pk->config);
	digest_from_name(pk->config, cc->expect);
	char got[OCI_DIGEST_LEN + 1];
	if (oci_sha256_buf(cj, cl, got) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sha256");
	if (cc->expect[0] && strcmp(cc->expect, got) != 0)
		return moat_err_set(e, MOAT_E_USAGE, EBADMSG,
				    "import %s: config %s does not match its digest", s->path,
				    pk->config);
	snprintf(cc->expect, sizeof cc->expect, "%s", got);
	cc->size = (int64_t)cl;
	r->p.layers_total = pk->nlayers;
	r->p.bytes_total = (int64_t)cl;
	for (size_t i = 0; i < pk->nlayers; i++) {
		struct copy *c = &cs[i + 1];
		char clean[PATH_MAX];
		if (oci_tar_name_clean(pk->layers[i], clean, sizeof clean, e) < 0)
			return moat_err_prefix(e, "import %s: manifest.json", s->path);
		snprintf(c->member, sizeof c->member, "%s", clean);
		digest_from_name(clean, c->expect);
		c->layer = true;
		c->size = -1;
		if (s->dirfd < 0) {
			struct member *m = find(s, clean);
			if (!m)
				return moat_err_set(e, MOAT_E_USAGE, ENOENT, "import %s: no layer \"%.200s\"",
						    s->path, clean);
			c->size = m->size;
			r->p.bytes_total += m->size;
		}
	}
	if (copy_mem(r, cc, cj, cl, e) < 0 || copy_all(r, s, cs + 1, pk->nlayers, e) < 0)
		return moat_err_prefix(e, "import %s", s->path);
	/* an OCI manifest for it, stored as a blob: the image's id */
	json_t *layers = json_array();
	json_t *doc = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:o}", "schemaVersion", 2, "mediaType",
				OCI_MT_MANIFEST, "config", "mediaType", OCI_MT_CONFIG, "digest",
				cc->digest, "size", (json_int_t)cl, "layers", layers);
	if (!doc)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "import");
	for (size_t i = 0; i < pk->nlayers; i++) {
		struct copy *c = &cs[i + 1];
		struct stat st;
		char p[PATH_MAX];
		if (c->size < 0 && oci_blob_path(r->root, c->digest, p, sizeof p) == 0 &&
		    stat(p, &st) == 0)
			c->size = st.st_size;
		if (json_array_append_new(layers, json_pack("{s:s, s:s, s:I}", "mediaType",
							    layer_type(c), "digest", c->digest, "size",
							    (json_int_t)c->size)) < 0) {
			json_decref(doc);
			return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "import");
		}
	}
	_cleanup_free_ char *mj = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (!mj)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "import");
	struct copy mc = {.size = (int64_t)strlen(mj)};
	snprintf(mc.member, sizeof mc.member, "%s", "manifest");
	if (copy_mem(r, &mc, mj, strlen(mj), e) < 0)
		return moat_err_prefix(e, "import %s", s->path);
	return finish(r, mc.digest, mj, strlen(mj), cj, cl, pk->name, out, e);
}

/* A layer of a docker save tar that is itself a link to another (older
 * docker dedups that way) is found through find(); nothing else is
 * special. */
int oci_import(const char *root, const char *path, const char *which, int64_t max_bytes,
	       oci_progress_cb progress, void *arg, struct oci_image *out, struct moat_err *e)
{
	struct src s = {.path = path, .dirfd = -1};
	struct run r = {.root = root, .left = max_bytes > 0 ? max_bytes : -1, .progress = progress,
			.arg = arg};
	int rc = -1;
	/* the store is open already (oci_blobs_open): emptying its tmp/ here
	 * would remove the temp files of the caller's other jobs, and the
	 * daemon's own copy of the archive being imported */
	if (oci_blobs_ensure(root, e) < 0)
		return moat_err_prefix(e, "import");
	struct stat st;
	if (stat(path, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "import %s", path);
	if (S_ISDIR(st.st_mode)) {
		s.dirfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (s.dirfd < 0)
			return moat_err_set(e, MOAT_E_USAGE, errno, "import %s", path);
	} else if (tar_scan(&s, e) < 0) {
		moat_err_prefix(e, "import");
		goto out;
	}
	if (!(r.buf = malloc(COPY_BUF))) {
		moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "import");
		goto out;
	}
	if (has(&s, "index.json") && has(&s, "oci-layout"))
		rc = import_oci(&r, &s, which, out, e);
	else if (has(&s, "manifest.json"))
		rc = import_docker(&r, &s, which, out, e);
	else
		moat_err_set(e, MOAT_E_USAGE, EINVAL,
			     "import %s: neither an OCI layout (oci-layout, index.json) nor a docker "
			     "save archive (manifest.json)", path);
out:
	free(r.buf);
	src_free(&s);
	return rc;
}

/* ---- export -------------------------------------------------------- */

static int put_failed(struct archive *a, const char *name, struct moat_err *e)
{
	return moat_err_set(e, MOAT_E_SYSTEM, archive_errno(a) > 0 ? archive_errno(a) : EIO,
			    "export %s: %s", name, archive_error_string(a));
}

/* The header of one member: a file of size bytes (0644) or a directory. */
static int put_header(struct archive *a, const char *name, bool dir, int64_t size,
		      struct moat_err *e)
{
	struct archive_entry *ae = archive_entry_new();
	if (!ae)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "export");
	archive_entry_set_pathname(ae, name);
	archive_entry_set_filetype(ae, dir ? AE_IFDIR : AE_IFREG);
	archive_entry_set_perm(ae, dir ? 0755 : 0644);
	if (!dir)
		archive_entry_set_size(ae, (la_int64_t)size);
	int r = archive_write_header(a, ae);
	archive_entry_free(ae);
	return r < ARCHIVE_WARN ? put_failed(a, name, e) : 0;
}

static int put_file(struct archive *a, const char *name, const void *data, size_t len,
		    struct moat_err *e)
{
	if (put_header(a, name, false, (int64_t)len, e) < 0)
		return -1;
	if (len && archive_write_data(a, data, len) != (la_ssize_t)len)
		return put_failed(a, name, e);
	return 0;
}

static int put_dir(struct archive *a, const char *name, struct moat_err *e)
{
	return put_header(a, name, true, 0, e);
}

/* One blob from the store, re-hashed on the way (a blob changed on disk
 * is an error, not an export). */
static int put_blob(struct archive *a, const char *root, const char *digest, char *buf,
		    struct moat_err *e)
{
	char p[PATH_MAX], name[128];
	if (oci_blob_path(root, digest, p, sizeof p) < 0)
		return moat_err_set(e, MOAT_E_USAGE, EINVAL, "export: bad digest %s", digest);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "export: blob %s", digest);
	blob_member(digest, name, sizeof name);
	if (put_header(a, name, false, st.st_size, e) < 0)
		return -1;
	struct oci_sha256 h;
	if (oci_sha256_init(&h) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "sha256");
	off_t left = st.st_size;
	while (left > 0) {
		ssize_t n = read(fd, buf, left < (off_t)COPY_BUF ? (size_t)left : COPY_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			oci_sha256_free(&h);
			return moat_err_set(e, MOAT_E_SYSTEM, n < 0 ? errno : EIO, "export: blob %s",
					    digest);
		}
		if (oci_sha256_update(&h, buf, (size_t)n) < 0 ||
		    archive_write_data(a, buf, (size_t)n) != n) {
			oci_sha256_free(&h);
			return put_failed(a, name, e);
		}
		left -= n;
	}
	char got[OCI_DIGEST_LEN + 1];
	if (oci_sha256_final(&h, got) < 0 || strcmp(got, digest) != 0)
		return moat_err_set(e, MOAT_E_SYSTEM, EBADMSG, "export: blob %s changed on disk", digest);
	return 0;
}

int oci_export(const char *root, const char *manifest, const char *name, int fd,
	       struct moat_err *e)
{
	_cleanup_free_ char *mj = NULL;
	size_t ml;
	if (oci_blob_read(root, manifest, DOC_MAX, &mj, &ml, e) < 0)
		return moat_err_prefix(e, "export");
	struct oci_manifest m;
	if (oci_manifest_parse(mj, ml, &m, e) < 0)
		return moat_err_prefix(e, "export: manifest %s", manifest);
	char mt[128] = OCI_MT_MANIFEST;
	json_t *mdoc = json_loadb(mj, ml, 0, NULL);
	const char *v = json_string_value(json_object_get(mdoc, "mediaType"));
	if (v && strlen(v) < sizeof mt)
		snprintf(mt, sizeof mt, "%s", v);
	json_decref(mdoc);
	json_t *desc = json_pack("{s:s, s:s, s:I}", "mediaType", mt, "digest", manifest, "size",
				 (json_int_t)ml);
	if (desc && name && *name)
		json_object_set_new(desc, "annotations", json_pack("{s:s}", OCI_REF_NAME, name));
	json_t *idx = desc ? json_pack("{s:i, s:s, s:[o]}", "schemaVersion", 2, "mediaType",
				       OCI_MT_INDEX, "manifests", desc)
			   : NULL;
	_cleanup_free_ char *ij = idx ? json_dumps(idx, JSON_COMPACT) : NULL;
	json_decref(idx);
	_cleanup_free_ char *buf = malloc(COPY_BUF);
	if (!ij || !buf)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "export");
	struct archive *a = archive_write_new();
	if (!a)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "export");
	int rc = -1;
	static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_open_fd(a, fd) != ARCHIVE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, archive_errno(a) > 0 ? archive_errno(a) : 0, "export: %s",
			     archive_error_string(a));
		goto out;
	}
	if (put_file(a, "oci-layout", layout, sizeof layout - 1, e) < 0 ||
	    put_file(a, "index.json", ij, strlen(ij), e) < 0 || put_dir(a, "blobs", e) < 0 ||
	    put_dir(a, "blobs/sha256", e) < 0 || put_blob(a, root, m.config.digest, buf, e) < 0)
		goto out;
	for (size_t i = 0; i < m.nlayers; i++) {
		bool seen = strcmp(m.layers[i].digest, m.config.digest) == 0;
		for (size_t j = 0; j < i; j++)
			seen |= strcmp(m.layers[j].digest, m.layers[i].digest) == 0;
		if (!seen && put_blob(a, root, m.layers[i].digest, buf, e) < 0)
			goto out;
	}
	if (put_blob(a, root, manifest, buf, e) < 0)
		goto out;
	if (archive_write_close(a) != ARCHIVE_OK) {
		moat_err_set(e, MOAT_E_SYSTEM, archive_errno(a) > 0 ? archive_errno(a) : 0, "export: %s",
			     archive_error_string(a));
		goto out;
	}
	rc = 0;
out:
	archive_write_free(a);
	return rc;
}
