/* Counters of the daemon, rendered in Prometheus text format. */
#ifndef MOAT_SERVE_METRICS_H
#define MOAT_SERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

void metrics_request(void);
void metrics_created(void);
void metrics_deleted(void);
void metrics_exec_started(void);
void metrics_exec_done(int64_t ms);
void metrics_bytes(size_t out, size_t in);
/* malloc'd text for GET /metrics. */
char *metrics_text(void);

#endif
