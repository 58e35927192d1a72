/* Unit tests for src/serve/job.c: forked jobs whose output reaches the
 * event loop once they exit; cancelling kills the job's process group. */
#include <criterion/criterion.h>

#include "base/util.h"
#include "serve/job.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct result {
	int calls, status;
	char *out;
	size_t len;
	struct event_base *base;
};

static void on_done(void *arg, int status, const char *out, size_t len)
{
	struct result *r = arg;
	r->calls++;
	r->status = status;
	r->out = malloc(len + 1);
	memcpy(r->out, out, len);
	r->out[len] = '\0';
	r->len = len;
	event_base_loopbreak(r->base);
}

static void run_until_done(struct result *r)
{
	struct timeval tv = {10, 0}; /* a hung job fails the test, not the run */
	event_base_loopexit(r->base, &tv);
	event_base_dispatch(r->base);
}

static int say_hello(int fd, void *arg)
{
	(void)arg;
	return moat_write_all(fd, "hello", 5);
}

static int fail_job(int fd, void *arg)
{
	(void)fd;
	(void)arg;
	return -1;
}

static int big_output(int fd, void *arg)
{
	size_t n = *(size_t *)arg;
	char *b = malloc(n);
	for (size_t i = 0; i < n; i++)
		b[i] = (char)('a' + i % 26);
	int rc = moat_write_all(fd, b, n);
	free(b);
	return rc;
}

/* Starts a grandchild that writes its pid and sleeps, then sleeps too. */
static int sleeper(int fd, void *arg)
{
	(void)arg;
	pid_t g = fork();
	if (g == 0) {
		execlp("sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	char line[32];
	int n = snprintf(line, sizeof line, "%d\n", (int)g);
	moat_write_all(fd, line, (size_t)n);
	sleep(30);
	return 0;
}

static bool alive(pid_t pid)
{
	char path[64], st[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(st, 1, sizeof st - 1, f);
	fclose(f);
	st[n] = '\0';
	const char *close = strrchr(st, ')');
	return close && close[1] == ' ' && close[2] != 'Z';
}

Test(job, output_and_status_reach_the_loop)
{
	struct result r = {.base = event_base_new()};
	struct job *j = job_start(r.base, say_hello, NULL, on_done, &r);
	cr_assert_not_null(j);
	run_until_done(&r);
	cr_assert_eq(r.calls, 1);
	cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %d", r.status);
	cr_assert_str_eq(r.out, "hello");
	free(r.out);
	event_base_free(r.base);
}

Test(job, failure_is_the_exit_status)
{
	struct result r = {.base = event_base_new()};
	cr_assert_not_null(job_start(r.base, fail_job, NULL, on_done, &r));
	run_until_done(&r);
	cr_assert_eq(r.calls, 1);
	cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1, "status %d", r.status);
	cr_assert_eq(r.len, 0);
	free(r.out);
	event_base_free(r.base);
}

Test(job, large_output_arrives_whole)
{
	struct result r = {.base = event_base_new()};
	size_t n = 5u << 20; /* more than a pipe holds: the loop must keep reading */
	cr_assert_not_null(job_start(r.base, big_output, &n, on_done, &r));
	run_until_done(&r);
	cr_assert_eq(r.calls, 1);
	cr_assert_eq(r.len, n);
	for (size_t i = 0; i < n; i += 4099)
		cr_assert_eq(r.out[i], (char)('a' + i % 26), "byte %zu", i);
	free(r.out);
	event_base_free(r.base);
}

static void read_grandchild(void *arg, int status, const char *out, size_t len)
{
	(void)arg;
	(void)status;
	(void)out;
	(void)len;
	cr_assert_fail("a cancelled job must not call back");
}

Test(job, cancel_kills_the_process_group_without_a_callback)
{
	struct event_base *base = event_base_new();
	struct job *j = job_start(base, sleeper, NULL, read_grandchild, NULL);
	cr_assert_not_null(j);
	/* the grandchild's pid comes first on the pipe: read it raw from /proc
	 * instead (the job owns the pipe): find our children's children */
	pid_t grandchild = 0;
	for (int i = 0; i < 200 && !grandchild; i++) {
		char path[64], buf[256] = "";
		snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)getpid(),
			 (int)getpid());
		FILE *f = fopen(path, "r");
		int child = 0;
		if (f && fscanf(f, "%d", &child) == 1) {
			fclose(f);
			f = NULL;
			snprintf(path, sizeof path, "/proc/%d/task/%d/children", child, child);
			FILE *g = fopen(path, "r");
			if (g && fgets(buf, sizeof buf, g))
				grandchild = (pid_t)atoi(buf);
			if (g)
				fclose(g);
		}
		if (f)
			fclose(f);
		if (!grandchild)
			usleep(10000);
	}
	cr_assert(grandchild > 0, "the job's own child never started");
	cr_assert(alive(grandchild));
	job_cancel(j);
	for (int i = 0; i < 200 && alive(grandchild); i++)
		usleep(10000);
	cr_assert(!alive(grandchild), "pid %d outlived its cancelled job", (int)grandchild);
	/* nothing left to call back: the loop has no events */
	cr_assert_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
	event_base_free(base);
}

Test(job, cancel_all_at_exit)
{
	struct event_base *base = event_base_new();
	for (int i = 0; i < 3; i++)
		cr_assert_not_null(job_start(base, sleeper, NULL, read_grandchild, NULL));
	job_cancel_all();
	cr_assert_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
	/* every job's child was reaped: no child of ours is left */
	cr_assert_eq(waitpid(-1, NULL, WNOHANG), -1);
	cr_assert_eq(errno, ECHILD);
	event_base_free(base);
}
