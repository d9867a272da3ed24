# The PostgreSQL 18 patch series workspace.  See README.md.
#
#   make            build the patched server (fetching and applying as needed)
#   make demo       build it and show it working (crash recovery with prefetch)
#   make check      the test command: every check and every test
#
# Variables: SUITE, TEST (check-suite, check-one), FEATURE (export),
# FORCE=1 (reapply), V (series version), BUILD_DIR (build area).

T := tools

.PHONY: all build build-autoconf test-autoconf deps fetch apply reapply export series verify indent \
	indent-check vanilla bench-builds demo check check-suite check-one \
	clean

all: build

deps:
	$(T)/deps

fetch: deps
	$(T)/fetch

build/src/.git:
	$(T)/deps
	$(T)/apply

apply: build/src/.git

reapply: deps
	$(T)/apply $(if $(FORCE),--force)

export:
	$(T)/export $(if $(FEATURE),--feature $(FEATURE))

series: deps
	$(T)/series $(if $(V),-v $(V))

verify: deps
	$(T)/verify

build: build/src/.git
	$(T)/build patched assert

build-autoconf: build/src/.git
	$(T)/build-autoconf

test-autoconf: build-autoconf
	$(T)/test-autoconf

vanilla: deps
	$(T)/build vanilla assert

bench-builds: build/src/.git
	$(T)/build patched opt
	$(T)/build vanilla opt

indent: build
	$(T)/indent

indent-check: build
	$(T)/indent --check

demo: build
	$(T)/demo

check:
	$(T)/check

check-suite: build
	$(T)/test $(SUITE)

check-one: build
	$(T)/test $(SUITE) $(TEST)

clean:
	rm -rf build/meson build/autoconf build/install build/verify build/series build/series-src build/demo
