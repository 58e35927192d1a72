/* The browser guard's Host check and --allow-origin list (src/serve/
 * browser.c); the Origin forms themselves are in test_mcp.c. */
#include "serve/browser.h"

#include <criterion/criterion.h>
#include <stddef.h>

Test(browser, host_forms)
{
	cr_assert(browser_host_ok(NULL, "127.0.0.1")); /* HTTP/1.0 */
	cr_assert(browser_host_ok("127.0.0.1:7070", "127.0.0.1"));
	cr_assert(browser_host_ok("localhost", "127.0.0.1"));
	cr_assert(browser_host_ok("LOCALHOST:1", "127.0.0.1"));
	cr_assert(browser_host_ok("[::1]:7070", "127.0.0.1"));
	cr_assert(browser_host_ok("127.9.9.9", "127.0.0.1"));
	cr_assert(browser_host_ok("moat.lan:7070", "moat.lan"));
	cr_assert(browser_host_ok("[fd00::5]:7070", "fd00::5"));
	/* single labels: no attacker's DNS name */
	cr_assert(browser_host_ok("x", "127.0.0.1"));
	cr_assert(browser_host_ok("moat:7070", "127.0.0.1"));
	cr_assert_not(browser_host_ok("moat:7070x", "127.0.0.1"));
	cr_assert_not(browser_host_ok("x/y", "127.0.0.1"));
	cr_assert_not(browser_host_ok("evil.", "127.0.0.1"));

	cr_assert_not(browser_host_ok("evil.example:7070", "127.0.0.1"));
	cr_assert_not(browser_host_ok("localhost.evil.example", "127.0.0.1"));
	cr_assert_not(browser_host_ok("127.0.0.1.evil.example", "127.0.0.1"));
	cr_assert_not(browser_host_ok("127.0.0.1@evil.example", "127.0.0.1"));
	cr_assert_not(browser_host_ok("127.0.0.1/x", "127.0.0.1"));
	cr_assert_not(browser_host_ok("127.0.0.1:", "127.0.0.1"));
	cr_assert_not(browser_host_ok("127.0.0.1:99999999", "127.0.0.1"));
	cr_assert_not(browser_host_ok("", "127.0.0.1"));
	cr_assert_not(browser_host_ok("[::1", "127.0.0.1"));
	cr_assert_not(browser_host_ok("localhost[::1]", "127.0.0.1"));
	/* a wildcard listen address is no name a page could be served from */
	cr_assert_not(browser_host_ok("10.0.0.5:7070", "0.0.0.0"));
}

Test(browser, allowed_origins_are_exact)
{
	char *const allowed[] = {"https://console.example:8443", NULL};
	cr_assert(browser_origin_ok("https://console.example:8443", "127.0.0.1", allowed));
	cr_assert(browser_origin_ok("HTTPS://Console.Example:8443", "127.0.0.1", allowed));
	cr_assert_not(browser_origin_ok("https://console.example", "127.0.0.1", allowed));
	cr_assert_not(browser_origin_ok("https://console.example:8443.evil", "127.0.0.1", allowed));
	cr_assert_not(browser_origin_ok("http://console.example:8443", "127.0.0.1", allowed));
	cr_assert(browser_origin_ok("http://localhost", "127.0.0.1", allowed));
	cr_assert_not(browser_origin_ok("null", "127.0.0.1", allowed));
}
