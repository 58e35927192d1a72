# moat — build, demo and tests.  `make run` / `make check` install missing
# Debian packages first when run as root (see scripts/deps.sh).
CC      ?= gcc
BUILD   ?= build
CFLAGS  ?= -O2 -g
WARN    := -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wmissing-prototypes \
           -Wstrict-prototypes -Wno-unused-parameter -Wno-format-truncation
CPPFLAGS := -Iinclude -I$(BUILD)/gen -D_FORTIFY_SOURCE=2
# jansson linked statically: one less shared object to relocate per run.
LIBS    := -Wl,-Bstatic -ljansson -Wl,-Bdynamic
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

LIB_SRC := $(wildcard src/base/*.c src/policy/*.c src/jail/*.c src/init/*.c)
CLI_SRC := $(wildcard src/cli/*.c) src/serve/datadir.c
# Pure code shared by the daemon and the in-sandbox agent.
# (WebSocket framing is not the agent's: it needs OpenSSL's SHA-1)
WS_SRC    := src/proto/ws.c
PROTO_SRC := $(filter-out $(WS_SRC),$(wildcard src/proto/*.c src/patch/*.c))
# moat serve (the daemon), the API clients, the agent (pid 1 of a served
# sandbox). Separate binaries: `moat run` must not pay for loading libevent,
# SQLite, libarchive and libcurl; the agent is static so that it runs in any
# root filesystem image.
SERVE_SRC  := $(wildcard src/serve/*.c) $(wildcard src/oci/*.c)
CLIENT_SRC := $(wildcard src/client/*.c)
AGENT_SRC  := $(wildcard src/agent/*.c) src/base/err.c src/base/util.c src/base/fdpass.c \
              src/base/walk.c src/base/utf8.c
# The egress gateway (libevent + OpenSSL): in the daemon, and as moat-gate
# for `moat run`.
GATE_SRC   := $(wildcard src/gate/*.c)
GATE_LIBS  := -levent -levent_openssl -lssl -lcrypto
# The gateway's pure pattern parser, so that `moat run` checks its rules
# even when no gateway starts.
GATE_RULES := src/gate/policy.c src/gate/addr.c
SERVE_LIBS := -levent -lsqlite3 -larchive -lcurl
CLIENT_LIBS := -lcurl -larchive -lcrypto
HDRS    := $(wildcard include/moat/*.h src/*/*.h) $(BUILD)/gen/seccomp_bpf.h
BINS    := moat moat-serve moat-client moat-agent moat-gate

.PHONY: all deps run stop check unit install uninstall install-check man completion e2e e2e-release pyclient e2b jsclient mcp cpsdk examples bench clean

all: $(addprefix $(BUILD)/,$(BINS))

# One pattern for the optimised build and the sanitizer build (test suite).
define binaries
$(1)/moat: $(LIB_SRC) $(CLI_SRC) $(GATE_RULES) $(HDRS) Makefile
	@mkdir -p $(1)
	$$(CC) $$(CPPFLAGS) -Isrc $$(WARN) $(2) $$(MOAT_LINK) -o $$@ $(LIB_SRC) $(CLI_SRC) $(GATE_RULES) $$(MOAT_LIBS)
$(1)/moat-serve: $(LIB_SRC) $(PROTO_SRC) $(WS_SRC) $(SERVE_SRC) $(GATE_SRC) $(HDRS) Makefile
	@mkdir -p $(1)
	$$(CC) $$(CPPFLAGS) -Isrc $$(WARN) $(2) -o $$@ $(LIB_SRC) $(PROTO_SRC) $(WS_SRC) $(SERVE_SRC) $(GATE_SRC) $$(LIBS) $$(SERVE_LIBS) $$(GATE_LIBS)
$(1)/moat-gate: $(GATE_SRC) src/gatebin/main.c src/base/err.c src/base/util.c src/base/fdpass.c src/base/own.c $(HDRS) Makefile
	@mkdir -p $(1)
	$$(CC) $$(CPPFLAGS) -Isrc $$(WARN) $(2) -o $$@ $(GATE_SRC) src/gatebin/main.c src/base/err.c src/base/util.c src/base/fdpass.c src/base/own.c $$(LIBS) $$(GATE_LIBS)
