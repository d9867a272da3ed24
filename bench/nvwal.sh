#!/usr/bin/env bash
# Commit throughput and latency with the non-volatile WAL buffer (nvwal):
# vanilla PostgreSQL with WAL on disk, with pg_wal on tmpfs and with
# synchronous_commit off, against the patched server with its WAL buffers in
# a file on tmpfs, side by side in one run.
#
# There is no real persistent memory here: the nvwal file lies on /dev/shm
# and the server runs with PMEM_IS_PMEM_FORCE=1, so that libpmem takes it
# for pmem and flushes with cache-line write-back instead of msync().
#
# Each variant gets its own cluster (initdb, pgbench -i at SCALE), all
# running at once on their own ports.  Then, for ROUNDS rounds, for each
# client count, each variant in turn (the order rotates from round to round
# so that drift affects all alike): a CHECKPOINT, WARMUP seconds of pgbench,
# and DURATION seconds of pgbench TPC-B.  Each round ends with the commit
# latency of every variant: one client inserting one row per transaction.
# The report gives the median TPS per variant and client count, the ratios
# against the targets, the commit latencies, and what pg_stat_nvwal counted.
#
# TPS on this shared machine varies between rounds by more than the
# differences asked about.  So each measured run is also counted with
# `perf stat -a` (CPU cycles and instructions of the whole machine, pgbench
# included, divided by the transactions): at 4 and 8 clients both CPUs are
# busy and throughput is what the CPUs can do per transaction, and these
# counts repeat far better than times do.  COUNT_CPU=0 turns that off; it is
# off by itself where perf cannot count.  The server's own CPU time (user
# and system time of its processes, from /proc) is recorded for every run
# in any case, and reported per transaction.
#
# Needs root (servers run as the test user, who must own the tmpfs
# directories) and the optimized builds, which it brings up to date with
# tools/build (NO_BUILD=1 skips that).
# nvwal-async runs NVWAL with synchronous_commit = off, where the WAL writer
# alone makes the ring durable and writes it back: compared with async, it
# shows what NVWAL costs a workload that does not wait for its commits.
# nvwal-base runs nvwal on the install at build/install/base-opt, a copy of
# an earlier patched-opt install (cp -a build/install/patched-opt
# build/install/base-opt before a change), to compare before and after.
# Usage: bench/nvwal.sh [VARIANT...]
set -euo pipefail
. "$(dirname "$0")/../tools/lib.sh"

SCALE=${SCALE:-20}
# This shared 2-CPU machine drifts by 10-30% within minutes: many short
# rounds, each comparing the variants back to back, give steadier medians
# than a few long ones.
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-10}
CLIENTS=${CLIENTS:-"1 4 8"}
NVWAL_SIZE=${NVWAL_SIZE:-256MB}
FSYNC_SECS=${FSYNC_SECS:-2}		# pg_test_fsync -s; 0 skips it
COUNT_CPU=${COUNT_CPU:-1}
WORK=${BENCH_DIR:-$BUILD/bench/nvwal}
SHM=${BENCH_SHM:-/dev/shm/pg-nvwal-bench}
OUT=${BENCH_OUT:-$TOP/bench/results}
PORT=${BENCH_PORT:-54500}

# name | build | settings appended to postgresql.conf | environment of the
# server | where pg_wal lives
VARIANTS=(
	"disk|vanilla|||disk"
	"tmpfs|vanilla|||tmpfs"
	"nvwal|patched|nvwal_path = '$SHM/nvwal.buf';nvwal_size = $NVWAL_SIZE|PMEM_IS_PMEM_FORCE=1|disk"
	"async|vanilla|synchronous_commit = off||disk"
	"patched-disk|patched|||disk"
	"nvwal-async|patched|nvwal_path = '$SHM/nvwal-async.buf';nvwal_size = $NVWAL_SIZE;synchronous_commit = off|PMEM_IS_PMEM_FORCE=1|disk"
	"nvwal-base|base|nvwal_path = '$SHM/nvwal-base.buf';nvwal_size = $NVWAL_SIZE|PMEM_IS_PMEM_FORCE=1|disk"
)

[ "$(id -u)" = 0 ] ||
	die "this benchmark needs root: servers run as $TEST_USER, who must own directories on /dev/shm"
case $SHM in /dev/shm/?*) ;; *) die "BENCH_SHM must be a directory under /dev/shm" ;; esac

bin_of() { echo "$INSTALL/$1-opt/bin"; }

