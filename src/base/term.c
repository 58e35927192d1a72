/* Host terminal: see term.h. */
#define _GNU_SOURCE
#include "term.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved;
static int saved_fd = -1; /* set only once the raw state is in place */

void moat_term_restore(void)
{
	int fd = saved_fd;
	if (fd < 0)
		return;
	saved_fd = -1;
	/* TCSAFLUSH would drop what the user typed after the sandbox ended;
	 * TCSADRAIN lets pending output reach the screen first. */
	while (tcsetattr(fd, TCSADRAIN, &saved) < 0 && errno == EINTR)
		;
}

int moat_term_raw(int fd, struct moat_err *e)
{
	static bool registered;
	struct termios t;
	if (tcgetattr(fd, &t) < 0)
		return moat_err_set(e, MOAT_E_SYSTEM, errno, "terminal: tcgetattr");
	saved = t;
	cfmakeraw(&t);
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	if (!registered) {
		if (atexit(moat_term_restore) != 0)
			return moat_err_set(e, MOAT_E_SYSTEM, 0, "terminal: atexit");
		registered = true;
	}
	saved_fd = fd;
	if (tcsetattr(fd, TCSADRAIN, &t) < 0) {
		int err = errno;
		saved_fd = -1;
		return moat_err_set(e, MOAT_E_SYSTEM, err, "terminal: raw mode");
	}
	return 0;
}

bool moat_term_size(int fd, unsigned short *cols, unsigned short *rows)
{
	struct winsize ws;
	if (ioctl(fd, TIOCGWINSZ, &ws) < 0 || ws.ws_col == 0 || ws.ws_row == 0)
		return false;
	*cols = ws.ws_col;
	*rows = ws.ws_row;
	return true;
}

void moat_term_set_size(int fd, unsigned short cols, unsigned short rows)
{
	struct winsize ws = {.ws_row = rows, .ws_col = cols};
	(void)ioctl(fd, TIOCSWINSZ, &ws);
}
