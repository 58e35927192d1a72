/* moat exec -i/-t and moat attach: the WebSocket session. See attach.h. */
#define _GNU_SOURCE
#include "attach.h"
#include "client.h"

#include "../base/cleanup.h"
#include "../base/term.h"
#include "../proto/ws.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD ((size_t)64 << 10)       /* the server's handshake answer */
#define MAX_ERROR_BODY ((size_t)1 << 20)  /* an error answer's body */
#define MAX_MESSAGE ((size_t)64 << 20)    /* one message from the server */
#define MAX_PENDING ((size_t)1 << 20)     /* unsent bytes before stdin waits */
#define CLOSE_WAIT_MS 5000                /* for the server's close after ours */

/* ---- detach keys ----------------------------------------------------------------- */

int attach_parse_keys(struct attach_opts *o, const char *spec, struct moat_err *e)
{
	o->nkeys = 0;
	const char *p = spec;
	while (*p) {
		size_t n = strcspn(p, ",");
		unsigned char k;
		if (n == 1) {
			k = (unsigned char)p[0];
		} else if (n == 6 && !strncasecmp(p, "ctrl-", 5) &&
			   (isalpha((unsigned char)p[5]) || strchr("@[\\]^_", p[5]))) {
			k = (unsigned char)(toupper((unsigned char)p[5]) & 0x1f);
		} else {
			return moat_err_set(e, MOAT_E_USAGE, 0,
					    "--detach-keys '%s': '%.*s' is not a key (a character "
					    "or ctrl-<letter>, comma-separated, e.g. ctrl-p,ctrl-q)",
					    spec, (int)n, p);
		}
		if (o->nkeys == ATTACH_MAX_KEYS)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--detach-keys '%s': at most %d keys",
					    spec, ATTACH_MAX_KEYS);
		o->keys[o->nkeys++] = k;
		p += n;
		if (*p == ',' && !*++p)
			return moat_err_set(e, MOAT_E_USAGE, 0, "--detach-keys '%s': ends with ','",
					    spec);
	}
	return 0;
}

/* ---- signals: a self-pipe ------------------------------------------------------------ */

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char c = (unsigned char)sig;
	if (write(sig_pipe[1], &c, 1) < 0) {
		/* full: a signal of the same kind is already waiting */
	}
	errno = saved;
}

static const int caught[] = {SIGWINCH, SIGTERM, SIGHUP, SIGINT, SIGQUIT};

static int catch_signals(struct moat_err *e)
{
	if (pipe2(sig_pipe, O_NONBLOCK | O_CLOEXEC) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "pipe");
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
		if (sigaction(caught[i], &sa, NULL) < 0)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "sigaction");
	signal(SIGPIPE, SIG_IGN); /* a closed stdout is an error, not a death */
	return 0;
}

static void release_signals(void)
{
	struct sigaction sa = {.sa_handler = SIG_DFL};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
		sigaction(caught[i], &sa, NULL);
	for (int i = 0; i < 2; i++)
		if (sig_pipe[i] >= 0) {
			close(sig_pipe[i]);
			sig_pipe[i] = -1;
		}
}

/* ---- the session ---------------------------------------------------------------- */

struct buf {
	uint8_t *p;
	size_t len, cap;
};

