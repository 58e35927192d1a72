/* STUB (issue 14): replaced by the control plane's door. */
#include "cp.h"

int cp_init(struct event_base *base, struct moat_err *e) { return 0; }
void cp_shutdown(void) {}
const char *cp_url(void) { return "http://127.0.0.1:7878"; }
