/* Destination policy for the egress gateway: see policy.h. */
#include "gate/policy.h"

#include "base/util.h"
#include "gate/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest input worth looking at: a maximal name with "*.", a trailing dot
 * and a port, or a pin with several bracketed IPv6 addresses. */
#define SPEC_MAX 1024

/* ---- names ------------------------------------------------------------- */

/* Validate a DNS name of n bytes (one trailing dot allowed) and write it
 * lower-cased, without the dot, to out. Returns NULL or what is wrong. */
static const char *name_canon(const char *s, size_t n,
			      char out[GATE_NAME_MAX + 1])
{
	if (n > 0 && s[n - 1] == '.')
		n--;
	if (n == 0)
		return "empty name";
	if (n > GATE_NAME_MAX)
		return "name longer than 253 bytes";
	size_t label = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c == '.') {
			if (label == 0)
				return "empty label";
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			   c == '-' || c == '_') {
			if (++label > 63)
				return "label longer than 63 bytes";
		} else if (c == '*') {
			return "'*' is only allowed as a whole leading \"*.\" label";
		} else {
			return "invalid character in name";
		}
		out[i] = c;
	}
	if (label == 0)
		return "empty label";
	out[n] = '\0';
	return NULL;
}

/* Does the last label look like a number (decimal, or 0x hex)? Resolvers
 * and URL parsers read such names as IPv4 ("127.1", "0x7f.1"), so they are
 * never treated as names. */
static bool last_label_numeric(const char *name)
{
	const char *l = strrchr(name, '.');
	l = l ? l + 1 : name;
	if (l[0] == '0' && l[1] == 'x') {
		for (l += 2; *l; l++)
			if (!((*l >= '0' && *l <= '9') || (*l >= 'a' && *l <= 'f')))
				return false;
		return true;
	}
	for (; *l; l++)
		if (*l < '0' || *l > '9')
			return false;
	return true;
}

/* ---- addresses --------------------------------------------------------- */

/* The bytes to match an address by: IPv4-mapped IPv6 becomes IPv4 (the
 * same destination). Returns the family, or 0 for a non-IP sockaddr. */
static int addr_key(const struct sockaddr *sa, uint8_t key[16])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (sa->sa_family == AF_INET) {
		memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return AF_INET;
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		if (memcmp(a, mapped, 12) == 0) {
			memcpy(key, a + 12, 4);
			return AF_INET;
		}
		memcpy(key, a, 16);
		return AF_INET6;
	}
	return 0;
}