$(1)/moat-client: $(CLIENT_SRC) src/base/err.c src/base/term.c src/base/utf8.c $(WS_SRC) $(HDRS) Makefile
	@mkdir -p $(1)
	$$(CC) $$(CPPFLAGS) -Isrc $$(WARN) $(2) -o $$@ $(CLIENT_SRC) src/base/err.c src/base/term.c src/base/utf8.c $(WS_SRC) $$(LIBS) $$(CLIENT_LIBS)
endef
# moat itself is a static PIE: no dynamic loader, no relocation of shared
# objects per run (about a tenth of `moat run`'s start-up on this VM, where
# page faults are dear), and still position-independent for ASLR.
$(eval $(call binaries,$(BUILD),$(CFLAGS)))
$(BUILD)/moat: MOAT_LINK := -static-pie
$(BUILD)/moat: MOAT_LIBS := -ljansson
MOAT_LIBS ?= $(LIBS)
$(eval $(call binaries,$(BUILD)/san,-O1 -g $(SAN)))

# The agent is linked statically (no sanitizers: they cannot be static).
$(BUILD)/moat-agent $(BUILD)/san/moat-agent: $(AGENT_SRC) $(PROTO_SRC) $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(WARN) -O2 -g -static -o $@ $(AGENT_SRC) $(PROTO_SRC) -ljansson

