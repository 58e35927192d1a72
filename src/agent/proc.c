/* Processes of a served sandbox: start (pipes or a pseudo-terminal), keep
 * their output until the daemon reads it, feed stdin, signal, time out,
 * reap. A "wait" is answered when the process has ended, when output is
 * there (until "output"), or at its deadline (a yield). See agent.h. */
#define _GNU_SOURCE
#include "agent.h"
#include "users.h"
#include "resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define MAX_PROCS 256
#define MAX_WAITS 512
#define DEFAULT_MAX_OUT (1u << 20)
#define HARD_MAX_OUT (64u << 20)


struct obuf {
	char *p;
	size_t len, cap;
	size_t delivered; /* bytes already handed to the daemon */
};

struct proc {
	int id; /* 0 = free slot */
	pid_t pid;
	int out_fd, err_fd, in_fd; /* -1 when closed */
	bool tty;
	struct obuf out, err, in; /* in: bytes not yet written to stdin */
	bool close_in;            /* close stdin once `in` is written */
	size_t max_out;           /* per stream, from exec */
	bool cap_total;           /* max_out bounds the whole run (an exec
				   * answered once or streamed), not each read */
	size_t out_total, err_total;
	bool truncated;
	bool exited;
	int status;
	int64_t started, ended, deadline; /* deadline: 0 = none */
	bool timed_out;
	bool forget;              /* nobody will read its end: drop at exit */
	json_t *cmd;
	json_t *info;             /* what ps shows besides: tag, cwd, env */
	/* The last call answered "still running": a cancel of that call can
	 * cross its answer (a streaming client hung up meanwhile), and must
	 * still end the process that nobody will read. */
	const struct agent_conn *ans_conn;
	json_int_t ans_call;
};

struct wait {
	bool used;
	struct agent_req r;
	int id;
	int64_t deadline; /* 0 = none */
	bool until_output;
};

static struct proc procs[MAX_PROCS];
static struct wait waits[MAX_WAITS];
static int next_id = 1;

static struct proc *find(int id)
{
	for (int i = 0; id > 0 && i < MAX_PROCS; i++)
		if (procs[i].id == id)
			return &procs[i];
	return NULL;
}

size_t proc_running(void)
{
	size_t n = 0;
	for (int i = 0; i < MAX_PROCS; i++)
		n += procs[i].id && !procs[i].exited;
	return n;
}

static void closefd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void proc_free(struct proc *p)
{
	closefd(&p->out_fd);
	closefd(&p->err_fd);
	closefd(&p->in_fd);
	free(p->out.p);
	free(p->err.p);
	free(p->in.p);
	json_decref(p->cmd);
	json_decref(p->info);
	memset(p, 0, sizeof *p);
	p->out_fd = p->err_fd = p->in_fd = -1;
}

