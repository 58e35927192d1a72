/* Prometheus counters: see metrics.h. */
#define _GNU_SOURCE
#include "metrics.h"
#include "session.h"

#include "box.h"
#include "http.h"

#include <stdio.h>
#include <stdlib.h>

static const double buckets[] = {0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,
				 0.25,  0.5,   1,     2.5,  5,     10};
#define NB (sizeof buckets / sizeof buckets[0])

static struct {
	unsigned long long requests, created, deleted, execs, exec_done;
	unsigned long long hist[NB];
	double exec_sum;
	unsigned long long bytes_out, bytes_in;
} m;

void metrics_request(void) { m.requests++; }
void metrics_created(void) { m.created++; }
void metrics_deleted(void) { m.deleted++; }
void metrics_exec_started(void) { m.execs++; }
void metrics_bytes(size_t out, size_t in)
{
	m.bytes_out += out;
	m.bytes_in += in;
}

void metrics_exec_done(int64_t ms)
{
	double s = (double)ms / 1000;
	m.exec_done++;
	m.exec_sum += s;
	for (size_t i = 0; i < NB; i++)
		if (s <= buckets[i])
			m.hist[i]++;
}

struct count_ctx {
	size_t running, stopped;
};

static void count_one(struct box *b, void *arg)
{
	struct count_ctx *c = arg;
	if (box_running(b))
		c->running++;
	else
		c->stopped++;
}

char *metrics_text(void)
{
	struct count_ctx c = {0};
	box_each(count_one, &c);
	const struct http_stats *hs = http_stats();
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	fprintf(f, "# HELP moat_sandboxes Sandboxes by state.\n# TYPE moat_sandboxes gauge\n"
		   "moat_sandboxes{state=\"running\"} %zu\nmoat_sandboxes{state=\"stopped\"} %zu\n",
		c.running, c.stopped);
	fprintf(f, "# HELP moat_sandboxes_created_total Sandboxes created.\n"
		   "# TYPE moat_sandboxes_created_total counter\nmoat_sandboxes_created_total %llu\n",
		m.created);
	fprintf(f, "# HELP moat_sandboxes_deleted_total Sandboxes deleted through the API.\n"
		   "# TYPE moat_sandboxes_deleted_total counter\nmoat_sandboxes_deleted_total %llu\n",
		m.deleted);
	fprintf(f, "# HELP moat_execs_total Processes started.\n# TYPE moat_execs_total counter\n"
		   "moat_execs_total %llu\n", m.execs);
	fprintf(f, "# HELP moat_exec_duration_seconds Time from an exec request to its answer.\n"
		   "# TYPE moat_exec_duration_seconds histogram\n");
	for (size_t i = 0; i < NB; i++)
		fprintf(f, "moat_exec_duration_seconds_bucket{le=\"%g\"} %llu\n", buckets[i],
			m.hist[i]);
	fprintf(f, "moat_exec_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
		   "moat_exec_duration_seconds_sum %.6f\nmoat_exec_duration_seconds_count %llu\n",
		m.exec_done, m.exec_sum, m.exec_done);
	fprintf(f, "# HELP moat_bytes_total Payload bytes moved (process output, files, archives).\n"
		   "# TYPE moat_bytes_total counter\nmoat_bytes_total{direction=\"in\"} %llu\n"
		   "moat_bytes_total{direction=\"out\"} %llu\n", m.bytes_in, m.bytes_out);
	fprintf(f, "# HELP moat_http_requests_total HTTP requests by status class.\n"
		   "# TYPE moat_http_requests_total counter\n");
	for (int i = 1; i <= 5; i++)
		fprintf(f, "moat_http_requests_total{code=\"%dxx\"} %llu\n", i, hs->requests[i]);
	session_metrics(f);
	fclose(f);
	return out;
}