# (the agent's path resolver is pure libc: tested on the host)
UNIT_AGENT := src/agent/resolve.c src/agent/idnames.c
# (moat mcp's framing, pure: tested on its own)
UNIT_CLIENT := src/client/linebuf.c src/client/sse.c
$(BUILD)/san/unit: $(LIB_SRC) $(PROTO_SRC) $(WS_SRC) $(SERVE_SRC) $(GATE_SRC) $(UNIT_AGENT) $(UNIT_CLIENT) $(wildcard tests/unit/*.c tests/unit/*.h) $(HDRS) Makefile
	@mkdir -p $(BUILD)/san
	$(CC) $(CPPFLAGS) -Isrc $(WARN) -Wno-missing-prototypes -O1 -g $(SAN) -DMOAT_UNIT_TEST -o $@ \
		$(LIB_SRC) $(PROTO_SRC) $(WS_SRC) $(SERVE_SRC) $(GATE_SRC) $(UNIT_AGENT) $(UNIT_CLIENT) $(wildcard tests/unit/*.c) $(LIBS) $(SERVE_LIBS) $(GATE_LIBS) -lcriterion

# The OCI test tool (tests/tools/oci_tool.c: pull into a blob store, for
# tests/e2e and bench/oci_pull.py); not installed, not in BINS.
OCI_TOOL_SRC := tests/tools/oci_tool.c tests/tools/oci_tool_layer.c $(wildcard src/oci/*.c) src/base/err.c src/base/util.c src/base/walk.c
OCI_TOOL_LIBS := $(LIBS) -lcurl -larchive -lcrypto
.PHONY: oci-tool
oci-tool: $(BUILD)/oci-tool $(BUILD)/san/oci-tool
$(BUILD)/oci-tool: $(OCI_TOOL_SRC) $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(WARN) $(CFLAGS) -o $@ $(OCI_TOOL_SRC) $(OCI_TOOL_LIBS)
$(BUILD)/san/oci-tool: $(OCI_TOOL_SRC) $(HDRS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Isrc $(WARN) -O1 -g $(SAN) -o $@ $(OCI_TOOL_SRC) $(OCI_TOOL_LIBS)

# The seccomp program, compiled by libseccomp at build time.
$(BUILD)/gen/seccomp_bpf.h: tools/gen_seccomp.c src/jail/seccomp_rules.h
	@mkdir -p $(BUILD)/gen
	$(CC) $(WARN) -O1 -o $(BUILD)/gen/gen_seccomp tools/gen_seccomp.c -lseccomp
	$(BUILD)/gen/gen_seccomp > $@.tmp && mv $@.tmp $@

deps:
	@sh scripts/deps.sh

# ---- install ---------------------------------------------------------------
# `make install PREFIX=/usr/local DESTDIR=...` and `make uninstall` (same
# PREFIX and DESTDIR). moat goes into bin, the binaries it runs into
# libexec/moat, where moat finds them relative to itself (src/base/exe.h):
# so LIBEXECDIR is PREFIX's, not a setting of its own.
PREFIX         ?= /usr/local
BINDIR         := $(PREFIX)/bin
LIBEXECDIR     := $(PREFIX)/libexec/moat
MANDIR         ?= $(PREFIX)/share/man
BASHCOMPDIR    ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR     ?= $(PREFIX)/share/zsh/site-functions
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
HELPERS        := moat-serve moat-client moat-agent moat-gate
MAN_PAGES      := man1/moat.1 man1/moat-run.1 man8/moat-serve.8 man5/moat-policy.5

# man pages from --help and docs/policy.md, completion from --help (the
# generators say how), both remade whenever a binary changes
man: $(BUILD)/man/stamp
$(BUILD)/man/stamp: $(addprefix $(BUILD)/,$(BINS)) docs/policy.md $(wildcard docs/man/*.h2m) scripts/man.sh
	@command -v help2man >/dev/null && command -v lowdown >/dev/null || \
		{ echo "make man: needs help2man and lowdown (sh scripts/deps.sh as root)" >&2; exit 1; }
	sh scripts/man.sh $(BUILD) $(BUILD)/man
	@touch $@
completion: $(BUILD)/completion/stamp
$(BUILD)/completion/stamp: $(addprefix $(BUILD)/,$(BINS)) scripts/completion.sh
	sh scripts/completion.sh $(BUILD)/moat $(BUILD)/completion
	@touch $@
$(BUILD)/moat.service: dist/moat.service.in Makefile
	sed 's|@BINDIR@|$(BINDIR)|g' $< > $@.tmp && mv $@.tmp $@

install: all man completion $(BUILD)/moat.service
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) \
		$(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(SYSTEMDUNITDIR)
	install -m 755 $(BUILD)/moat $(DESTDIR)$(BINDIR)/moat
	install -m 755 $(addprefix $(BUILD)/,$(HELPERS)) $(DESTDIR)$(LIBEXECDIR)/
	for m in $(MAN_PAGES); do install -m 644 $(BUILD)/man/$${m#*/} $(DESTDIR)$(MANDIR)/$$m || exit 1; done
	install -m 644 $(BUILD)/completion/moat.bash $(DESTDIR)$(BASHCOMPDIR)/moat
	install -m 644 $(BUILD)/completion/_moat $(DESTDIR)$(ZSHCOMPDIR)/_moat
	install -m 644 $(BUILD)/moat.service $(DESTDIR)$(SYSTEMDUNITDIR)/moat.service

# Removes what install put there (the shared directories stay).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/moat $(addprefix $(DESTDIR)$(LIBEXECDIR)/,$(HELPERS)) \
		$(addprefix $(DESTDIR)$(MANDIR)/,$(MAN_PAGES)) $(DESTDIR)$(BASHCOMPDIR)/moat \
		$(DESTDIR)$(ZSHCOMPDIR)/_moat $(DESTDIR)$(SYSTEMDUNITDIR)/moat.service
	rmdir $(DESTDIR)$(LIBEXECDIR) 2>/dev/null || true

# Installs into a temporary DESTDIR, runs the installed binaries, checks
# the man pages, completion and unit against --help, uninstalls.
install-check: all
	sh tests/install/run.sh

# The tour, then moat serve left running in the background: `make stop`.
run: deps all
	@sh scripts/demo.sh $(BUILD)/moat

stop:
	@sh scripts/daemon.sh stop

