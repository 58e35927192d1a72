/* A snapshot as an OCI image archive, out and in: a computer moved to
 * another host.
 *
 * Export (GET /v1/snapshots/{sid}/export): a tar of an OCI image layout
 * (oci-layout, index.json, blobs/sha256/) holding one image: the base
 * image's config and layers (an image sandbox's), then a layer of the
 * snapshot's fs/upper (the root filesystem's changes; overlay whiteouts
 * as OCI .wh. entries), then a layer with the workspace under
 * workspace/. A host sandbox's: the workspace layer only. The manifest's
 * annotations say what it is: io.moat.snapshot "1", .id, .base ("host" or
 * the base manifest's digest), .base_layers, .limits. The two layers are
 * packed (src/oci/pack.c) on a thread into snapshots/.export-<random>/ (a
 * private blob store; the base's blobs hard-linked in), then the tar is
 * written into a pipe the event loop sends on as a chunked reply, one
 * chunk in flight (nothing is built in memory). The directory is removed
 * at the end, failed or not; a killed daemon's is swept at its start.
 * A failure before the first byte is a JSON error; after it the
 * connection is cut (the client sees a truncated reply).
 *
 * Import (POST /v1/snapshots/import, body: that archive, ?name=): the
 * archive goes into the image store as the image localhost/snapshot:<id>
 * (swept at a start when no snapshot <id> was recorded; an export names
 * itself localhost/moat-export:<name or id> for a plain image import)
 * (images_import: digests checked, nothing stored when it fails), its
 * annotations are checked, and a snapshot is made whose workspace is a
 * copy of the workspace layer. An image sandbox's snapshot keeps that
 * image (its layers carry the base and the root filesystem's changes) as
 * its image; a host one's image is removed again. Anything refused
 * removes what the import added. */
#ifndef MOAT_SERVE_SNAP_IO_H
#define MOAT_SERVE_SNAP_IO_H

#include <event2/http.h>

/* GET /v1/snapshots/{sid}/export */
void snap_io_export(struct evhttp_request *req, const char *ref);
/* POST /v1/snapshots/import */
void snap_io_import(struct evhttp_request *req);
/* At a start, after images_init: the images of imports a killed daemon
 * left without their snapshot (localhost/snapshot:<id>, no such id) go. */
void snap_io_sweep(void);

#endif