static void keep(struct proc *p, struct obuf *b, size_t *total, const char *data, size_t n)
{
	*total += n;
	size_t used = b->len + (p->cap_total ? b->delivered : 0);
	size_t room = used < p->max_out ? p->max_out - used : 0;
	if (n > room) {
		/* Beyond the limit output is dropped (and said so), but the
		 * process keeps running: a pipe we stop reading would block it. */
		p->truncated = true;
		n = room;
	}
	if (!n)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		char *nb = realloc(b->p, cap);
		if (!nb) {
			p->truncated = true;
			return;
		}
		b->p = nb;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void drain(struct proc *p, int *fd, struct obuf *b, size_t *total)
{
	char buf[65536];
	while (*fd >= 0) {
		ssize_t n = read(*fd, buf, sizeof buf);
		if (n > 0) {
			keep(p, b, total, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		closefd(fd); /* EOF, or EIO: a pty whose last writer closed */
	}
}

static void feed_stdin(struct proc *p)
{
	while (p->in_fd >= 0 && p->in.len) {
		ssize_t n = write(p->in_fd, p->in.p, p->in.len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				p->in.len = 0;
				if (!p->tty)
					closefd(&p->in_fd);
			}
			break;
		}
		memmove(p->in.p, p->in.p + n, p->in.len - (size_t)n);
		p->in.len -= (size_t)n;
	}
	if (p->close_in && !p->in.len && p->in_fd >= 0) {
		if (p->tty) {
			/* a terminal has one descriptor for both ways: send EOF */
			ssize_t w = write(p->in_fd, "\x04", 1);
			(void)w;
			p->close_in = false;
		} else {
			closefd(&p->in_fd);
		}
	}
}

static bool done(const struct proc *p)
{
	return p->exited;
}

static bool has_output(const struct proc *p)
{
	return p->out.len || p->err.len;
}

/* Answer a wait with the output so far; drop the record once its end was
 * told. */
static void answer(struct wait *w, struct proc *p)
{
	json_t *o;
	if (done(p)) {
		int code = WIFEXITED(p->status) ? WEXITSTATUS(p->status)
						: 128 + WTERMSIG(p->status);
		o = json_pack("{s:b,s:i,s:i,s:i,s:I,s:b,s:b}", "running", 0, "process_id",
			      p->id, "exit_code", code, "signal",
			      WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0,
			      "duration_ms", (json_int_t)(p->ended - p->started), "timed_out",
			      p->timed_out, "truncated", p->truncated);
	} else {
		o = json_pack("{s:b,s:i,s:b}", "running", 1, "process_id", p->id, "truncated",
			      p->truncated);
	}
	json_object_set_new(o, "stdout_len", json_integer((json_int_t)p->out.len));
	json_object_set_new(o, "stderr_len", json_integer((json_int_t)p->err.len));
	size_t n = p->out.len + p->err.len;
	char *data = n ? malloc(n) : NULL;
	if (n && !data) {
		json_decref(o);
		agent_fail(&w->r, "internal", "out of memory");
	} else {
		if (n) {
			memcpy(data, p->out.p, p->out.len);
			memcpy(data + p->out.len, p->err.p, p->err.len);
		}
		agent_reply(&w->r, o, data, n);
		free(data);
		p->out.delivered += p->out.len;
		p->err.delivered += p->err.len;
		p->out.len = p->err.len = 0;
		/* Only a delivered end forgets the process; a reply that
		 * failed closed the connection, whose slot may serve the next
		 * daemon (its call ids start again): nothing is noted then. */
		if (agent_conn_alive(w->r.conn)) {
			if (done(p)) {
				proc_free(p);
			} else {
				p->ans_conn = w->r.conn;
				p->ans_call = w->r.id;
			}
		}
	}
	w->used = false;
}

/* Answer what can be answered now. */
static void settle(void)
{
	int64_t now = agent_now_ms();
	for (int i = 0; i < MAX_WAITS; i++) {
		struct wait *w = &waits[i];
		if (!w->used)
			continue;
		struct proc *p = find(w->id);
		if (!p) {
			agent_fail(&w->r, "not_found", "process %d is gone", w->id);
			w->used = false;
			continue;
		}
		if (done(p) || (w->until_output && has_output(p)) ||
		    (w->deadline && now >= w->deadline))
			answer(w, p);
	}
}

static char **strv_from_json(json_t *a, bool *ok)
{
	*ok = false;
	if (!json_is_array(a))
		return NULL;
	size_t n = json_array_size(a);
	char **v = calloc(n + 1, sizeof *v);
	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(a, i));
		if (!s) {
			free(v);
			return NULL;
		}
		v[i] = (char *)s;
	}
	*ok = true;
	return v;
}

static void add_wait(const struct agent_req *r, json_t *req, int id);

/* The child runs on our memory (vfork) until it execs: only system calls
 * and stack buffers in there, nothing that allocates or writes globals. */
static void say(int fd, const char *a, const char *b, const char *c)
{
	char buf[1024];
	size_t n = 0;
	const char *parts[] = {a, b, ": ", c, "\n"};
	for (size_t i = 0; i < 5; i++)
		for (const char *s = parts[i]; s && *s && n < sizeof buf; s++)
			buf[n++] = *s;
	ssize_t w = write(fd, buf, n);
	(void)w;
}

