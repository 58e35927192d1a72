/* A directory (an OCI layout) streamed as a tar to a pipe by a child
 * process, so that `moat image import DIR` uploads it as it is read, with
 * no temporary file and no bound on its size here (the daemon has one).
 * See image.h. */
#define _GNU_SOURCE
#include "image.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child: one message on stderr (the parent's), the exit status. */
static int child_fail(const char *dir, const char *what, const char *why)
{
	fprintf(stderr, "moat image import: %s: %s: %s\n", dir, what, why);
	return 1;
}

/* Copy the open entry's bytes from disk to w. */
static int copy_data(struct archive *disk, struct archive *w, const char *dir,
		     const char *path)
{
	char buf[65536];
	for (;;) {
		la_ssize_t n = archive_read_data(disk, buf, sizeof buf);
		if (n == 0)
			return 0;
		if (n < 0)
			return child_fail(dir, path, archive_error_string(disk));
		if (archive_write_data(w, buf, (size_t)n) != n)
			return child_fail(dir, path, archive_error_string(w));
	}
}

/* One entry: named relative to dir ("./x" -> "x"; "." itself skipped). */
static int put_entry(struct archive *disk, struct archive *w, struct archive_entry *en,
		     const char *dir)
{
	const char *p = archive_entry_pathname(en);
	if (!p)
		return child_fail(dir, "an entry", "a name libarchive cannot read");
	if (!strcmp(p, "."))
		return 0;
	char name[4096];
	snprintf(name, sizeof name, "%s", strncmp(p, "./", 2) == 0 ? p + 2 : p);
	mode_t t = archive_entry_filetype(en);
	if (t != AE_IFREG && t != AE_IFDIR && t != AE_IFLNK)
		return child_fail(dir, name, "not a file, directory or symlink");
	archive_entry_set_pathname(en, name);
	/* the daemon maps owners itself: ids of this host mean nothing there */
	archive_entry_set_uid(en, 0);
	archive_entry_set_gid(en, 0);
	archive_entry_set_uname(en, NULL);
	archive_entry_set_gname(en, NULL);
	if (archive_write_header(w, en) != ARCHIVE_OK)
		return child_fail(dir, name, archive_error_string(w));
	return t == AE_IFREG ? copy_data(disk, w, dir, name) : 0;
}

static int write_tar(const char *dir, int out)
{
	struct archive *disk = archive_read_disk_new();
	struct archive *w = archive_write_new();
	int r = 1;
	if (!disk || !w) {
		r = child_fail(dir, "libarchive", "out of memory");
		goto out;
	}
	if (chdir(dir) != 0) {
		r = child_fail(dir, "chdir", strerror(errno));
		goto out;
	}
	if (archive_read_disk_set_symlink_physical(disk) != ARCHIVE_OK ||
	    archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(w, 1) != ARCHIVE_OK ||
	    archive_write_open_fd(w, out) != ARCHIVE_OK) {
		r = child_fail(dir, "tar", archive_error_string(w));
		goto out;
	}
	if (archive_read_disk_open(disk, ".") != ARCHIVE_OK) {
		r = child_fail(dir, "open", archive_error_string(disk));
		goto out;
	}
	struct archive_entry *en = archive_entry_new();
	if (!en) {
		r = child_fail(dir, "libarchive", "out of memory");
		goto out;
	}
	for (;;) {
		archive_entry_clear(en);
		int st = archive_read_next_header2(disk, en);
		if (st == ARCHIVE_EOF) {
			r = 0;
			break;
		}
		if (st < ARCHIVE_WARN) {
			r = child_fail(dir, "reading", archive_error_string(disk));
			break;
		}
		if (archive_read_disk_descend(disk) < ARCHIVE_WARN ||
		    put_entry(disk, w, en, dir) != 0) {
			r = 1;
			break;
		}
	}
	archive_entry_free(en);
	if (r == 0 && archive_write_close(w) != ARCHIVE_OK)
		r = child_fail(dir, "tar", archive_error_string(w));
out:
	if (w)
		archive_write_free(w);
	if (disk)
		archive_read_free(disk);
	return r;
}

int tardir_start(const char *dir, int *fd, pid_t *pid, struct moat_err *e)
{
	struct stat st;
	if (stat(dir, &st) != 0)
		return moat_err_set(e, MOAT_E_USAGE, errno, "%s", dir);
	if (!S_ISDIR(st.st_mode))
		return moat_err_set(e, MOAT_E_USAGE, 0, "%s: not a directory", dir);
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "pipe");
	fflush(stderr);
	pid_t c = fork();
	if (c < 0) {
		int err = errno;
		close(p[0]);
		close(p[1]);
		return moat_err_set(e, MOAT_E_SYSTEM, err, "fork");
	}
	if (c == 0) {
		close(p[0]);
		/* the parent stopped reading (its upload failed): just end */
		signal(SIGPIPE, SIG_DFL);
		_exit(write_tar(dir, p[1]));
	}
	close(p[1]);
	*fd = p[0];
	*pid = c;
	return 0;
}

int tardir_wait(pid_t pid, const char *dir, struct moat_err *e)
{
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return moat_err_set(e, MOAT_E_SYSTEM, errno, "waiting for the tar of %s", dir);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE)
		return moat_err_set(e, MOAT_E_SYSTEM, 0, "the upload of %s stopped", dir);
	return moat_err_set(e, MOAT_E_USAGE, 0, "%s could not be read as a whole (see above)", dir);
}