static bool prefix_covers(const uint8_t *net, unsigned prefix,
			  const uint8_t *a)
{
	unsigned full = prefix / 8, rest = prefix % 8;
	if (memcmp(net, a, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (net[full] & mask) == (a[full] & mask);
}

/* ---- patterns ---------------------------------------------------------- */

/* Decimal 1..65535 without sign or leading zero. */
static bool port_parse(const char *s, size_t n, uint16_t *out)
{
	if (n == 0 || n > 5 || s[0] == '0')
		return false;
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535)
		return false;
	*out = (uint16_t)v;
	return true;
}

/* An address with an optional "/len", n bytes, no brackets or port. */
static const char *net_parse(const char *s, size_t n, struct gate_rule *r)
{
	char buf[INET6_ADDRSTRLEN + 8];
	if (n >= sizeof buf)
		return "not an IP address or CIDR";
	memcpy(buf, s, n);
	buf[n] = '\0';
	char *slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	struct sockaddr_storage ss;
	if (buf[0] == '[' || !gate_addr_parse(buf, &ss))
		return "not an IP address or CIDR";
	r->family = addr_key((struct sockaddr *)&ss, r->net);
	unsigned max = r->family == AF_INET ? 32 : 128;
	/* "::ffff:10.0.0.0/104" is 10.0.0.0/8 */
	unsigned shift = (ss.ss_family == AF_INET6 && r->family == AF_INET) ? 96 : 0;
	r->prefix = max;
	if (slash) {
		const char *d = slash + 1;
		size_t dl = strlen(d);
		if (dl == 0 || dl > 3 || (d[0] == '0' && dl > 1))
			return "bad prefix length";
		unsigned v = 0;
		for (size_t i = 0; i < dl; i++) {
			if (d[i] < '0' || d[i] > '9')
				return "bad prefix length";
			v = v * 10 + (unsigned)(d[i] - '0');
		}
		if (v > max + shift)
			return "prefix length out of range";
		if (v < shift)
			return "an IPv4-mapped prefix must be /96 or longer";
		r->prefix = v - shift;
	}
	uint8_t masked[16];
	memset(masked, 0, sizeof masked);
	memcpy(masked, r->net, r->prefix / 8);
	if (r->prefix % 8)
		masked[r->prefix / 8] =
			(uint8_t)(r->net[r->prefix / 8] & (0xff << (8 - r->prefix % 8)));
	if (memcmp(masked, r->net, max / 8) != 0)
		return "host bits set after the prefix length";
	r->kind = GATE_RULE_NET;
	return NULL;
}

static void rule_text(struct gate_rule *r)
{
	char a[INET6_ADDRSTRLEN], len[8] = "", port[8] = "";
	if (r->port)
		snprintf(port, sizeof port, ":%u", r->port);
	switch (r->kind) {
	case GATE_RULE_NAME:
		snprintf(r->text, sizeof r->text, "%s%s", r->name, port);
		break;
	case GATE_RULE_SUFFIX:
		snprintf(r->text, sizeof r->text, "*.%s%s", r->name, port);
		break;
	case GATE_RULE_NET:
		inet_ntop(r->family, r->net, a, sizeof a);
		if (r->prefix != (r->family == AF_INET ? 32u : 128u))
			snprintf(len, sizeof len, "/%u", r->prefix);
		if (r->family == AF_INET6 && r->port)
			snprintf(r->text, sizeof r->text, "[%s%s]%s", a, len, port);
		else
			snprintf(r->text, sizeof r->text, "%s%s%s", a, len, port);
		break;
	}
}

static const char *rule_parse(const char *s, size_t n, struct gate_rule *r)
{
	memset(r, 0, sizeof *r);
	if (n == 0)
		return "empty pattern";
	if (s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close)
			return "missing ']'";
		size_t inner = (size_t)(close - s - 1), rest = n - inner - 2;
		uint16_t port = 0;
		if (rest > 0 && close[1] != ':')
			return "junk after ']'";
		if (rest > 0 && !port_parse(close + 2, rest - 1, &port))
			return "bad port (1-65535)";
		if (!memchr(s + 1, ':', inner))
			return "brackets are for IPv6 addresses";
		const char *err = net_parse(s + 1, inner, r);
		r->port = port;
		return err;
	}
	const char *colon = memchr(s, ':', n);
	const char *slash = memchr(s, '/', n);
	if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - s))) {
		/* Two colons: bare IPv6 (a port would need brackets). */
		const char *err = net_parse(s, n, r);
		if (err && slash && memchr(slash, ':', n - (size_t)(slash - s)))
			return "an IPv6 pattern with a port needs brackets, as in [fd00::/8]:443";
		return err;
	}
	size_t body = n;
	if (colon) {
		body = (size_t)(colon - s);
		if (!port_parse(colon + 1, n - body - 1, &r->port))
			return "bad port (1-65535)";
	}
	uint16_t port = r->port;
	if (slash) {
		const char *err = net_parse(s, body, r);
		r->port = port;
		return err;
	}
	if (body >= 2 && s[0] == '*' && s[1] == '.') {
		r->kind = GATE_RULE_SUFFIX;
		const char *err = name_canon(s + 2, body - 2, r->name);
		if (err)
			return err;
		if (last_label_numeric(r->name))
			return "a wildcard needs a name, not an address";
		return NULL;
	}
	const char *err = name_canon(s, body, r->name);
	if (err)
		return err;
	if (last_label_numeric(r->name)) {
		/* Must then be an address; a trailing dot is not allowed. */
		err = net_parse(s, body, r);
		r->port = port;
		return err ? "not a valid IPv4 address" : NULL;
	}
	r->kind = GATE_RULE_NAME;
	return NULL;
}

