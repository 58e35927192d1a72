/* Round-trip timer for bench/serve.py: a minimal HTTP/1.1 client on one
 * keep-alive loopback connection (TCP_NODELAY, each request in one write),
 * so that what is timed is the daemon and the sandbox, not a client
 * library (Python's http.client adds about a millisecond per exec here).
 *
 *   rtt PORT get PATH N          N x GET PATH
 *   rtt PORT exec SID N          N x POST /v1/sandboxes/SID/exec {"cmd":["true"]}
 *   rtt PORT tti N PAUSE_MS      N x (POST /v1/sandboxes {} then exec `true`
 *                                in it); DELETE and the pause off the clock
 *   rtt spawn N PATH             N x posix_spawn + waitpid of PATH (the floor)
 *
 * Prints one sample per line in nanoseconds (tti: "total create first").
 * Exits 1 with a message on any unexpected answer. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char buf[1 << 20];
static size_t blen;

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("rtt: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int dial(int port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("connect 127.0.0.1:%d: %s", port, strerror(errno));
	int one = 1;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return s;
}

/* One request, its whole answer read; returns the status, body in buf. */
static int call(int s, const char *method, const char *path, const char *body,
		const char **out)
{
	char req[4096];
	size_t bl = body ? strlen(body) : 0;
	int n = snprintf(req, sizeof req,
			 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %zu\r\n\r\n%s",
			 method, path, body ? "Content-Type: application/json\r\n" : "", bl,
			 body ? body : "");
	if (n < 0 || (size_t)n >= sizeof req)
		die("request too long");
	if (write(s, req, (size_t)n) != n)
		die("write: %s", strerror(errno));
	blen = 0;
	for (;;) {
		if (blen == sizeof buf - 1)
			die("answer over %zu bytes", sizeof buf);
		ssize_t r = read(s, buf + blen, sizeof buf - 1 - blen);
		if (r <= 0)
			die("connection closed by the daemon");
		blen += (size_t)r;
		buf[blen] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		if (!end)
			continue;
		const char *cl = strcasestr(buf, "\r\nContent-Length:");
		size_t want = cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0;
		if (blen >= (size_t)(end + 4 - buf) + want) {
			*out = end + 4;
			return atoi(buf + 9);
		}
	}
}

static void expect(int got, int want, const char *what, const char *body)
{
	if (got != want)
		die("%s: HTTP %d: %.300s", what, got, body);
}

static void exec_true(int s, const char *sid)
{
	char path[256];
	const char *body = NULL;
	snprintf(path, sizeof path, "/v1/sandboxes/%s/exec", sid);
	int st = call(s, "POST", path, "{\"cmd\":[\"true\"]}", &body);
	expect(st, 200, "exec", body);
	if (!strstr(body, "\"exit_code\":0"))
		die("exec true: %.300s", body);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "spawn")) {
		int n = atoi(argv[2]);
		char *av[] = {argv[3], NULL};
		for (int i = 0; i < n; i++) {
			int64_t t0 = now_ns();
			pid_t p;
			int st;
			if (posix_spawn(&p, argv[3], NULL, NULL, av, environ) != 0 ||
			    waitpid(p, &st, 0) != p || st != 0)
				die("spawn %s failed", argv[3]);
			printf("%lld\n", (long long)(now_ns() - t0));
		}
		return 0;
	}
	if (argc != 5)
		die("usage: rtt PORT get PATH N | exec SID N | tti N PAUSE_MS; rtt spawn N PATH");
	int s = dial(atoi(argv[1]));
	const char *mode = argv[2], *body = NULL;
	if (!strcmp(mode, "get") || !strcmp(mode, "exec")) {
		int n = atoi(argv[4]);
		for (int i = 0; i < n; i++) {
			int64_t t0 = now_ns();
			if (mode[0] == 'g') {
				int st = call(s, "GET", argv[3], NULL, &body);
				expect(st, 200, argv[3], body);
			} else {
				exec_true(s, argv[3]);
			}
			printf("%lld\n", (long long)(now_ns() - t0));
		}
	} else if (!strcmp(mode, "tti")) {
		int n = atoi(argv[3]), pause_ms = atoi(argv[4]);
		for (int i = 0; i < n; i++) {
			if (pause_ms > 0)
				usleep((useconds_t)pause_ms * 1000);
			int64_t t0 = now_ns();
			int st = call(s, "POST", "/v1/sandboxes", "{}", &body);
			expect(st, 201, "create", body);
			int64_t t1 = now_ns();
			const char *id = strstr(body, "\"id\":\"");
			char sid[64];
			if (!id || sscanf(id + 6, "%63[a-z0-9]", sid) != 1)
				die("create: no id in %.300s", body);
			exec_true(s, sid);
			int64_t t2 = now_ns();
			printf("%lld %lld %lld\n", (long long)(t2 - t0), (long long)(t1 - t0),
			       (long long)(t2 - t1));
			char path[256];
			snprintf(path, sizeof path, "/v1/sandboxes/%s", sid);
			st = call(s, "DELETE", path, NULL, &body);
			expect(st, 204, "delete", body);
		}
	} else {
		die("unknown mode %s", mode);
	}
	return 0;
}