/* execve through the command's own PATH (execvp would use ours); returns
 * the errno to report. */
static int exec_path(char **argv, char **envp)
{
	const char *file = argv[0];
	if (strchr(file, '/')) {
		execve(file, argv, envp);
		return errno;
	}
	const char *path = "/usr/local/bin:/usr/bin:/bin";
	for (size_t i = 0; envp[i]; i++)
		if (!strncmp(envp[i], "PATH=", 5))
			path = envp[i] + 5;
	int seen = ENOENT;
	char buf[4096];
	size_t fl = strlen(file);
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dl = (size_t)(end - p);
		if (dl + 1 + fl + 1 <= sizeof buf) {
			if (dl)
				memcpy(buf, p, dl);
			else
				buf[dl++] = '.';
			buf[dl] = '/';
			memcpy(buf + dl + 1, file, fl + 1);
			execve(buf, argv, envp);
			if (errno == EACCES || errno == ENOEXEC || errno == EPERM)
				seen = errno;
		}
		if (!*end)
			break;
		p = end;
	}
	return seen;
}

static __attribute__((noreturn)) void child(char **argv, char **envp, const char *cwd,
					    int cwdfd, int in, int out, int err, const char *pts,
					    const struct winsize *ws, int null_in, uid_t uid)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* what the agent ignores (SIGPIPE, ...) is not the command's: execve
	 * keeps an ignored signal ignored (the vfork child has its own table) */
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			sigaction(s, &dfl, NULL);
	setsid();
	if (pts) {
		int t = open(pts, O_RDWR);
		if (t < 0)
			_exit(125);
		ioctl(t, TIOCSCTTY, 0);
		ioctl(t, TIOCSWINSZ, ws);
		in = out = err = t;
	}
	if (null_in >= 0)
		in = null_in;
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		_exit(125);
	if (agent_user_become(uid) < 0) {
		say(2, "moat: ", "cannot become user", strerror(errno));
		_exit(125);
	}
	if (fchdir(cwdfd) < 0) {
		say(2, "moat: cannot enter ", cwd, strerror(errno));
		_exit(125);
	}
	int e = exec_path(argv, envp);
	say(2, "moat: ", argv[0], e == ENOENT || e == ENOTDIR ? "command not found" : strerror(e));
	_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

#define TAG_MAX 256

/* What ps shows of an exec besides its argv ({tag?, cwd, env}); with
 * "stdin":"null", *null_in is /dev/null for the command's stdin. NULL
 * after answering a bad request. */