int gate_rule_parse(const char *pattern, struct gate_rule *out,
		    struct moat_err *e)
{
	char shown[MOAT_SHOWN_CAP];
	size_t n = strnlen(pattern, SPEC_MAX + 1);
	struct gate_rule r;
	const char *err = n > SPEC_MAX ? "too long" : rule_parse(pattern, n, &r);
	if (err)
		return moat_err_set(e, MOAT_E_USAGE, 0, "pattern \"%s\": %s",
				    moat_show(shown, pattern, n), err);
	rule_text(&r);
	*out = r;
	return 0;
}

/* ---- the policy -------------------------------------------------------- */

const char *const gate_proxy_env[][2] = {
	{"HTTP_PROXY", "http://127.0.0.1:3128"},  {"HTTPS_PROXY", "http://127.0.0.1:3128"},
	{"ALL_PROXY", "socks5h://127.0.0.1:1080"}, {"NO_PROXY", "localhost,127.0.0.1,::1"},
	{"http_proxy", "http://127.0.0.1:3128"},  {"https_proxy", "http://127.0.0.1:3128"},
	{"all_proxy", "socks5h://127.0.0.1:1080"}, {"no_proxy", "localhost,127.0.0.1,::1"},
	{NULL, NULL}};

const char *const gate_bundle_env[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
				       "GIT_SSL_CAINFO", NULL};

void gate_policy_init(struct gate_policy *p)
{
	memset(p, 0, sizeof *p);
}

void gate_policy_free(struct gate_policy *p)
{
	free(p->allow);
	free(p->deny);
	free(p->pins);
	memset(p, 0, sizeof *p);
}

/* Room for element n of size sz in arr: capacities are powers of two, so
 * the array is reallocated when n is one. Returns the array, or NULL. */
static void *grow(void *arr, size_t n, size_t sz)
{
	if (n != 0 && (n & (n - 1)) != 0)
		return arr;
	size_t cap = n ? n * 2 : 1;
	if (cap > SIZE_MAX / sz)
		return NULL;
	return realloc(arr, cap * sz);
}

static int add_rule(struct gate_rule **list, size_t *n, const char *pattern,
		    struct moat_err *e)
{
	struct gate_rule r;
	if (gate_rule_parse(pattern, &r, e) < 0)
		return -1;
	struct gate_rule *l = grow(*list, *n, sizeof r);
	if (!l)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "policy");
	*list = l;
	l[(*n)++] = r;
	return 0;
}

int gate_policy_add_allow(struct gate_policy *p, const char *pattern,
			  struct moat_err *e)
{
	return add_rule(&p->allow, &p->n_allow, pattern, e);
}

int gate_policy_add_deny(struct gate_policy *p, const char *pattern,
			 struct moat_err *e)
{
	return add_rule(&p->deny, &p->n_deny, pattern, e);
}

static const char *pin_parse(const char *s, size_t n, struct gate_pin *pin)
{
	memset(pin, 0, sizeof *pin);
	const char *colon = memchr(s, ':', n);
	if (!colon)
		return "expected HOST[:PORT]:ADDR";
	const char *err = name_canon(s, (size_t)(colon - s), pin->host);
	if (err)
		return err;
	if (last_label_numeric(pin->host))
		return "HOST must be a name, not an address";
	const char *p = colon + 1, *end = s + n;
	size_t digits = 0;
	while (p + digits < end && p[digits] >= '0' && p[digits] <= '9')
		digits++;
	if (digits > 0 && p + digits < end && p[digits] == ':') {
		if (!port_parse(p, digits, &pin->port))
			return "bad port (1-65535)";
		p += digits + 1;
	}
	for (;;) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *stop = comma ? comma : end;
		size_t len = (size_t)(stop - p);
		char buf[INET6_ADDRSTRLEN + 2];
		if (len == 0)
			return "empty address";
		if (p[0] != '[' && memchr(p, ':', len))
			return "an IPv6 address needs brackets, as in [::1]";
		if (len >= sizeof buf)
			return "not an IP address";
		memcpy(buf, p, len);
		buf[len] = '\0';
		if (pin->n == GATE_PIN_ADDRS)
			return "too many addresses";
		if (!gate_addr_parse(buf, &pin->addr[pin->n]) ||
		    (p[0] == '[' && pin->addr[pin->n].ss_family != AF_INET6))
			return "not an IP address";
		pin->n++;
		if (!comma)
			return NULL;
		p = comma + 1;
	}
}