static bool buf_add(struct buf *b, const void *data, size_t n, size_t max)
{
	if (n > max || b->len > max - n)
		return false;
	if (b->len + n > b->cap) {
		size_t nc = b->cap ? b->cap : 65536;
		while (nc < b->len + n)
			nc *= 2;
		uint8_t *np = realloc(b->p, nc);
		if (!np)
			return false;
		b->p = np;
		b->cap = nc;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	return true;
}

static void buf_drop(struct buf *b, size_t n)
{
	if (!n)
		return;
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
}

struct sess {
	const char *cmd;
	const struct attach_opts *o;
	CURL *c;
	curl_socket_t sock;
	struct ws_reader rd;
	struct buf in, out;
	bool in_term;          /* stdin is a terminal */
	bool raw;              /* ... in raw mode (a tty process) */
	bool tty;              /* the process has a pty */
	bool stdin_open, sent_close, got_close, eof, detached;
	bool have_exit, timed_out, truncated;
	bool more;             /* pump_in stopped with bytes maybe still there */
	int exit_code;
	int sig;               /* the signal that ended the client */
	size_t matched;        /* detach keys typed so far (held back) */
	char err[1024];        /* the failure, said after the terminal is back */
};

static void say(struct sess *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct sess *s, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* raw mode: the terminal does not turn \n into \r\n */
	fprintf(stderr, "moat %s: %s%s", s->cmd, msg, s->raw ? "\r\n" : "\n");
}

static void fail_with(struct sess *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_with(struct sess *s, const char *fmt, ...)
{
	if (s->err[0])
		return; /* the first cause is the one to tell */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof s->err, fmt, ap);
	va_end(ap);
}

static bool send_frame(struct sess *s, int op, const void *data, size_t len)
{
	if (s->sent_close)
		return true;
	uint8_t key[4], head[WS_MAX_HEAD];
	if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key) {
		fail_with(s, "no randomness for the WebSocket mask");
		return false;
	}
	size_t hl = ws_head(head, op, len, key);
	size_t at = s->out.len;
	if (!buf_add(&s->out, head, hl, SIZE_MAX / 2) ||
	    (len && !buf_add(&s->out, data, len, SIZE_MAX / 2))) {
		fail_with(s, "out of memory");
		return false;
	}
	ws_mask(s->out.p + at + hl, len, key, 0);
	if (op == WS_CLOSE)
		s->sent_close = true;
	return true;
}

static void send_json(struct sess *s, json_t *m)
{
	char *t = m ? json_dumps(m, JSON_COMPACT) : NULL;
	json_decref(m);
	if (t)
		send_frame(s, WS_TEXT, t, strlen(t));
	free(t);
}

static void send_size(struct sess *s)
{
	unsigned short cols, rows;
	if (s->tty && (moat_term_size(STDIN_FILENO, &cols, &rows) ||
		       moat_term_size(STDOUT_FILENO, &cols, &rows)))
		send_json(s, json_pack("{s:s,s:i,s:i}", "type", "resize", "cols", cols, "rows", rows));
}

static void send_close(struct sess *s, const char *why)
{
	uint8_t p[125];
	send_frame(s, WS_CLOSE, p, ws_close_payload(p, WS_CLOSE_NORMAL, why));
}

/* Write all of it to fd (stdout or stderr, blocking). */
static bool put(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		c += w;
		n -= (size_t)w;
	}
	return true;
}

static void on_text(struct sess *s, const uint8_t *data, size_t len)
{
	json_error_t je;
	_cleanup_json_ json_t *m = json_loadb((const char *)data, len, 0, &je);
	const char *type = json_string_value(json_object_get(m, "type"));
	if (!type)
		return; /* not for us: a newer server's */
	if (!strcmp(type, "attached")) {
		s->tty = json_is_true(json_object_get(m, "tty"));
		if (s->tty && s->in_term && s->o->send_stdin && !s->raw) {
			struct moat_err e = {0};
			if (moat_term_raw(STDIN_FILENO, &e) < 0)
				fail_with(s, "%s", e.msg);
			else
				s->raw = true;
		}
		send_size(s);
	} else if (!strcmp(type, "stderr")) {
		json_t *d = json_object_get(m, "data");
		if (json_is_string(d))
			put(STDERR_FILENO, json_string_value(d), json_string_length(d));
	} else if (!strcmp(type, "exit")) {
		json_t *code = json_object_get(m, "exit_code");
		s->have_exit = json_is_integer(code);
		s->exit_code = (int)json_integer_value(code);
		s->timed_out = json_is_true(json_object_get(m, "timed_out"));
		s->truncated = json_is_true(json_object_get(m, "truncated"));
	} else if (!strcmp(type, "error")) {
		json_t *o = json_object_get(m, "error");
		const char *msg = json_string_value(json_object_get(o, "message"));
		const char *code = json_string_value(json_object_get(o, "code"));
		say(s, "%s (%s)", msg ? msg : "error", code ? code : "?");
	}
}