static json_t *exec_info(const struct agent_req *r, json_t *req, int *null_in)
{
	json_t *tag = json_object_get(req, "tag"), *in = json_object_get(req, "stdin");
	if (tag && (!json_is_string(tag) || json_string_length(tag) > TAG_MAX ||
		    strlen(json_string_value(tag)) != json_string_length(tag))) {
		agent_fail(r, "invalid_request", "tag must be a string of at most %d bytes",
			   TAG_MAX);
		return NULL;
	}
	if (in && !json_is_null(in) &&
	    !(json_is_string(in) && !strcmp(json_string_value(in), "null")) &&
	    !(json_is_string(in) && !strcmp(json_string_value(in), "pipe"))) {
		agent_fail(r, "invalid_request", "stdin must be \"null\" or \"pipe\"");
		return NULL;
	}
	if (json_is_string(in) && !strcmp(json_string_value(in), "null")) {
		/* the sandbox's own /dev/null (its /dev is the engine's) */
		*null_in = open("/dev/null", O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (*null_in < 0) {
			agent_fail(r, "internal", "/dev/null: %s", strerror(errno));
			return NULL;
		}
	}
	json_t *o = json_pack("{s:O,s:O}", "cwd", json_object_get(req, "cwd"), "env",
			      json_object_get(req, "env"));
	if (o && tag)
		json_object_set(o, "tag", tag);
	if (!o)
		agent_fail(r, "internal", "out of memory");
	return o;
}

void proc_exec(const struct agent_req *r, json_t *req, const void *data, size_t len)
{
	bool ok_argv, ok_env;
	char **argv = strv_from_json(json_object_get(req, "argv"), &ok_argv);
	char **envp = strv_from_json(json_object_get(req, "env"), &ok_env);
	const char *cwd = json_string_value(json_object_get(req, "cwd"));
	uid_t uid = agent_user_uid(req); /* users mode: root (0) or user (1000) */
	if (agent_users_on() && ok_env && !(envp = agent_user_env(envp, uid)))
		ok_env = false;
	bool tty = json_is_true(json_object_get(req, "tty"));
	bool close_in = !json_is_false(json_object_get(req, "close_stdin"));
	json_int_t timeout = json_integer_value(json_object_get(req, "timeout_ms"));
	json_int_t max_out = json_integer_value(json_object_get(req, "max_output_bytes"));
	json_int_t cols = json_integer_value(json_object_get(req, "cols"));
	json_int_t rows = json_integer_value(json_object_get(req, "rows"));
	struct proc *p = NULL;
	int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, master = -1, cwdfd = -1;
	char pts[128] = "";
	int null_in = -1;
	json_t *info = NULL;
	if (!ok_argv || !ok_env || !argv[0] || !cwd) {
		agent_fail(r, "invalid_request", "exec needs argv, env and cwd");
		goto out;
	}
	if (!(info = exec_info(r, req, &null_in)))
		goto out;
	/* resolved like every API path (resolve.h: no magic link, no kernel
	 * filesystem), entered by descriptor */
	struct fsr cw;
	if (fsr_walk(FSR_ROOT, cwd, FSR_FOLLOW, &cw) < 0 ||
	    (cwdfd = openat(cw.dir, cw.name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    fsr_refused(cwdfd)) {
		int e = cwdfd >= 0 ? EXDEV : errno;
		fsr_done(&cw);
		if (e == EXDEV || e == ELOOP)
			agent_fail(r, "invalid_path", "cwd %s: outside the sandbox's files", cwd);
		else
			agent_fail(r, "invalid_request", "cwd %s: %s", cwd,
				   e == ENOTDIR ? "not a directory" : strerror(e));
		goto out;
	}
	fsr_done(&cw);
	for (int i = 0; i < MAX_PROCS && !p; i++)
		if (!procs[i].id)
			p = &procs[i];
	if (!p) {
		agent_fail(r, "limit_reached", "too many processes (%d)", MAX_PROCS);
		goto out;
	}
	struct winsize ws = {.ws_col = cols > 0 && cols < 10000 ? (unsigned short)cols : 80,
			     .ws_row = rows > 0 && rows < 10000 ? (unsigned short)rows : 24};
	if (tty) {
		master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
		    ptsname_r(master, pts, sizeof pts) != 0) {
			agent_fail(r, "internal", "pseudo-terminal: %s", strerror(errno));
			goto out;
		}
		ioctl(master, TIOCSWINSZ, &ws);
	} else if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
		   pipe2(err, O_CLOEXEC) < 0) {
		agent_fail(r, "internal", "pipe: %s", strerror(errno));
		goto out;
	}
	/* vfork: no copy of our page tables per command; we wait the few
	 * microseconds until it has exec'd */
	pid_t pid = vfork();
	if (pid < 0) {
		agent_fail(r, errno == EAGAIN ? "limit_reached" : "internal", "fork: %s",
			   strerror(errno));
		goto out;
	}
	if (pid == 0)
		child(argv, envp, cwd, cwdfd, in[0], out[1], err[1], tty ? pts : NULL, &ws,
		      null_in, uid);
	memset(p, 0, sizeof *p);
	p->id = next_id++;
	if (next_id > 1000000000)
		next_id = 1;
	p->pid = pid;
	p->tty = tty;
	p->started = agent_now_ms();
	p->deadline = timeout > 0 ? p->started + timeout : 0;
	p->max_out = max_out > 0 && max_out <= HARD_MAX_OUT ? (size_t)max_out : DEFAULT_MAX_OUT;
	p->cmd = json_incref(json_object_get(req, "argv"));
	p->cap_total = json_is_true(json_object_get(req, "cap_total"));
	p->info = info;
	info = NULL;
	if (tty) {
		p->out_fd = master;
		p->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
		p->err_fd = -1;
		master = -1;
	} else {
		p->in_fd = in[1];
		p->out_fd = out[0];
		p->err_fd = err[0];
		in[1] = out[0] = err[0] = -1;
	}
	if (null_in >= 0) /* stdin is /dev/null: nothing to feed */
		closefd(&p->in_fd);
	for (int *fd = &p->out_fd; fd <= &p->in_fd; fd++)
		if (*fd >= 0)
			fcntl(*fd, F_SETFL, O_NONBLOCK);
	if (len) {
		p->in.p = malloc(len);
		if (p->in.p) {
			memcpy(p->in.p, data, len);
			p->in.len = p->in.cap = len;
		}
	}
	p->close_in = close_in;
	feed_stdin(p);
	/* exec and wait in one message: one round trip less per command */
	json_t *w = json_object_get(req, "wait");
	if (json_is_object(w))
		add_wait(r, w, p->id);
	else
		agent_reply(r, json_pack("{s:i}", "process_id", p->id), NULL, 0);
out:
	for (int i = 0; i < 2; i++) {
		closefd(&in[i]);
		closefd(&out[i]);
		closefd(&err[i]);
	}
	closefd(&master);
	closefd(&cwdfd);
	closefd(&null_in);
	json_decref(info);
	free(argv);
	free(envp);
}

/* Wait for process id as asked by w (timeout_ms, until). */
static void add_wait(const struct agent_req *r, json_t *req, int id)
{
	json_int_t t = json_integer_value(json_object_get(req, "timeout_ms"));
	const char *until = json_string_value(json_object_get(req, "until"));
	struct proc *p = find(id);
	if (!p) {
		agent_fail(r, "not_found", "no process %d", id);
		return;
	}
	struct wait *w = NULL;
	for (int i = 0; i < MAX_WAITS && !w; i++)
		if (!waits[i].used)
			w = &waits[i];
	if (!w) {
		agent_fail(r, "limit_reached", "too many waits");
		return;
	}
	*w = (struct wait){.used = true, .r = *r, .id = id,
			   .deadline = t > 0 ? agent_now_ms() + t : 0,
			   .until_output = until && !strcmp(until, "output")};
	/* until "now": answer at once with what there is */
	if (until && !strcmp(until, "now"))
		w->deadline = agent_now_ms();
	settle();
}

void proc_wait(const struct agent_req *r, json_t *req)
{
	add_wait(r, req, (int)json_integer_value(json_object_get(req, "process_id")));
}

void proc_stdin(const struct agent_req *r, json_t *req, const void *data, size_t len)
{
	int id = (int)json_integer_value(json_object_get(req, "process_id"));
	struct proc *p = find(id);
	if (!p) {
		agent_fail(r, "not_found", "no process %d", id);
		return;
	}
	if (len && (p->exited || p->in_fd < 0)) {
		agent_fail(r, "conflict", "process %d does not take input any more", id);
		return;
	}
	if (len) {
		if (p->in.len + len > (64u << 20)) {
			agent_fail(r, "too_large", "too much pending input");
			return;
		}
		char *nb = realloc(p->in.p, p->in.len + len);
		if (!nb) {
			agent_fail(r, "internal", "out of memory");
			return;
		}
		memcpy(nb + p->in.len, data, len);
		p->in.p = nb;
		p->in.len += len;
	}
	if (json_is_true(json_object_get(req, "close")))
		p->close_in = true;
	feed_stdin(p);
	agent_reply(r, json_object(), NULL, 0);
}

static int signum(const char *s)
{
	static const struct {
		const char *n;
		int s;
	} t[] = {{"TERM", SIGTERM}, {"KILL", SIGKILL}, {"INT", SIGINT},   {"HUP", SIGHUP},
		 {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"STOP", SIGSTOP},
		 {"CONT", SIGCONT}, {"WINCH", SIGWINCH}, {"ALRM", SIGALRM}};
	if (!strncmp(s, "SIG", 3))
		s += 3;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(s, t[i].n))
			return t[i].s;
	char *end;
	long v = strtol(s, &end, 10);
	return (*s && !*end && v > 0 && v < 65) ? (int)v : -1;
}

