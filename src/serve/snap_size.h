/* A snapshot's apparent size, measured after its answer. A btrfs
 * snapshot is one ioctl whatever the workspace holds, but its size is a
 * walk of every entry (10,000 files: ~100 ms, most of the snapshot's
 * time). When nothing needs the size before the answer (no --store-max),
 * one worker thread walks snapshots/<id>/fs and the event loop writes
 * the row's size; until then the row's size is NULL ("size": null in the
 * API). A daemon killed before that finds the NULL at its next start and
 * measures again (snap_init). */
#ifndef MOAT_SERVE_SNAP_SIZE_H
#define MOAT_SERVE_SNAP_SIZE_H

#include <moat/err.h>

#include <stdbool.h>

struct event_base;

/* The loop's end of the worker (no thread until the first snap_size_later). */
int snap_size_init(struct event_base *base, struct moat_err *e);
/* Queue snapshot id (the data dir's snapshots/<id>/fs) to be measured.
 * false: not queued (queue full, no thread): the caller measures it. */
bool snap_size_later(const char *id);

#endif