selected=("$@")
names=()
declare -A BUILD_OF SETTINGS_OF ENV_OF WALDIR_OF PORT_OF
i=0
for v in "${VARIANTS[@]}"; do
	IFS='|' read -r name build settings env waldir <<<"$v"
	if [ ${#selected[@]} -gt 0 ] && ! printf '%s\n' "${selected[@]}" | grep -qx "$name"; then
		continue
	fi
	names+=("$name")
	BUILD_OF[$name]=$build SETTINGS_OF[$name]=$settings ENV_OF[$name]=$env WALDIR_OF[$name]=$waldir
	PORT_OF[$name]=$((PORT + i))
	i=$((i + 1))
done
[ ${#names[@]} -gt 0 ] || die "no variant selected (variants: $(printf '%s\n' "${VARIANTS[@]}" | cut -d'|' -f1 | xargs))"

# The optimized builds the selected variants run.
builds=$(printf '%s\n' "${BUILD_OF[@]}" | sort -u)
for b in $builds; do
	[ -n "${NO_BUILD:-}" ] || [ "$b" = base ] || "$TOP/tools/build" "$b" opt >&2 ||
		die "building $b-opt failed"
	[ -x "$(bin_of "$b")/postgres" ] || die "no $b-opt build; run 'tools/build $b opt' (for base: copy an earlier patched-opt install there)"
	if [[ $b == patched* || $b == base ]]; then
		ldd "$(bin_of "$b")/postgres" | grep -q libpmem ||
			die "the $b-opt build is not linked with libpmem; rebuild it with 'tools/build $b opt'"
	fi
done

data_of() { echo "$WORK/$1"; }

# Run a client program of a variant's build against that variant's server.
pgv() {
	local name=$1
	shift
	as_test_user env PATH="$(bin_of "${BUILD_OF[$name]}"):$PATH" PGHOST="$WORK" \
		PGPORT="${PORT_OF[$name]}" PGDATABASE=postgres "$@"
}

started=()
PERF_PID=
cleanup() {
	local rc=$? name
	[ -z "$PERF_PID" ] || kill -INT "$PERF_PID" 2>/dev/null || true
	for name in ${started[@]+"${started[@]}"}; do
		[ -f "$(data_of "$name")/postmaster.pid" ] &&
			pgv "$name" pg_ctl -D "$(data_of "$name")" -m fast stop >/dev/null 2>&1 ||
			true
	done
	# The tmpfs cluster's pg_wal is in here: it goes too, but the script
	# initializes every cluster afresh anyway.
	rm -rf "$SHM"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

start_server() {
	local name=$1 env=()
	[ -z "${ENV_OF[$name]}" ] || read -ra env <<<"${ENV_OF[$name]}"
	pgv "$name" env ${env[@]+"${env[@]}"} pg_ctl -D "$(data_of "$name")" \
		-l "$WORK/$name.log" -w -t 600 start >/dev/null ||
		{ tail -n 20 "$WORK/$name.log" >&2; die "$name: server did not start (log: $WORK/$name.log)"; }
	started+=("$name")
}

make_cluster() {
	local name=$1 data waldir=()
	data=$(data_of "$name")
	if [ "${WALDIR_OF[$name]}" = tmpfs ]; then
		waldir=(--waldir="$SHM/$name-wal")
	fi
	pgv "$name" initdb -D "$data" -N -A trust --no-instructions ${waldir[@]+"${waldir[@]}"} >/dev/null
	{
		cat <<CONF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = ${PORT_OF[$name]}
shared_buffers = 1GB
max_wal_size = 4GB
checkpoint_timeout = 30min
autovacuum = off
log_checkpoints = on
CONF
		[ -z "${SETTINGS_OF[$name]}" ] || tr ';' '\n' <<<"${SETTINGS_OF[$name]}"
	} >>"$data/postgresql.conf"
	start_server "$name"
	pgv "$name" pgbench -i -s "$SCALE" -q 2>&1 | tail -n 1 >&2
	pgv "$name" psql -qX -v ON_ERROR_STOP=1 -c 'CREATE TABLE t (id bigint, at timestamptz)'
}

# pg_stat_nvwal must show the buffer in use, as pmem, on the nvwal variant,
# and nothing on the others that the patched build runs.
check_nvwal() {
	local name=$1 rows
	[[ ${BUILD_OF[$name]} == patched* || ${BUILD_OF[$name]} == base ]] || return 0
	rows=$(pgv "$name" psql -XAtq -F ' ' -c 'SELECT path, size, is_pmem FROM pg_stat_nvwal')
	if [[ ${SETTINGS_OF[$name]} == *nvwal_path* ]]; then
		read -r path size is_pmem <<<"$rows"
		[ "${is_pmem:-}" = t ] ||
			die "$name: pg_stat_nvwal does not show a pmem buffer (got '$rows'); is PMEM_IS_PMEM_FORCE=1 reaching the server?"
		[ -f "$path" ] || die "$name: no nvwal file at $path"
		say "$name: pg_stat_nvwal: path $path, size $size, is_pmem $is_pmem"
	else
		[ -z "$rows" ] || die "$name: nvwal should be off, but pg_stat_nvwal shows '$rows'"
	fi
}

# Whether perf can count cycles and instructions for the whole machine here
# (root, and a virtual machine that passes the counters through).
cpu_counters_work() {
	local out
	out=$(perf stat -a -x, -e cycles,instructions -- true 2>&1 >/dev/null) || return 1
	[ "$(awk -F, '$1 ~ /^[0-9]+$/ && ($3 ~ /^cycles/ || $3 ~ /^instructions/)' <<<"$out" | wc -l)" = 2 ]
}

# Start counting cycles and instructions on every CPU, in the background.
start_cpu_count() {
	perf stat -a -x, -e cycles,instructions -o "$WORK/perf.csv" &
	PERF_PID=$!
}

# Stop it (in this shell: perf is its child) and leave "cycles=N,instructions=N"
# in CPU_COUNT.
stop_cpu_count() {
	kill -INT "$PERF_PID"
	wait "$PERF_PID" || true
	PERF_PID=
	CPU_COUNT=$(awk -F, '$1 ~ /^[0-9]+$/ && $3 ~ /^cycles/ {c = $1}
		$1 ~ /^[0-9]+$/ && $3 ~ /^instructions/ {i = $1}
		END {if (c != "" && i != "") printf "cycles=%s,instructions=%s", c, i}' "$WORK/perf.csv")
}

# WAL writes and fsyncs of every process (pg_stat_io; counted whether or not
# track_wal_io_timing is on).  They show how often the WAL writer and the
# committers went to pg_wal, which is what the WAL writer's pace decides.
wal_io_counters() {
	pgv "$1" psql -XAtq -F ' ' -c "SELECT coalesce(sum(writes), 0), coalesce(sum(fsyncs), 0)
		FROM pg_stat_io WHERE object = 'wal' AND context = 'normal'"
}

# CPU time of a server in clock ticks, user and system: the postmaster's
# own, that of the children it has reaped (the backends of finished
# pgbench runs), and that of the children still running.  Taken before and
# after a run, it gives the server's CPU time per transaction, which perf
# cannot count on every machine.
server_cpu_ticks() {
	local pm pid total=0 f
	pm=$(head -n 1 "$(data_of "$1")/postmaster.pid")
	read -r -a f <<<"$(sed 's/^.*) //' "/proc/$pm/stat")"
	# Fields 14-17 of stat, counted from 3 after the command name.
	total=$((f[11] + f[12] + f[13] + f[14]))
	for pid in $(pgrep -P "$pm"); do
		read -r -a f <<<"$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null)" || continue
		[ ${#f[@]} -gt 12 ] && total=$((total + f[11] + f[12]))
	done
	echo "$total"
}

nvwal_counters() {
	pgv "$1" psql -XAtq -F ' ' -c 'SELECT flushes, ring_full, written_back FROM pg_stat_nvwal'
}

# One measured run: a checkpoint, a warm-up and the run itself.  Appends
# "kind clients variant round tps latency_ms transactions stats" to runs.
measure() {
	local kind=$1 clients=$2 name=$3 round=$4 jobs script=() warmup=() before= after stats=- out
	local io_before io_after cpu_before cpu_after
	jobs=$((clients < 2 ? clients : 2))
	if [ "$kind" = commit ]; then
		script=(-f "$WORK/insert.sql")
		warmup=(-n)
		pgv "$name" psql -qX -c 'TRUNCATE t'
	fi
	pgv "$name" psql -qX -c CHECKPOINT
	# The checkpoint leaves dirty data in the kernel's page cache; written
	# back now, it does not fall into the measured run of the next variant.
	sync
	# For TPC-B the warm-up also does pgbench's vacuum of branches and
	# tellers and truncates history, so every measured run starts alike.
	pgv "$name" pgbench ${warmup[@]+"${warmup[@]}"} ${script[@]+"${script[@]}"} \
		-c "$clients" -j "$jobs" -T "$WARMUP" >/dev/null 2>&1 ||
		die "$name: warm-up failed"
	[[ ${BUILD_OF[$name]} == patched* || ${BUILD_OF[$name]} == base ]] && before=$(nvwal_counters "$name")
	io_before=$(wal_io_counters "$name")
	cpu_before=$(server_cpu_ticks "$name")
	[ "$COUNT_CPU" = 0 ] || start_cpu_count
	out=$(pgv "$name" pgbench -n ${script[@]+"${script[@]}"} -c "$clients" -j "$jobs" -T "$DURATION" 2>&1) ||
		{ echo "$out" >&2; die "$name: pgbench failed"; }
	CPU_COUNT=
	[ "$COUNT_CPU" = 0 ] || stop_cpu_count
	# The run's backends have exited, or are about to, and been reaped.
	sleep 0.5
	cpu_after=$(server_cpu_ticks "$name")
	# Statistics reach pg_stat_io when a process reports them, up to a
	# second or so late; over a run of several seconds that is a small error.
	io_after=$(wal_io_counters "$name")
	if [ -n "$before" ]; then
		after=$(nvwal_counters "$name")
		read -r f0 r0 w0 <<<"$before"
		read -r f1 r1 w1 <<<"$after"
		stats="flushes=$((f1 - f0)),ring_full=$((r1 - r0)),written_back=$((w1 - w0))"
	fi
	read -r w0 s0 <<<"$io_before"
	read -r w1 s1 <<<"$io_after"
	[ "$stats" = - ] && stats= || stats+=,
	stats+="wal_writes=$((w1 - w0)),wal_fsyncs=$((s1 - s0))"
	[ -z "$CPU_COUNT" ] || stats+=",$CPU_COUNT"
	stats+=",server_cpu_us=$(((cpu_after - cpu_before) * 1000000 / $(getconf CLK_TCK)))"
	local tps lat txns
	tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out")
	lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
	txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
	[ -n "$tps" ] && [ -n "$lat" ] || { echo "$out" >&2; die "$name: no tps or latency in pgbench's output"; }
	echo "$kind $clients $name $round $tps $lat $txns $stats" | tee -a "$WORK/runs" >&2
}

rm -rf "$WORK" "$SHM"
mkdir -p "$WORK" "$OUT"
prepare_test_user "$WORK" "$SHM"
chmod 755 "$WORK"
chmod 700 "$SHM"
printf '\\set id random(1, 1000000000)\nINSERT INTO t VALUES (:id, now());\n' >"$WORK/insert.sql"
chown "$TEST_USER:" "$WORK/insert.sql"

if [ "$COUNT_CPU" != 0 ] && ! cpu_counters_work; then
	say "perf cannot count cycles and instructions here: the report gives TPS only"
	COUNT_CPU=0
fi

if [ "$FSYNC_SECS" != 0 ]; then
	say "pg_test_fsync -s $FSYNC_SECS in $WORK, for context"
	as_test_user "$(bin_of vanilla)/pg_test_fsync" -s "$FSYNC_SECS" -f "$WORK/pg_test_fsync.tmp" \
		>"$WORK/pg_test_fsync.txt" 2>&1 || say "pg_test_fsync failed (see $WORK/pg_test_fsync.txt)"
	rm -f "$WORK/pg_test_fsync.tmp"
fi

for name in "${names[@]}"; do
	say "$name: initializing a cluster (${BUILD_OF[$name]}), pgbench scale $SCALE"
	make_cluster "$name"
	check_nvwal "$name"
done

: >"$WORK/runs"
for round in $(seq 1 "$ROUNDS"); do
	# Rotate the order of the variants by one each round.
	rot=$(((round - 1) % ${#names[@]}))
	order=("${names[@]:rot}" "${names[@]:0:rot}")
	for c in $CLIENTS; do
		for name in "${order[@]}"; do
			say "round $round/$ROUNDS, $c client(s): $name"
			measure tpcb "$c" "$name" "$round"
		done
	done
	for name in "${order[@]}"; do
		say "round $round/$ROUNDS, commit latency: $name"
		measure commit 1 "$name" "$round"
	done
done

# Still pmem at the end, and no checkpoint other than ours (shutdown comes
# after this) that could have fallen into a measured run.
: >"$WORK/checkpoints"
for name in "${names[@]}"; do
	check_nvwal "$name"
	echo "$name $(grep -cE 'checkpoint starting: .*(wal|time)' "$WORK/$name.log" || true)" >>"$WORK/checkpoints"
done

desc="pgbench TPC-B scale $SCALE, ${DURATION}s runs after ${WARMUP}s warm-up, $ROUNDS round(s),"
desc+=" shared_buffers 1GB, max_wal_size 4GB, checkpoint_timeout 30min, autovacuum off, nvwal_size $NVWAL_SIZE;"
desc+=" $(nproc) CPUs, $(uname -r)"
python3 "$TOP/bench/nvwal_report.py" "$WORK" "$OUT" "$desc" | tee "$OUT/nvwal.txt"