void proc_signal(const struct agent_req *r, json_t *req)
{
	int id = (int)json_integer_value(json_object_get(req, "process_id"));
	const char *s = json_string_value(json_object_get(req, "signal"));
	int sig = signum(s ? s : "KILL");
	struct proc *p = find(id);
	if (!p) {
		agent_fail(r, "not_found", "no process %d", id);
		return;
	}
	if (sig < 0) {
		agent_fail(r, "invalid_request", "unknown signal %.32s", s);
		return;
	}
	if (json_is_true(json_object_get(req, "forget"))) {
		if (p->exited) {
			proc_free(p);
			agent_reply(r, json_object(), NULL, 0);
			return;
		}
		p->forget = true;
	}
	if (p->exited) {
		agent_fail(r, "conflict", "process %d has ended", id);
		return;
	}
	/* the whole process group: what the command started goes too */
	if (kill(-p->pid, sig) < 0)
		kill(p->pid, sig);
	agent_reply(r, json_object(), NULL, 0);
}

void proc_list(const struct agent_req *r)
{
	json_t *a = json_array();
	for (int i = 0; i < MAX_PROCS; i++) {
		struct proc *p = &procs[i];
		if (!p->id)
			continue;
		json_t *o = json_pack("{s:i,s:O,s:b,s:b}", "process_id", p->id, "cmd", p->cmd,
				      "running", !p->exited, "tty", p->tty);
		if (p->info)
			json_object_update(o, p->info);
		if (p->exited)
			json_object_set_new(o, "exit_code",
					    json_integer(WIFEXITED(p->status)
							     ? WEXITSTATUS(p->status)
							     : 128 + WTERMSIG(p->status)));
		json_array_append_new(a, o);
	}
	agent_reply(r, json_pack("{s:o}", "processes", a), NULL, 0);
}