unit: $(BUILD)/san/unit
	$(BUILD)/san/unit --jobs 1

e2e: $(addprefix $(BUILD)/san/,$(BINS)) $(BUILD)/san/oci-tool
	sh tests/e2e/run.sh $(BUILD)/san/moat

# The Python client's own tests, against a real (sanitizer-built) daemon.
pyclient: $(addprefix $(BUILD)/san/,$(BINS))
	cd clients/python && MOAT_BIN=$(abspath $(BUILD)/san/moat) /usr/bin/python3 -m pytest \
		-p no:cacheprovider -q tests

# The E2B door driven by the unchanged npm e2b SDK (tests/e2b, pinned by its
# package-lock.json): as root, then as the unprivileged user (E2B_PASSES=root
# for the root pass only). node_modules is installed once from the lockfile.
# npm packages of a node suite, from its committed package-lock.json, once.
npm_ci = @[ -d $(1)/node_modules ] || (cd $(1) && (npm ci --offline --no-audit --no-fund || npm ci --no-audit --no-fund))

e2b: $(addprefix $(BUILD)/san/,$(BINS))
	$(call npm_ci,tests/e2b)
	MOAT_BIN=$(abspath $(BUILD)/san/moat) sh tests/e2b/run.sh $(BUILD)/san/moat

# The JS package (clients/js: plain client, Agents SDK provider, Deep Agents
# backend) driven by the real SDKs' scripted models, against a real daemon.
jsclient: $(addprefix $(BUILD)/san/,$(BINS))
	$(call npm_ci,clients/js)
	NODE_PASSES=root sh tests/node/run.sh clients/js $(BUILD)/san/moat

# examples/agents-sdk with the Agents SDK's scripted model. npm ci each time:
# moat-sandbox is installed there as a copy of clients/js (install-links).
examples: $(addprefix $(BUILD)/san/,$(BINS))
	cd examples/agents-sdk && (npm ci --offline --no-audit --no-fund || npm ci --no-audit --no-fund)
	NODE_PASSES=root sh tests/node/run.sh examples/agents-sdk $(BUILD)/san/moat

# The MCP server (moat mcp over stdio, /mcp over Streamable HTTP) driven by
# the official MCP TypeScript SDK client.
mcp: $(addprefix $(BUILD)/san/,$(BINS))
	$(call npm_ci,tests/mcp)
	NODE_PASSES=root sh tests/node/run.sh tests/mcp $(BUILD)/san/moat

# The control plane (issue 14) driven by the official openai and
# @anthropic-ai/sdk npm clients, unchanged, inside a session's sandbox
# (tests/cp-sdk, pinned by its package-lock.json), against the LLM proxy and
# a fake upstream: as root, then as the unprivileged user.
cpsdk: $(addprefix $(BUILD)/san/,$(BINS))
	$(call npm_ci,tests/cp-sdk)
	sh tests/node/run.sh tests/cp-sdk $(BUILD)/san/moat

check: deps
	$(MAKE) unit
	$(MAKE) install-check
	$(MAKE) fuzz FUZZ_SECONDS=5
	$(MAKE) e2e
	$(MAKE) e2e-release
	$(MAKE) pyclient
	$(MAKE) e2b
	$(MAKE) jsclient
	$(MAKE) examples
	$(MAKE) mcp
	$(MAKE) cpsdk

# The same suites against the binaries that ship (optimised, moat a static
# PIE): how they are linked is part of what must work.
e2e-release: $(addprefix $(BUILD)/,$(BINS)) $(BUILD)/oci-tool
	sh tests/e2e/run.sh $(BUILD)/moat

bench: deps all
	sh bench/startup.sh $(BUILD)/moat
	/usr/bin/python3 bench/serve.py

clean:
	rm -rf $(BUILD)

