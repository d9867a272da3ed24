# Shared settings and helpers for the workspace scripts in tools/.
# Sourced, not executed.

set -euo pipefail

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../upstream.conf
. "$TOP/upstream.conf"

# Everything generated lives in the build area; it is never committed.
BUILD=${BUILD_DIR:-$TOP/build}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
DOWNLOAD=$BUILD/download
PRISTINE=$BUILD/pristine.git	# one commit: the pristine tarball
SRC=$BUILD/src					# the patched tree developers edit
VANILLA_SRC=$BUILD/vanilla-src	# the pristine tree, built for comparison
MESON=$BUILD/meson
INSTALL=$BUILD/install
SERIES_OUT=$BUILD/series

# Servers refuse to run as root: tests, demo and benchmarks use this user.
TEST_USER=${PG_TEST_USER:-pgtest}

# Deterministic identity for the commits apply makes, so that a second
# apply yields the same history.
export GIT_AUTHOR_NAME="PostgreSQL patch series"
export GIT_AUTHOR_EMAIL="pgsql-hackers@lists.postgresql.org"
export GIT_COMMITTER_NAME=$GIT_AUTHOR_NAME
export GIT_COMMITTER_EMAIL=$GIT_AUTHOR_EMAIL
export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z"
export GIT_COMMITTER_DATE=$GIT_AUTHOR_DATE

# ccache: share hits between checkouts in different directories.
export CCACHE_BASEDIR=$BUILD
export CCACHE_NOHASHDIR=true

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Features, in series order (comments and blank lines ignored).
features() {
	sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$TOP/patches/series"
}

# A feature's patch file holds its commit message, a line "---", and then
# the diff of the upstream files it changes.  Its overlay list names the
# files the feature adds.
patch_file() { echo "$TOP/patches/$1.patch"; }
overlay_list() { echo "$TOP/patches/$1.files"; }

patch_message() { sed -n '/^---$/q;p' "$1"; }

# Overlay files of a feature, one per line.
overlay_files() {
	local list
	list=$(overlay_list "$1")
	[ -f "$list" ] || return 0
	sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list"
}

git_tree() { git -C "$SRC" "$@"; }

require_tree() {
	[ -d "$SRC/.git" ] || die "no extracted tree at $SRC; run 'make apply' first"
}

as_root_or_die() {
	[ "$(id -u)" = 0 ] || die "$1 needs root"
}

# Create the unprivileged user servers run as, and make sure it can read
# the tree and write the given directories.
prepare_test_user() {
	if ! id "$TEST_USER" >/dev/null 2>&1; then
		as_root_or_die "creating the test user $TEST_USER"
		say "creating user $TEST_USER"
		useradd --create-home --shell /bin/bash "$TEST_USER"
	fi
	[ "$(id -un)" = "$TEST_USER" ] && return 0
	as_root_or_die "running servers as $TEST_USER"
	runuser -u "$TEST_USER" -- test -r "$SRC/meson.build" ||
		die "user $TEST_USER cannot read $SRC (a parent directory is not world-searchable?); put the build area elsewhere with BUILD_DIR=/some/dir"
	local d
	for d in "$@"; do
		mkdir -p "$d"
		chown -R "$TEST_USER:" "$d"
	done
}

# Tests that fill a file system (a full pg_wal, an NVWAL file that does
# not fit) get a small one of their own: a 32MB tmpfs owned by the test
# user, named by PG_TEST_SMALL_FS and unmounted when the calling script
# exits.  Without root, or where mounting fails, it is not set and those
# tests skip.
mount_small_fs() {
	[ "$(id -u)" = 0 ] || return 0
	local dir
	dir=$(mktemp -d /tmp/pg-small-fs.XXXXXX)
	if mount -t tmpfs -o "size=32m,mode=0700,uid=$(id -u "$TEST_USER"),gid=$(id -g "$TEST_USER")" \
		pg-small-fs "$dir"; then
		export PG_TEST_SMALL_FS=$dir
		# Lazily: a server a failed test left running may still use it.
		# This is the callers' only EXIT trap; one of their own would
		# replace it.
		# shellcheck disable=SC2064
		trap "umount -l '$dir' && rmdir '$dir'" EXIT
	else
		rmdir "$dir"
		say "could not mount a small file system; tests that fill one will skip"
	fi
}

