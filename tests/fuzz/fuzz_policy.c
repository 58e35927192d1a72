/* libFuzzer target: policy patterns, pins and decisions. The input is lines:
 * "A<pattern>" allow, "D<pattern>" deny, "P<spec>" pin, anything else a
 * query "host[ port]". Checks that a rule's canonical text parses back to
 * the same rule, that every allow is justified by the rule it names
 * (checked here independently: exact name, strictly-below suffix, port),
 * that no deny name rule matches an allowed host, that case and a trailing
 * dot do not change a verdict, and that special addresses are refused
 * without an address rule. When the first byte is odd, bytes from 0xc0 up
 * stand for tokens from a table (addresses, CIDRs, wildcards, ports):
 * inet_pton is not instrumented, so the fuzzer could not find valid
 * literals on its own. */
#include "gate/addr.h"
#include "gate/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const struct gate_rule *r)
{
	struct gate_rule again;
	if (gate_rule_parse(r->text, &again, NULL) != 0)
		abort();
	if (again.kind != r->kind || again.port != r->port ||
	    strcmp(again.text, r->text) != 0)
		abort();
	if (r->kind == GATE_RULE_NET &&
	    (again.family != r->family || again.prefix != r->prefix ||
	     memcmp(again.net, r->net, 16) != 0))
		abort();
	if (r->kind != GATE_RULE_NET && strcmp(again.name, r->name) != 0)
		abort();
}

/* Lower case, one trailing dot dropped. */
static void canon(const char *host, char *out, size_t cap)
{
	size_t n = strlen(host);
	if (n >= cap)
		n = cap - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = (host[i] >= 'A' && host[i] <= 'Z') ? (char)(host[i] + 32) : host[i];
	if (n && out[n - 1] == '.')
		n--;
	out[n] = '\0';
}

/* Does name rule r match host:port? Written apart from policy.c. */
static bool name_rule_matches(const struct gate_rule *r, const char *host,
			      unsigned port)
{
	char c[1100];
	canon(host, c, sizeof c);
	if (r->port && r->port != port)
		return false;
	size_t hl = strlen(c), rl = strlen(r->name);
	if (r->kind == GATE_RULE_NAME)
		return strcmp(c, r->name) == 0;
	if (r->kind == GATE_RULE_SUFFIX)
		return hl > rl + 1 && c[hl - rl - 1] == '.' &&
		       strcmp(c + hl - rl, r->name) == 0;
	return false;
}

static void query(const struct gate_policy *p, char *line)
{
	unsigned port = 443;
	char *sp = strrchr(line, ' ');
	if (sp) {
		*sp = '\0';
		port = (unsigned)strtoul(sp + 1, NULL, 10) & 0xffff;
	}
	const char *host = line;
	char why[GATE_WHY_CAP];
	memset(why, 0, sizeof why);
	enum gate_verdict v = gate_check_name(p, host, (uint16_t)port, why);
	if (strnlen(why, sizeof why) >= sizeof why)
		abort();
	struct sockaddr_storage ss;
	bool is_ip = gate_addr_parse(host, &ss);

	if (v == GATE_ALLOW) {
		const char *pre = "allowed by ";
		if (strncmp(why, pre, strlen(pre)) != 0)
			abort();
		struct gate_rule r;
		if (gate_rule_parse(why + strlen(pre), &r, NULL) != 0)
			abort();
		if (is_ip != (r.kind == GATE_RULE_NET))
			abort();
		if (!is_ip && !name_rule_matches(&r, host, port))
			abort();
		if (!is_ip)
			for (size_t i = 0; i < p->n_deny; i++)
				if (name_rule_matches(&p->deny[i], host, port))
					abort();
	}

	/* case and a trailing dot change nothing */
	char alt[1100];
	size_t n = strlen(host);
	if (n + 2 < sizeof alt) {
		for (size_t i = 0; i <= n; i++)
			alt[i] = (host[i] >= 'a' && host[i] <= 'z') ? (char)(host[i] - 32)
								  : host[i];
		if (gate_check_name(p, alt, (uint16_t)port, NULL) != v)
			abort();
		if (!is_ip && n && host[n - 1] != '.') {
			memcpy(alt, host, n);
			alt[n] = '.';
			alt[n + 1] = '\0';
			if (gate_check_name(p, alt, (uint16_t)port, NULL) != v)
				abort();
		}
	}

	/* pins come back with the port asked for */
	struct sockaddr_storage pins[GATE_PIN_ADDRS * 2];
	size_t np = gate_pin_lookup(p, host, (uint16_t)port, pins, GATE_PIN_ADDRS * 2);
	for (size_t i = 0; i < np; i++) {
		if (gate_addr_port((struct sockaddr *)&pins[i]) != port)
			abort();
		gate_check_addr(p, host, (uint16_t)port, (struct sockaddr *)&pins[i], why);
	}

	if (is_ip) {
		bool net_allow = false;
		for (size_t i = 0; i < p->n_allow; i++)
			net_allow |= p->allow[i].kind == GATE_RULE_NET;
		v = gate_check_addr(p, host, (uint16_t)port, (struct sockaddr *)&ss, why);
		if (v == GATE_ALLOW && gate_addr_special((struct sockaddr *)&ss) &&
		    !net_allow)
			abort();
		char f[GATE_ADDR_FMT_CAP];
		gate_addr_format((struct sockaddr *)&ss, true, f);
	}
}

static const char *const tokens[] = {
	"example.com", "*.", ".example.com", "127.0.0.1", "10.0.0.0/8", "[::1]",
	":443", " 443", " 80", "::ffff:", "1.2.3.4", "169.254.169.254",
	"fd00::/8", "[fd00::/8]:443", "::1", "0.0.0.0/0", "::/0", "2001:db8::",
	"192.168.", "/24", "/104", "Aexample.com", "A*.example.com", "D",
	"Pexample.com:", "P*.", "\n", "[", "]", ",", ".", "EXAMPLE.COM.",
	"/12", "/7", "Pexample.com:127.0.0.1\n", "172.16.0.0", "fc00::",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t expanded[65536];
	if (size > 0 && (data[0] & 1)) {
		size_t o = 0;
		for (size_t i = 1; i < size && o < sizeof expanded - 32; i++) {
			if (data[i] < 0xc0) {
				expanded[o++] = data[i];
				continue;
			}
			const char *t = tokens[(data[i] - 0xc0) %
					       (sizeof tokens / sizeof *tokens)];
			memcpy(expanded + o, t, strlen(t));
			o += strlen(t);
		}
		data = expanded;
		size = o;
	} else if (size > 0) {
		data++;
		size--;
	}
	struct gate_policy p;
	gate_policy_init(&p);
	char line[1100];
	size_t at = 0;
	for (int lines = 0; at < size && lines < 64; lines++) {
		size_t n = 0;
		while (at + n < size && data[at + n] != '\n')
			n++;
		size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
		memcpy(line, data + at, k);
		line[k] = '\0';
		at += n + 1;
		struct moat_err e;
		switch (line[0]) {
		case 'A':
			if (gate_policy_add_allow(&p, line + 1, &e) == 0)
				roundtrip(&p.allow[p.n_allow - 1]);
			else if (e.msg[0] == '\0')
				abort();
			break;
		case 'D':
			if (gate_policy_add_deny(&p, line + 1, &e) == 0)
				roundtrip(&p.deny[p.n_deny - 1]);
			break;
		case 'P':
			gate_policy_add_pin(&p, line + 1, &e);
			break;
		default:
			query(&p, line);
		}
	}
	gate_policy_free(&p);
	return 0;
}