static void on_frames(struct sess *s)
{
	size_t off = 0;
	for (;;) {
		struct ws_event ev;
		size_t used = ws_read(&s->rd, s->in.p + off, s->in.len - off, &ev);
		if (ev.kind == WS_FAIL) {
			fail_with(s, "bad WebSocket data from the server: %s", ev.reason);
			s->eof = true;
			break;
		}
		off += used;
		if (ev.kind == WS_MESSAGE && ev.opcode == WS_BINARY) {
			if (!put(STDOUT_FILENO, ev.data, ev.len)) {
				fail_with(s, "writing the output: %s", strerror(errno));
				send_close(s, "the client's output failed");
			}
		} else if (ev.kind == WS_MESSAGE) {
			on_text(s, ev.data, ev.len);
		} else if (ev.kind == WS_CONTROL && ev.opcode == WS_PING) {
			/* a server that pings and reads nothing must not grow us:
			 * pongs wait for the backlog (RFC 6455 5.5.3 allows answering
			 * only the latest ping) */
			if (s->out.len < MAX_PENDING)
				send_frame(s, WS_PONG, ev.data, ev.len);
		} else if (ev.kind == WS_CONTROL && ev.opcode == WS_CLOSE) {
			s->got_close = true;
			if (!s->have_exit && !s->sent_close && ev.code != WS_CLOSE_NORMAL)
				fail_with(s, "the server closed the attach (%u%s%s)", ev.code,
					  ev.reason[0] ? ": " : "", ev.reason);
			send_close(s, "");
			break;
		} else if (ev.kind == WS_NEED && !used) {
			break;
		}
	}
	buf_drop(&s->in, off);
}

/* Keystrokes to the process, the detach sequence held back until it is
 * complete (then it detaches) or broken (then it goes as typed). */
static void on_keys(struct sess *s, const uint8_t *p, size_t n)
{
	if (!s->in_term || !s->o->nkeys) {
		send_frame(s, WS_BINARY, p, n);
		return;
	}
	size_t start = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != s->o->keys[s->matched]) {
			if (s->matched) {
				/* a broken sequence: what was held goes first */
				if (i > start)
					send_frame(s, WS_BINARY, p + start, i - start);
				send_frame(s, WS_BINARY, s->o->keys, s->matched);
				start = i;
				s->matched = 0;
			}
			if (p[i] != s->o->keys[0])
				continue;
		}
		if (!s->matched && i > start)
			send_frame(s, WS_BINARY, p + start, i - start);
		s->matched++;
		start = i + 1;
		if (s->matched == s->o->nkeys) {
			s->detached = true;
			s->matched = 0;
			send_close(s, "detach");
			return;
		}
	}
	if (!s->matched && n > start)
		send_frame(s, WS_BINARY, p + start, n - start);
}

static void on_stdin(struct sess *s)
{
	uint8_t b[65536];
	ssize_t n = read(STDIN_FILENO, b, sizeof b);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		s->stdin_open = false;
		send_json(s, json_pack("{s:s}", "type", "eof"));
		return;
	}
	on_keys(s, b, (size_t)n);
}

static void on_sig(struct sess *s)
{
	unsigned char c;
	while (read(sig_pipe[0], &c, 1) == 1) {
		if (c == SIGWINCH) {
			send_size(s);
			continue;
		}
		/* the client is told to go: the process stays, as on a detach */
		s->sig = c;
		send_close(s, "the client was signalled");
	}
}

/* Send what can go now. */
static void pump_out(struct sess *s)
{
	while (s->out.len) {
		size_t sent = 0;
		CURLcode rc = curl_easy_send(s->c, s->out.p, s->out.len, &sent);
		if (rc == CURLE_AGAIN)
			break;
		if (rc != CURLE_OK) {
			fail_with(s, "sending to the server: %s", curl_easy_strerror(rc));
			s->eof = true;
			s->out.len = 0;
			return;
		}
		buf_drop(&s->out, sent);
	}
}

/* Take what has come into in (until the socket has no more). */
static void pump_in(struct sess *s)
{
	/* at most MAX_PENDING a time: a fast server must let stdin, signals
	 * and the frames read so far (pongs, output) have their turn */
	size_t took = 0;
	s->more = false;
	for (;;) {
		if (took >= MAX_PENDING) {
			s->more = true;
			break;
		}
		uint8_t b[65536];
		size_t got = 0;
		CURLcode rc = curl_easy_recv(s->c, b, sizeof b, &got);
		if (rc == CURLE_AGAIN)
			break;
		if (rc != CURLE_OK || !got) {
			s->eof = true;
			break;
		}
		if (!buf_add(&s->in, b, got, MAX_MESSAGE + WS_MAX_HEAD)) {
			fail_with(s, "a message from the server is too large");
			s->eof = true;
			break;
		}
		took += got;
	}
}