# libFuzzer targets for the parsers of outside input (tests/fuzz/, listed
# in docs/SECURITY.md): `make fuzz` builds each with clang and runs it for
# FUZZ_SECONDS (10 by default; `make check` uses 5), `make fuzz-long` for
# FUZZ_LONG_SECONDS (300) each. Each starts from its seed corpus in
# tests/fuzz/corpus/<target>/ and keeps what it finds in
# $(BUILD)/fuzz/corpus/<target>/; crashing inputs go to $(BUILD)/fuzz/.
# UBSan findings abort, so the fuzzer reports them.
FUZZ_SECONDS ?= 10
FUZZ_LONG_SECONDS ?= 300
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined -Iinclude -Isrc
FUZZ_LIB     := src/gate/policy.c src/gate/addr.c src/gate/http_head.c \
                src/gate/socks5.c src/gate/sni.c src/base/err.c src/base/util.c src/base/walk.c
# Per target: its sources (FUZZ_LIB when none are named) and libraries.
FUZZ_BASE          := src/base/err.c src/base/util.c src/base/utf8.c src/base/walk.c src/base/tooltail.c
FUZZ_SRC_frame     := src/proto/frame.c
FUZZ_SRC_idnames   := src/agent/idnames.c src/base/utf8.c
FUZZ_LIBS_frame    := -ljansson
FUZZ_SRC_entries   := src/proto/entries.c $(FUZZ_BASE)
FUZZ_SRC_patch     := src/patch/patch.c src/patch/udiff.c $(FUZZ_BASE)
FUZZ_SRC_archive   := src/serve/archive.c src/proto/entries.c $(FUZZ_BASE)
FUZZ_LIBS_archive  := -larchive
FUZZ_SRC_image     := src/serve/image.c $(FUZZ_BASE)
FUZZ_SRC_policy_file := src/policy/policy.c src/policy/policy_json.c src/policy/quota.c $(FUZZ_BASE)
FUZZ_LIBS_policy_file := -ljansson
FUZZ_SRC_manifest  := src/serve/manifest.c src/proto/entries.c $(FUZZ_BASE)
FUZZ_LIBS_manifest := -ljansson
# the E2B door's envd half (connect.c, multipart.c: its codecs)
E2B_ENVD_SRC := src/serve/e2b_envd.c src/serve/e2b_envd_proc.c src/serve/e2b_envd_fs.c \
                src/serve/connect.c src/serve/multipart.c
# The API: the real router, validation and reply shaping (api.c, http.c)
# behind a stand-in for box.c and job.c (tests/fuzz/fuzz_api.c).
FUZZ_SRC_api       := src/serve/api.c src/serve/api_images.c src/serve/api_life.c src/serve/life.c src/serve/attach.c src/proto/ws.c src/serve/core.c src/serve/enforce.c src/jail/cgcheck.c src/serve/jfield.c src/serve/http.c src/serve/browser.c src/serve/http_guard.c src/serve/manifest.c src/serve/clone.c src/base/exe.c \
                      src/policy/quota.c src/policy/policy.c \
                      src/serve/archive.c src/serve/image.c src/serve/metrics.c \
                      src/proto/entries.c src/gate/policy.c src/gate/addr.c $(FUZZ_BASE)
FUZZ_LIBS_api      := -levent -ljansson -larchive -lcrypto
# the E2B door's front and control plane behind stand-ins for box.c
# (tests/fuzz/fuzz_e2b.c) and the core (core_stub.c until core.c lands)
FUZZ_SRC_e2b       := src/serve/e2b.c src/serve/e2b_api.c src/serve/e2b_snap.c tests/fuzz/e2b_stub.c src/serve/http.c src/serve/browser.c \
                      src/serve/http_guard.c src/serve/metrics.c $(FUZZ_BASE)