int gate_policy_add_pin(struct gate_policy *p, const char *spec,
			struct moat_err *e)
{
	char shown[MOAT_SHOWN_CAP];
	size_t n = strnlen(spec, SPEC_MAX + 1);
	struct gate_pin pin;
	const char *err = n > SPEC_MAX ? "too long" : pin_parse(spec, n, &pin);
	if (err)
		return moat_err_set(e, MOAT_E_USAGE, 0, "resolve \"%s\": %s",
				    moat_show(shown, spec, n), err);
	struct gate_pin *l = grow(p->pins, p->n_pins, sizeof pin);
	if (!l)
		return moat_err_set(e, MOAT_E_SYSTEM, ENOMEM, "policy");
	p->pins = l;
	l[p->n_pins++] = pin;
	return 0;
}

/* ---- decisions --------------------------------------------------------- */

/* A destination as the rules see it. */
struct dest {
	int family;                     /* 0: a name */
	uint8_t key[16];
	char name[GATE_NAME_MAX + 1];
	size_t len;
};

static const char *dest_parse(const char *host, struct dest *d)
{
	size_t n = strnlen(host, SPEC_MAX + 1);
	struct sockaddr_storage ss;
	memset(d, 0, sizeof *d);
	if (n <= SPEC_MAX && gate_addr_parse(host, &ss)) {
		d->family = addr_key((struct sockaddr *)&ss, d->key);
		return NULL;
	}
	if (n > SPEC_MAX)
		return "name too long";
	const char *err = name_canon(host, n, d->name);
	if (err)
		return err;
	if (last_label_numeric(d->name))
		return "numeric name that is not a dotted-quad address";
	d->len = strlen(d->name);
	return NULL;
}

static bool rule_matches(const struct gate_rule *r, const struct dest *d,
			 uint16_t port)
{
	if (r->port && r->port != port)
		return false;
	switch (r->kind) {
	case GATE_RULE_NAME:
		return d->family == 0 && strcmp(r->name, d->name) == 0;
	case GATE_RULE_SUFFIX: {
		/* strictly below: "x." + name, so "evilexample.com" and
		 * "example.com" itself do not match "*.example.com" */
		size_t rl = strlen(r->name);
		return d->family == 0 && d->len > rl + 1 &&
		       d->name[d->len - rl - 1] == '.' &&
		       strcmp(d->name + d->len - rl, r->name) == 0;
	}
	case GATE_RULE_NET:
		return d->family == r->family &&
		       prefix_covers(r->net, r->prefix, d->key);
	}
	return false;
}

static const struct gate_rule *first_match(const struct gate_rule *list,
					   size_t n, const struct dest *d,
					   uint16_t port)
{
	for (size_t i = 0; i < n; i++)
		if (rule_matches(&list[i], d, port))
			return &list[i];
	return NULL;
}

static void say(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(char *why, const char *fmt, ...)
{
	if (!why)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, GATE_WHY_CAP, fmt, ap);
	va_end(ap);
}

enum gate_verdict gate_check_name(const struct gate_policy *p,
				  const char *host, uint16_t port,
				  char why[GATE_WHY_CAP])
{
	struct dest d;
	const char *err = dest_parse(host, &d);
	if (err) {
		say(why, "invalid host: %s", err);
		return GATE_DENY;
	}
	if (port == 0) {
		say(why, "invalid port 0");
		return GATE_DENY;
	}
	const struct gate_rule *r = first_match(p->deny, p->n_deny, &d, port);
	if (r) {
		say(why, "denied by %s", r->text);
		return GATE_DENY;
	}
	r = first_match(p->allow, p->n_allow, &d, port);
	if (r) {
		say(why, "allowed by %s", r->text);
		return GATE_ALLOW;
	}
	say(why, "no allow rule matches");
	return GATE_DENY;
}

