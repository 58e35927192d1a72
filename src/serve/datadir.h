/* moat serve's default data directory (when --data is not given). */
#ifndef MOAT_SERVE_DATADIR_H
#define MOAT_SERVE_DATADIR_H

#include <moat/err.h>

#include <stddef.h>
#include <sys/types.h>

/* Where a daemon of user euid keeps its state, from its environment (getenv
 * is passed so that the unit tests choose it): $STATE_DIRECTORY (what
 * systemd's StateDirectory= sets; its first entry), else /var/lib/moat for
 * root, else $XDG_STATE_HOME/moat (an absolute one; the XDG spec ignores a
 * relative one), else $HOME/.local/state/moat. Fills out (cap bytes) and
 * returns 0, or -1 when none applies or it does not fit. */
int serve_default_data_dir(uid_t euid, const char *(*env)(const char *name), char *out,
			   size_t cap, struct moat_err *e);

#endif