FUZZ_LIBS_e2b      := -levent -ljansson
# the framer in front of evhttp; the target includes http_guard.c itself
# (to reach its per-connection state), so it needs no other source.
FUZZ_SRC_http_guard := src/base/err.c
FUZZ_LIBS_http_guard := -levent
# The E2B door's codecs: Connect's JSON (envelopes, proto3 JSON) and multipart.
FUZZ_SRC_connect   := src/serve/connect.c src/serve/image.c src/proto/entries.c $(FUZZ_BASE)
FUZZ_LIBS_connect  := -ljansson
FUZZ_SRC_multipart := src/serve/multipart.c $(FUZZ_BASE)
# the MCP door's JSON-RPC codec, Origin check and tool argument checks
FUZZ_SRC_mcp       := src/serve/mcp_msg.c src/serve/mcp_schema.c src/serve/browser.c $(FUZZ_BASE)
FUZZ_LIBS_mcp      := -ljansson
# the LLM proxy's dialects: requests, answers and SSE streams
FUZZ_SRC_llm       := src/serve/llm_dialect.c src/serve/jfield.c $(FUZZ_BASE)
FUZZ_LIBS_llm      := -ljansson
# the E2B envd door (e2b_envd*.c) with the real Connect codec, multipart
# and http.c behind a stand-in operation core (tests/fuzz/fuzz_envd.c)
FUZZ_SRC_envd      := $(E2B_ENVD_SRC) src/serve/http.c src/serve/browser.c \
                      src/serve/http_guard.c src/serve/image.c src/proto/entries.c $(FUZZ_BASE)
FUZZ_LIBS_envd     := -levent -ljansson -lcrypto -lm
# the answer of a sandbox's resolver to its queries (src/base/dns.c)
FUZZ_SRC_dns       := src/base/dns.c src/base/dnsd.c
# WebSocket framing (the attach door and moat exec -it / moat attach)
FUZZ_SRC_ws        := src/proto/ws.c src/base/utf8.c
FUZZ_LIBS_ws       := -lcrypto
# moat mcp's framing: stdin lines and the daemon's server-sent events
FUZZ_SRC_relay     := src/client/linebuf.c src/client/sse.c src/base/err.c
# OCI: image references, index / manifest / config documents, the
# registry's WWW-Authenticate challenge
FUZZ_SRC_ociref    := src/oci/ref.c src/oci/digest.c src/base/err.c
FUZZ_LIBS_ociref   := -lcrypto
FUZZ_SRC_ocimanifest := src/oci/manifest.c src/oci/digest.c src/base/err.c
FUZZ_LIBS_ocimanifest := -ljansson -lcrypto
FUZZ_SRC_ociauth   := src/oci/auth.c src/base/err.c
FUZZ_LIBS_ociauth  := -ljansson -lcrypto
# layer unpack of hostile tars (src/oci/unpack.c) and the documents that pick
# an image in an archive (src/oci/layout_json.c)
FUZZ_SRC_unpack    := src/oci/unpack.c src/oci/tarname.c src/oci/digest.c $(FUZZ_BASE)
FUZZ_LIBS_unpack   := -larchive -lcrypto
FUZZ_SRC_layout    := src/oci/layout_json.c src/oci/manifest.c src/oci/digest.c src/base/err.c
FUZZ_LIBS_layout   := -ljansson -lcrypto
FUZZ_BINS    := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

.PHONY: fuzz fuzz-long fuzz-build
# Built two at a time (the brief run is part of `make check`), run one by one.
fuzz:
	@$(MAKE) --no-print-directory -j2 fuzz-build
	@for f in $(FUZZ_BINS); do \
		n=$${f##*/}; c=$(BUILD)/fuzz/corpus/$$n; mkdir -p $$c; \
		s=tests/fuzz/corpus/$$n; [ -d $$s ] || s=; \
		echo "fuzz: $$f for $(FUZZ_SECONDS)s"; \
		$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -timeout=10 \
			-artifact_prefix=$(BUILD)/fuzz/ $$c $$s || exit 1; \
	done

fuzz-long:
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)

fuzz-build: $(FUZZ_BINS)

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB) $(wildcard src/*/*.c src/*/*.h include/moat/*.h tests/unit/*.h) Makefile
	@mkdir -p $(BUILD)/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(or $(FUZZ_SRC_$*),$(FUZZ_LIB)) $(FUZZ_LIBS_$*)
