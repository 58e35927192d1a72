/* Egress gateway: destination policy. Allow/deny patterns, name pins
 * (--resolve) and the two decisions the proxy makes per connection:
 * gate_check_name() on the destination the client asked for, then
 * gate_check_addr() on each address it is about to connect to. No I/O;
 * the add functions allocate, the checks do not and only read the policy
 * (safe to share between threads once built).
 *
 * Patterns (case-insensitive; one trailing dot ignored):
 *   example.com          exactly that name
 *   *.example.com        names below it, any depth; not example.com itself
 *   NAME:443             either of the above, on that port only
 *   1.2.3.4  2001:db8::1  [2001:db8::1]        one address
 *   10.0.0.0/8  fd00::/8  [fd00::/8]           a CIDR (no host bits set)
 *   1.2.3.4:443  10.0.0.0/8:443  [::1]:443  [fd00::/8]:443   with a port
 * Names: labels of [a-z0-9-_], 1..63 bytes, at most 253 bytes in all; '*'
 * only as a whole leading "*." label; a name whose last label is numeric
 * (all digits, or 0x...) must be a valid dotted-quad IPv4 address.
 * Ports 1..65535, no leading zeros.
 *
 * Decisions: deny rules win over allow rules; no matching allow rule means
 * deny. Name rules match names only and address/CIDR rules match IP
 * literals only (IPv4-mapped IPv6 is treated as the IPv4 address). */
#ifndef MOAT_GATE_POLICY_H
#define MOAT_GATE_POLICY_H

#include <moat/err.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define GATE_NAME_MAX 253     /* a DNS name without its trailing dot */
#define GATE_RULE_TEXT 272    /* canonical rule text incl. NUL */
#define GATE_WHY_CAP 320      /* reason strings incl. NUL */
#define GATE_PIN_ADDRS 8      /* addresses in one --resolve */

enum gate_rule_kind {
	GATE_RULE_NAME,   /* exactly name */
	GATE_RULE_SUFFIX, /* strictly below name ("*.name") */
	GATE_RULE_NET,    /* an address or CIDR */
};

struct gate_rule {
	enum gate_rule_kind kind;
	uint16_t port;                 /* 0: any port */
	int family;                    /* NET: AF_INET or AF_INET6 */
	unsigned prefix;               /* NET: 0..32 / 0..128 */
	uint8_t net[16];               /* NET: network bytes (4 used for v4) */
	char name[GATE_NAME_MAX + 1];  /* NAME/SUFFIX: lower case, no "*." */
	char text[GATE_RULE_TEXT];     /* canonical form, for messages */
};

/* One --resolve HOST[:PORT]:ADDR[,ADDR...]. */
struct gate_pin {
	char host[GATE_NAME_MAX + 1];  /* lower case, no trailing dot */
	uint16_t port;                 /* 0: any port */
	size_t n;
	struct sockaddr_storage addr[GATE_PIN_ADDRS];  /* port 0 */
};

struct gate_policy {
	struct gate_rule *allow, *deny;
	size_t n_allow, n_deny;
	struct gate_pin *pins;
	size_t n_pins;
};

enum gate_verdict {
	GATE_DENY = 0,
	GATE_ALLOW = 1,
};

/* The environment of a sandbox behind the gateway, one table for moat run
 * and moat serve: the proxy variables (NAME, VALUE; NULL-terminated), and
 * the variables naming the CA bundle (the system's CAs plus the sandbox's)
 * when secrets are intercepted; NODE_EXTRA_CA_CERTS names the CA alone. */
extern const char *const gate_proxy_env[][2];
extern const char *const gate_bundle_env[];

/* Parse one pattern (see above). The error names the pattern. */
int gate_rule_parse(const char *pattern, struct gate_rule *out,
		    struct moat_err *e);

void gate_policy_init(struct gate_policy *p);
void gate_policy_free(struct gate_policy *p);

/* Add a pattern to the allow or deny list. */
int gate_policy_add_allow(struct gate_policy *p, const char *pattern,
			  struct moat_err *e);
int gate_policy_add_deny(struct gate_policy *p, const char *pattern,
			 struct moat_err *e);

/* Add a pin, curl --resolve style: HOST[:PORT]:ADDR[,ADDR...] where HOST
 * is a name (no wildcard), ADDR an IPv4 literal or a bracketed IPv6 one
 * ("[::1]"; brackets are required so that the optional port is not
 * ambiguous). Several pins for one host add up. A pin supplies addresses
 * only: the name must still be allowed. */
int gate_policy_add_pin(struct gate_policy *p, const char *spec,
			struct moat_err *e);

/* The three rule lists by index, as the JSON keys name them: the
 * configurations (moat run's policy, serve's create body, moat-gate's
 * config) all list them in this order. */
enum gate_list { GATE_LIST_ALLOW, GATE_LIST_DENY, GATE_LIST_RESOLVE, GATE_LISTS };
extern const char *const gate_list_keys[GATE_LISTS]; /* "allow", "deny", "resolve" */
int gate_policy_add(struct gate_policy *p, enum gate_list k, const char *rule,
		    struct moat_err *e);

/* May the client connect to host:port? host is a name or an IP literal
 * (IPv6 with or without brackets). Invalid names, numeric forms that are
 * not strict dotted quads ("127.1", "0x7f.1", "2130706433") and port 0 are
 * denied. When why is not NULL it receives a one-line reason such as
 * "allowed by *.example.com", "denied by evil.example.com:443",
 * "no allow rule matches". */
enum gate_verdict gate_check_name(const struct gate_policy *p,
				  const char *host, uint16_t port,
				  char why[GATE_WHY_CAP]);

/* The pinned addresses for host:port, written to out[0..cap) with their
 * port set to port. Pins made for exactly this port are used when there
 * are any, else pins made without a port. Returns how many were found (0:
 * not pinned; resolve normally), at most cap. */
size_t gate_pin_lookup(const struct gate_policy *p, const char *host,
		       uint16_t port, struct sockaddr_storage *out, size_t cap);

/* May the proxy connect to sa (resolved for, or given as, host:port)?
 * Call it for the address actually connected to, after gate_check_name()
 * allowed the name. Denied when a deny address/CIDR rule covers sa.
 * Otherwise an ordinary address is allowed; a special one (see addr.h) only
 * when an allow address/CIDR rule covers it (with a matching port, if the
 * rule has one) or it is pinned for exactly this host (gate_pin_lookup). */
enum gate_verdict gate_check_addr(const struct gate_policy *p,
				  const char *host, uint16_t port,
				  const struct sockaddr *sa,
				  char why[GATE_WHY_CAP]);

#endif