void proc_resize(const struct agent_req *r, json_t *req)
{
	int id = (int)json_integer_value(json_object_get(req, "process_id"));
	json_int_t cols = json_integer_value(json_object_get(req, "cols"));
	json_int_t rows = json_integer_value(json_object_get(req, "rows"));
	struct proc *p = find(id);
	if (!p) {
		agent_fail(r, "not_found", "no process %d", id);
		return;
	}
	if (cols < 1 || cols > 9999 || rows < 1 || rows > 9999) {
		agent_fail(r, "invalid_request", "cols and rows must be 1 to 9999");
		return;
	}
	int fd = p->out_fd >= 0 ? p->out_fd : p->in_fd;
	if (!p->tty || p->exited || fd < 0) {
		agent_fail(r, "conflict", "process %d %s", id,
			   !p->tty ? "has no terminal" : "has ended");
		return;
	}
	/* on the master: the kernel sends SIGWINCH to the terminal's
	 * foreground process group when the size changes (tty_do_resize) */
	struct winsize ws = {.ws_col = (unsigned short)cols, .ws_row = (unsigned short)rows};
	if (ioctl(fd, TIOCSWINSZ, &ws) < 0) {
		agent_fail(r, "internal", "resize: %s", strerror(errno));
		return;
	}
	agent_reply(r, json_object(), NULL, 0);
}

size_t proc_pollfds(struct pollfd *pfd, size_t cap)
{
	size_t n = 0;
	for (int i = 0; i < MAX_PROCS && n + 3 <= cap; i++) {
		struct proc *p = &procs[i];
		if (!p->id)
			continue;
		if (p->out_fd >= 0)
			pfd[n++] = (struct pollfd){.fd = p->out_fd, .events = POLLIN};
		if (p->err_fd >= 0)
			pfd[n++] = (struct pollfd){.fd = p->err_fd, .events = POLLIN};
		if (p->in_fd >= 0 && p->in.len)
			pfd[n++] = (struct pollfd){.fd = p->in_fd, .events = POLLOUT};
	}
	return n;
}

