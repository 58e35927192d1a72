/* The browser guard (browser.h): pure string checks. */
#include "browser.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

static bool loopback_host(const char *h, size_t n)
{
	if ((n == 9 && !strncasecmp(h, "localhost", 9)) || (n == 5 && !strncmp(h, "[::1]", 5)))
		return true;
	/* 127.a.b.c, each part 0..255 */
	if (n < 9 || strncmp(h, "127.", 4))
		return false;
	int parts = 1, val = -1;
	for (size_t i = 4; i < n; i++) {
		if (h[i] == '.') {
			if (val < 0)
				return false;
			parts++;
			val = -1;
		} else if (h[i] >= '0' && h[i] <= '9') {
			val = (val < 0 ? 0 : val * 10) + (h[i] - '0');
			if (val > 255)
				return false;
		} else {
			return false;
		}
	}
	return parts == 3 && val >= 0; /* after "127." */
}

/* HOST[:PORT] and nothing else, HOST loopback or the listen host. */
static bool hostport_ok(const char *h, const char *listen_host)
{
	size_t n;
	if (*h == '[') {
		const char *close = strchr(h, ']');
		if (!close)
			return false;
		n = (size_t)(close - h) + 1;
	} else {
		n = strcspn(h, ":/?#@[]");
	}
	const char *rest = h + n;
	if (*rest == ':') { /* a port: digits only */
		size_t d = strspn(rest + 1, "0123456789");
		if (d < 1 || d > 5)
			return false;
		rest += 1 + d;
	}
	if (*rest || !n) /* no path, query or user info */
		return false;
	if (loopback_host(h, n))
		return true;
	if (!listen_host || !*listen_host)
		return false;
	/* the listen host as given: "::1" matches "[::1]" */
	size_t ln = strlen(listen_host);
	if (*h == '[')
		return n == ln + 2 && !strncasecmp(h + 1, listen_host, ln);
	return n == ln && !strncasecmp(h, listen_host, n);
}

bool browser_origin_ok(const char *origin, const char *listen_host, char *const *allowed)
{
	if (!origin)
		return true;
	for (size_t i = 0; allowed && allowed[i]; i++)
		if (!strcasecmp(origin, allowed[i]))
			return true;
	const char *h;
	if (!strncasecmp(origin, "http://", 7))
		h = origin + 7;
	else if (!strncasecmp(origin, "https://", 8))
		h = origin + 8;
	else
		return false; /* "null" (a sandboxed page, a file:), other schemes */
	return hostport_ok(h, listen_host);
}

bool browser_host_ok(const char *host, const char *listen_host)
{
	if (!host)
		return true;
	/* A page rebinding its name needs a name the attacker's DNS answers
	 * for, so one with a dot; a single label (a raw client's "Host: x",
	 * a container's service name) is no such name. */
	static const char label[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
	size_t n = strspn(host, label);
	if (n && (!host[n] || (host[n] == ':' && host[n + 1] &&
			       strspn(host + n + 1, "0123456789") == strlen(host + n + 1) &&
			       strlen(host + n + 1) <= 5)))
		return true;
	return hostport_ok(host, listen_host);
}