# Let the test user write in these trees (tests write next to their
# sources, make check into the build directory) without taking ownership of
# them from root.
let_test_user_write() {
	[ "$(id -un)" = "$TEST_USER" ] && return 0
	setfacl -R -m "u:$TEST_USER:rwX" -m "d:u:$TEST_USER:rwX" "$@"
}

# PostgreSQL's make as a top-level make, wherever it is called from (make
# check runs the tools from make): its makefiles build the generated headers
# and tmp_install only when MAKELEVEL is 0.  A command, so that it can run
# as the test user too.
MAKE_TOPLEVEL=(env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make)

# run_and_rerun NAME RUN FAILED DIGEST: the test runners' common part.
#
#   RUN [TEST...]   runs every test of the selection, or the named ones;
#                   RERUN_PASS says which run it is (1, then 2)
#   FAILED          prints the names of the tests the last RUN failed
#   DIGEST          prints, in a few lines each, why they failed
#                   (tools/tap-digest)
#
# A run that fails is followed by a second one of the tests it failed
# (at most $RERUN_MAX, default 5).  A test that passes then does not fail
# the run, but is reported as flaky, with its first failure, in
# $BUILD/failures/flaky-NAME: an intermittent failure must be seen and
# explained, and it must not hide the results of everything else.  What
# still fails is in $BUILD/failures/NAME, with both failures; tools/check
# prints these files last, where CI's excerpt of the output shows them.
# Leaves the flaky tests' names in RERUN_FLAKY; returns the final status.
run_and_rerun() {
	local name=$1 run=$2 failed=$3 digest=$4 status=0 t
	local fdir=$BUILD/failures
	local -a first=() still=()
	RERUN_FLAKY=()
	mkdir -p "$fdir"
	rm -f "$fdir/$name" "$fdir/flaky-$name"
	RERUN_PASS=1 "$run" || status=$?
	[ $status -eq 0 ] && return 0
	mapfile -t first < <(RERUN_PASS=1 "$failed")
	RERUN_PASS=1 "$digest" >"$fdir/.$name-first" 2>&1 || true
	if [ ${#first[@]} -gt 0 ] && [ ${#first[@]} -le "${RERUN_MAX:-5}" ]; then
		say "$name: running once more what failed: ${first[*]}"
		status=0
		RERUN_PASS=2 "$run" "${first[@]}" || status=$?
		mapfile -t still < <(RERUN_PASS=2 "$failed")
		for t in "${first[@]}"; do
			[[ " ${still[*]} " == *" $t "* ]] || RERUN_FLAKY+=("$t")
		done
		# A second run that failed without naming a test (it stopped
		# early) leaves them all failed.
		[ $status -eq 0 ] || [ ${#still[@]} -gt 0 ] || RERUN_FLAKY=()
		if [ $status -ne 0 ]; then
			{
				cat "$fdir/.$name-first"
				echo "-- when run again:"
				RERUN_PASS=2 "$digest"
			} >"$fdir/$name" 2>&1 || true
		elif [ ${#RERUN_FLAKY[@]} -gt 0 ]; then
			cp "$fdir/.$name-first" "$fdir/flaky-$name"
		fi
	else
		status=1
		cp "$fdir/.$name-first" "$fdir/$name"
	fi
	rm -f "$fdir/.$name-first"
	[ -s "$fdir/$name" ] && cat "$fdir/$name" >&2
	return $status
}

# Run a command as the test user (or as ourselves when we are that user).
as_test_user() {
	if [ "$(id -un)" = "$TEST_USER" ]; then
		"$@"
	else
		runuser -u "$TEST_USER" -- "$@"
	fi
}