/* Are there pins for exactly this port (they then shadow port-less ones)? */
static bool pins_exact(const struct gate_policy *p, const char *name,
		       uint16_t port)
{
	for (size_t i = 0; i < p->n_pins; i++)
		if (p->pins[i].port == port && strcmp(p->pins[i].host, name) == 0)
			return true;
	return false;
}

static bool pin_applies(const struct gate_pin *pin, const char *name,
			uint16_t want_port)
{
	return pin->port == want_port && strcmp(pin->host, name) == 0;
}

size_t gate_pin_lookup(const struct gate_policy *p, const char *host,
		       uint16_t port, struct sockaddr_storage *out, size_t cap)
{
	struct dest d;
	if (dest_parse(host, &d) || d.family || port == 0)
		return 0;
	uint16_t want = pins_exact(p, d.name, port) ? port : 0;
	size_t n = 0;
	for (size_t i = 0; i < p->n_pins; i++) {
		const struct gate_pin *pin = &p->pins[i];
		if (!pin_applies(pin, d.name, want))
			continue;
		for (size_t j = 0; j < pin->n && n < cap; j++) {
			out[n] = pin->addr[j];
			if (out[n].ss_family == AF_INET)
				((struct sockaddr_in *)&out[n])->sin_port = htons(port);
			else
				((struct sockaddr_in6 *)&out[n])->sin6_port = htons(port);
			n++;
		}
	}
	return n;
}

static bool is_pinned(const struct gate_policy *p, const struct dest *d,
		      uint16_t port, int family, const uint8_t *key)
{
	if (d->family)
		return false;
	uint16_t want = pins_exact(p, d->name, port) ? port : 0;
	for (size_t i = 0; i < p->n_pins; i++) {
		const struct gate_pin *pin = &p->pins[i];
		if (!pin_applies(pin, d->name, want))
			continue;
		for (size_t j = 0; j < pin->n; j++) {
			uint8_t k[16];
			int f = addr_key((const struct sockaddr *)&pin->addr[j], k);
			if (f == family && memcmp(k, key, f == AF_INET ? 4 : 16) == 0)
				return true;
		}
	}
	return false;
}

enum gate_verdict gate_check_addr(const struct gate_policy *p,
				  const char *host, uint16_t port,
				  const struct sockaddr *sa,
				  char why[GATE_WHY_CAP])
{
	char a[GATE_ADDR_FMT_CAP];
	struct dest as;
	memset(&as, 0, sizeof as);
	as.family = sa ? addr_key(sa, as.key) : 0;
	if (!as.family) {
		say(why, "not an IP address");
		return GATE_DENY;
	}
	const struct gate_rule *r = first_match(p->deny, p->n_deny, &as, port);
	if (r) {
		say(why, "%s denied by %s", gate_addr_format(sa, false, a), r->text);
		return GATE_DENY;
	}
	const char *kind = gate_addr_special_kind(sa);
	if (!kind) {
		say(why, "public address");
		return GATE_ALLOW;
	}
	r = first_match(p->allow, p->n_allow, &as, port);
	if (r) {
		say(why, "%s (%s) allowed by %s", gate_addr_format(sa, false, a),
		    kind, r->text);
		return GATE_ALLOW;
	}
	struct dest d;
	if (host && !dest_parse(host, &d) &&
	    is_pinned(p, &d, port, as.family, as.key)) {
		say(why, "%s (%s) pinned for %s", gate_addr_format(sa, false, a),
		    kind, d.name);
		return GATE_ALLOW;
	}
	say(why, "%s is %s and not explicitly allowed",
	    gate_addr_format(sa, false, a), kind);
	return GATE_DENY;
}

const char *const gate_list_keys[GATE_LISTS] = {"allow", "deny", "resolve"};

int gate_policy_add(struct gate_policy *p, enum gate_list k, const char *rule,
		    struct moat_err *e)
{
	switch (k) {
	case GATE_LIST_ALLOW:
		return gate_policy_add_allow(p, rule, e);
	case GATE_LIST_DENY:
		return gate_policy_add_deny(p, rule, e);
	default:
		return gate_policy_add_pin(p, rule, e);
	}
}
