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
CLI_SRC := $(wildcard src/cli/*.c)
HDRS    := $(wildcard include/moat/*.h src/*/*.h) $(BUILD)/gen/seccomp_bpf.h

.PHONY: all deps run check unit e2e bench clean

all: $(BUILD)/moat

$(BUILD)/moat: $(LIB_SRC) $(CLI_SRC) $(HDRS) Makefile
	@mkdir -p $(BUILD)
	$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) -o $@ $(LIB_SRC) $(CLI_SRC) $(LIBS)

# Sanitizer build used by the test suite.
$(BUILD)/san/moat: $(LIB_SRC) $(CLI_SRC) $(HDRS) Makefile
	@mkdir -p $(BUILD)/san
	$(CC) $(CPPFLAGS) $(WARN) -O1 -g $(SAN) -o $@ $(LIB_SRC) $(CLI_SRC) $(LIBS)

$(BUILD)/san/unit: $(LIB_SRC) $(wildcard tests/unit/*.c) $(HDRS) Makefile
	@mkdir -p $(BUILD)/san
	$(CC) $(CPPFLAGS) -Isrc $(WARN) -Wno-missing-prototypes -O1 -g $(SAN) -o $@ \
		$(LIB_SRC) $(wildcard tests/unit/*.c) $(LIBS) -lcriterion

# The seccomp program, compiled by libseccomp at build time.
$(BUILD)/gen/seccomp_bpf.h: tools/gen_seccomp.c src/jail/seccomp_rules.h
	@mkdir -p $(BUILD)/gen
	$(CC) $(WARN) -O1 -o $(BUILD)/gen/gen_seccomp tools/gen_seccomp.c -lseccomp
	$(BUILD)/gen/gen_seccomp > $@.tmp && mv $@.tmp $@

deps:
	@sh scripts/deps.sh

run: deps $(BUILD)/moat
	@sh scripts/demo.sh $(BUILD)/moat

unit: $(BUILD)/san/unit
	$(BUILD)/san/unit --jobs 1

e2e: $(BUILD)/san/moat
	sh tests/e2e/run.sh $(BUILD)/san/moat

check: deps
	$(MAKE) unit
	$(MAKE) e2e

bench: deps $(BUILD)/moat
	sh bench/startup.sh $(BUILD)/moat

clean:
	rm -rf $(BUILD)