/* Both ways. Bytes taken in must be read as frames before the next poll:
 * the socket will not say again that they are there. */
static void pump(struct sess *s)
{
	pump_out(s);
	pump_in(s);
}

/* A signal (a resize, most often) interrupts poll: wait on for the time
 * left; the signal waits in the self-pipe for the session loop. */
static bool wait_sock(struct sess *s, short ev, int ms)
{
	struct pollfd p = {.fd = s->sock, .events = ev};
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int r = poll(&p, 1, ms);
		if (r >= 0 || errno != EINTR)
			return r > 0;
		struct timespec t1;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		long long spent = (t1.tv_sec - t0.tv_sec) * 1000LL + (t1.tv_nsec - t0.tv_nsec) / 1000000;
		if (spent >= ms)
			return false;
		ms -= (int)spent;
		t0 = t1;
	}
}

/* The handshake; true once upgraded (leftover bytes in s->in). */
static bool handshake(struct sess *s, struct moat_http *h, const char *url)
{
	char key[25], accept[29];
	_cleanup_free_ char *host = NULL, *port = NULL, *path = NULL;
	CURLU *u = curl_url();
	bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		  curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
		  curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK;
	if (ok && curl_url_get(u, CURLUPART_PORT, &port, 0) != CURLUE_OK)
		port = NULL;
	curl_url_cleanup(u);
	if (!ok) {
		fail_with(s, "cannot parse the URL %s", url);
		return false;
	}
	if (!ws_new_key(key) || !ws_accept_key(key, accept)) {
		fail_with(s, "no randomness for the WebSocket key");
		return false;
	}
	const char *auth = moat_http_auth(h);
	_cleanup_free_ char *req = NULL;
	int n = asprintf(&req,
			 "GET %s HTTP/1.1\r\nHost: %s%s%s\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
			 "Sec-WebSocket-Version: 13\r\n%s%s\r\n",
			 path, host, port ? ":" : "", port ? port : "", key, auth ? auth : "",
			 auth ? "\r\n" : "");
	if (n < 0 || !buf_add(&s->out, req, (size_t)n, MAX_HEAD)) {
		fail_with(s, "out of memory");
		return false;
	}
	while (s->out.len && !s->eof) {
		pump(s);
		if (s->out.len)
			wait_sock(s, POLLOUT, 10000);
	}
	/* the answer's head */
	char *end = NULL;
	while (!s->eof && !(end = s->in.len ? memmem(s->in.p, s->in.len, "\r\n\r\n", 4) : NULL)) {
		if (s->in.len > MAX_HEAD) {
			fail_with(s, "the server's answer to the attach is too large");
			return false;
		}
		if (!wait_sock(s, POLLIN, 30000)) {
			fail_with(s, "no answer from %s to the attach", moat_http_url(h));
			return false;
		}
		pump(s);
	}
	if (!end) {
		fail_with(s, "%s closed the connection before answering the attach",
			  moat_http_url(h));
		return false;
	}
	size_t hl = (size_t)(end - (char *)s->in.p) + 4;
	_cleanup_free_ char *head = strndup((char *)s->in.p, hl);
	buf_drop(&s->in, hl);
	if (!head) {
		fail_with(s, "out of memory");
		return false;
	}
	int status = 0;
	if (sscanf(head, "HTTP/1.%*d %d", &status) != 1) {
		fail_with(s, "%s did not answer in HTTP", moat_http_url(h));
		return false;
	}
	if (status != 101) {
		/* an error answer: its body says why */
		const char *cl = strcasestr(head, "\r\nContent-Length:");
		size_t want = cl ? strtoul(cl + 17, NULL, 10) : MAX_ERROR_BODY;
		if (want > MAX_ERROR_BODY)
			want = MAX_ERROR_BODY;
		while (!s->eof && s->in.len < want && wait_sock(s, POLLIN, 30000))
			pump(s);
		struct moat_http_resp rs = {.status = status,
					    .body = strndup((char *)s->in.p, s->in.len),
					    .len = s->in.len};
		struct moat_err e = {0};
		if (!rs.body)
			rs.len = 0;
		moat_http_error(&rs, &e);
		free(rs.body);
		fail_with(s, "%s", e.msg);
		return false;
	}
	const char *acc = strcasestr(head, "\r\nSec-WebSocket-Accept:");
	if (acc) {
		acc += 23;
		acc += strspn(acc, " \t");
	}
	if (!acc || strncmp(acc, accept, 28) != 0) {
		fail_with(s, "the server's Sec-WebSocket-Accept is wrong: not a WebSocket answer");
		return false;
	}
	return true;
}