void proc_events(const struct pollfd *pfd, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		if (!pfd[k].revents)
			continue;
		for (int i = 0; i < MAX_PROCS; i++) {
			struct proc *p = &procs[i];
			if (!p->id)
				continue;
			if (pfd[k].fd == p->out_fd && !(pfd[k].events & POLLOUT))
				drain(p, &p->out_fd, &p->out, &p->out_total);
			else if (pfd[k].fd == p->err_fd)
				drain(p, &p->err_fd, &p->err, &p->err_total);
			else if (pfd[k].fd == p->in_fd && (pfd[k].events & POLLOUT))
				feed_stdin(p);
		}
	}
	settle();
}

void proc_reap(void)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0)
			break;
		for (int i = 0; i < MAX_PROCS; i++) {
			struct proc *p = &procs[i];
			if (!p->id || p->pid != pid || p->exited)
				continue;
			/* What it wrote before exiting is in the pipe: take it.
			 * A background child still holding the pipe does not hold
			 * the answer back. */
			drain(p, &p->out_fd, &p->out, &p->out_total);
			drain(p, &p->err_fd, &p->err, &p->err_total);
			closefd(&p->out_fd);
			closefd(&p->err_fd);
			closefd(&p->in_fd);
			p->exited = true;
			p->status = status;
			p->ended = agent_now_ms();
			if (p->forget)
				proc_free(p);
		}
	}
	settle();
}

int proc_next_timeout(void)
{
	int64_t now = agent_now_ms(), next = -1;
	for (int i = 0; i < MAX_PROCS; i++)
		if (procs[i].id && !procs[i].exited && procs[i].deadline &&
		    (next < 0 || procs[i].deadline < next))
			next = procs[i].deadline;
	for (int i = 0; i < MAX_WAITS; i++)
		if (waits[i].used && waits[i].deadline && (next < 0 || waits[i].deadline < next))
			next = waits[i].deadline;
	if (next < 0)
		return -1;
	return next <= now ? 0 : (int)(next - now > 1000000 ? 1000000 : next - now);
}

void proc_timers(void)
{
	int64_t now = agent_now_ms();
	for (int i = 0; i < MAX_PROCS; i++) {
		struct proc *p = &procs[i];
		if (p->id && !p->exited && p->deadline && now >= p->deadline && !p->timed_out) {
			p->timed_out = true;
			kill(-p->pid, SIGKILL);
			kill(p->pid, SIGKILL);
		}
	}
	settle();
}

/* A cancelled call's process: nobody will read it any more. */
static void drop(struct proc *p)
{
	if (p->exited) {
		proc_free(p);
	} else {
		p->forget = true;
		kill(-p->pid, SIGKILL);
		kill(p->pid, SIGKILL);
	}
}

void proc_cancel(const struct agent_req *r, json_t *req)
{
	json_int_t call = json_integer_value(json_object_get(req, "call"));
	/* keep: the client of a detached process left; its wait is dropped
	 * (it would take output nobody reads), the process runs on */
	bool keep = json_is_true(json_object_get(req, "keep"));
	for (int i = 0; i < MAX_WAITS; i++) {
		struct wait *w = &waits[i];
		if (!w->used || w->r.conn != r->conn || w->r.id != call)
			continue;
		w->used = false;
		struct proc *p = keep ? NULL : find(w->id);
		if (!p)
			continue;
		drop(p);
	}
	for (int i = 0; i < MAX_PROCS && !keep; i++) {
		struct proc *p = &procs[i];
		if (p->id && p->ans_conn == r->conn && p->ans_call == call)
			drop(p);
	}
	agent_reply(r, json_object(), NULL, 0);
}

void proc_conn_gone(const struct agent_conn *c)
{
	for (int i = 0; i < MAX_WAITS; i++)
		if (waits[i].used && waits[i].r.conn == c)
			waits[i].used = false;
	for (int i = 0; i < MAX_PROCS; i++)
		if (procs[i].ans_conn == c)
			procs[i].ans_conn = NULL; /* its address may come back */
}