static int result(struct sess *s, const char *id, long long pid)
{
	moat_term_restore();
	s->raw = false;
	if (s->err[0])
		return client_fail(s->cmd, "%s", s->err);
	if (s->detached || s->sig) {
		fprintf(stderr,
			"moat %s: %s process %lld of sandbox %s, which keeps running; "
			"re-attach with: moat attach %s %lld\n",
			s->cmd, s->detached ? "detached from" : "left", pid, id, id, pid);
		return s->sig ? 128 + s->sig : 0;
	}
	if (!s->have_exit)
		return client_fail(s->cmd, "the connection ended before the process's exit status");
	if (s->timed_out)
		fprintf(stderr, "moat %s: the command timed out and was killed\n", s->cmd);
	if (s->truncated)
		fprintf(stderr, "moat %s: output was truncated by the server\n", s->cmd);
	return s->exit_code < 0 || s->exit_code > 255 ? CLIENT_FAIL : s->exit_code;
}

int attach_run(const char *cmd, struct moat_http *h, const char *id, long long pid,
	       const struct attach_opts *o)
{
	struct moat_err e = {0};
	char suffix[64];
	snprintf(suffix, sizeof suffix, "/processes/%lld/attach", pid);
	_cleanup_free_ char *path = moat_http_sandbox_path(h, id, suffix);
	_cleanup_free_ char *url = NULL;
	if (!path || asprintf(&url, "%s%s", moat_http_url(h), path) < 0)
		return client_fail(cmd, "out of memory");
	struct sess s = {.cmd = cmd, .o = o, .sock = CURL_SOCKET_BAD,
			 .rd = {.server = false, .max_message = MAX_MESSAGE},
			 .in_term = isatty(STDIN_FILENO) == 1, .stdin_open = o->send_stdin,
			 .raw = o->raw};
	char errbuf[CURL_ERROR_SIZE] = "";
	s.c = curl_easy_init();
	if (!s.c)
		return client_fail(cmd, "cannot initialise libcurl");
	CURLcode rc = moat_http_setopts(h, s.c, url, NULL, errbuf);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(s.c, CURLOPT_CONNECT_ONLY, 1L);
	if (rc == CURLE_OK)
		rc = curl_easy_perform(s.c);
	if (rc == CURLE_OK)
		rc = curl_easy_getinfo(s.c, CURLINFO_ACTIVESOCKET, &s.sock);
	if (rc != CURLE_OK) {
		curl_easy_cleanup(s.c);
		moat_term_restore();
		return client_fail(cmd, "cannot reach %s: %s", moat_http_url(h),
				   errbuf[0] ? errbuf : curl_easy_strerror(rc));
	}
	if (catch_signals(&e) < 0) {
		fail_with(&s, "%s", e.msg);
	} else if (handshake(&s, h, url)) {
		if (s.in.len)
			on_frames(&s);
		while (!s.eof && !(s.got_close && s.sent_close && !s.out.len)) {
			struct pollfd p[3] = {{.fd = s.sock, .events = POLLIN},
					      {.fd = sig_pipe[0], .events = POLLIN},
					      {.fd = -1}};
			if (s.out.len)
				p[0].events |= POLLOUT;
			if (s.stdin_open && !s.sent_close && s.out.len < MAX_PENDING)
				p[2] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
			int r = poll(p, 3, s.more ? 0 : s.sent_close ? CLOSE_WAIT_MS : -1);
			if (r < 0 && errno != EINTR) {
				fail_with(&s, "poll: %s", strerror(errno));
				break;
			}
			if (r == 0 && !s.more)
				break; /* our close was not answered: done anyway */
			if (p[1].revents)
				on_sig(&s);
			if (p[2].revents)
				on_stdin(&s);
			pump(&s);
			if (s.in.len)
				on_frames(&s);
			pump_out(&s); /* answers (pong, close) go at once */
		}
	}
	int ret = result(&s, id, pid);
	release_signals();
	curl_easy_cleanup(s.c);
	ws_reader_free(&s.rd);
	free(s.in.p);
	free(s.out.p);
	return ret;
}
