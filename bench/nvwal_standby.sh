#!/usr/bin/env bash
# Commit latency on a primary with a synchronous standby, with and without a
# non-volatile WAL buffer (NVWAL) on the standby.
#
# One primary (no NVWAL, pg_wal on disk, fsync on) streams to two standbys
# on this machine at once, both with pg_wal on disk and fsync on: "plain"
# without NVWAL, and "nvwal" with its file on /dev/shm (PMEM_IS_PMEM_FORCE=1:
# libpmem takes it for persistent memory).  Each variant makes one of them
# the synchronous standby (synchronous_standby_names, reloaded) and runs
# pgbench with a one-row INSERT per transaction at one synchronous_commit
# level:
#
#   plain-on, plain-remote_write, plain-remote_apply, nvwal-on,
#   nvwal-remote_apply
#
# For ROUNDS rounds, for each client count, the variants run in turn, the
# order rotating from round to round, DURATION seconds each after WARMUP.
# pgbench logs every transaction's latency; the report gives TPS, mean,
# median and p99 latency and the transactions over 100 ms per variant, and
# ratios of mean and of median latency within each round (median and range
# over the rounds), among them the target: nvwal-on's latency over
# plain-remote_write's.  Rare stalls of a second or more (seen without
# NVWAL too) move the mean far more than the median.
#
# Needs root (servers run as the test user) and the patched optimized build,
# which it brings up to date with tools/build (NO_BUILD=1 skips that).
# Usage: bench/nvwal_standby.sh
set -euo pipefail
. "$(dirname "$0")/../tools/lib.sh"

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-5}
CLIENTS=${CLIENTS:-"1 8"}
WORK=${BENCH_DIR:-$BUILD/bench/nvwal-standby}
SHM=${BENCH_SHM:-/dev/shm/pg-nvwal-standby-bench}
OUT=${BENCH_OUT:-$TOP/bench/results}
PORT=${BENCH_PORT:-54600}
VARIANTS=(plain-on plain-remote_write plain-remote_apply nvwal-on nvwal-remote_apply)

[ "$(id -u)" = 0 ] ||
	die "this benchmark needs root: servers run as $TEST_USER, who must own a directory on /dev/shm"
case $SHM in /dev/shm/?*) ;; *) die "BENCH_SHM must be a directory under /dev/shm" ;; esac

[ -n "${NO_BUILD:-}" ] || "$TOP/tools/build" patched opt >&2 || die "building patched-opt failed"
BIN=$INSTALL/patched-opt/bin
[ -x "$BIN/postgres" ] || die "no patched-opt build; run 'tools/build patched opt'"

declare -A PORT_OF=([primary]=$PORT [plain]=$((PORT + 1)) [nvwal]=$((PORT + 2)))

pg() {
	local node=$1
	shift
	as_test_user env PATH="$BIN:$PATH" PGHOST="$WORK" PGPORT="${PORT_OF[$node]}" \
		PGDATABASE=postgres PMEM_IS_PMEM_FORCE=1 "$@"
}

started=()
cleanup() {
	local rc=$? node
	for node in ${started[@]+"${started[@]}"}; do
		[ -f "$WORK/$node/postmaster.pid" ] &&
			pg "$node" pg_ctl -D "$WORK/$node" -m fast stop >/dev/null 2>&1 || true
	done
	rm -rf "$SHM"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

start_node() {
	local node=$1
	pg "$node" pg_ctl -D "$WORK/$node" -l "$WORK/$node.log" -w -t 600 start >/dev/null ||
		{ tail -n 20 "$WORK/$node.log" >&2; die "$node: server did not start (log: $WORK/$node.log)"; }
	started+=("$node")
}

rm -rf "$WORK" "$SHM"
mkdir -p "$WORK" "$SHM" "$OUT"
chown "$TEST_USER" "$WORK" "$SHM"

pg primary initdb -D "$WORK/primary" -N -A trust --no-instructions >/dev/null
cat >>"$WORK/primary/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = ${PORT_OF[primary]}
shared_buffers = 256MB
max_wal_size = 4GB
checkpoint_timeout = 30min
autovacuum = off
max_wal_senders = 4
CONF
echo "local replication all trust" >>"$WORK/primary/pg_hba.conf"
start_node primary
pg primary psql -qX -v ON_ERROR_STOP=1 -c 'CREATE TABLE t (id bigint, at timestamptz)'

for node in plain nvwal; do
	pg primary pg_basebackup -D "$WORK/$node" -X stream -R >/dev/null
	cat >>"$WORK/$node/postgresql.conf" <<CONF
port = ${PORT_OF[$node]}
cluster_name = '$node'
primary_conninfo = 'host=$WORK port=${PORT_OF[primary]} application_name=$node'
CONF
	[ "$node" = plain ] ||
		printf "nvwal_path = '%s'\nnvwal_size = 256MB\n" "$SHM/standby.nvwal" >>"$WORK/$node/postgresql.conf"
	start_node "$node"
done
[ "$(pg nvwal psql -XAtq -c 'SELECT is_pmem FROM pg_stat_nvwal')" = t ] ||
	die "the nvwal standby does not show a pmem buffer in pg_stat_nvwal"

echo "INSERT INTO t VALUES (1, now());" >"$WORK/insert.sql"
chown "$TEST_USER" "$WORK/insert.sql"

# One run: make the variant's standby synchronous, then pgbench at the
# variant's synchronous_commit.  Prints "tps mean_ms p99_ms median_ms
# stalls" (stalls: transactions over 100 ms).
run_variant() {
	local variant=$1 clients=$2 standby level logdir
	standby=${variant%%-*} level=${variant#*-}
	pg primary psql -qX -c "ALTER SYSTEM SET synchronous_standby_names = '$standby'" \
		-c 'SELECT pg_reload_conf()' >/dev/null
	# Until the standby is the synchronous one and has caught up.
	for _ in $(seq 1 100); do
		pg primary psql -qXAt -c "SELECT 1 FROM pg_stat_replication WHERE application_name = '$standby' AND sync_state = 'sync' AND flush_lsn >= pg_current_wal_insert_lsn()" |
			grep -q 1 && break
		sleep 0.1
	done
	pg primary env PGOPTIONS="-c synchronous_commit=$level" \
		pgbench -n -f "$WORK/insert.sql" -c "$clients" -j "$clients" -T "$WARMUP" >/dev/null 2>&1
	logdir=$WORK/log-$variant-$clients
	rm -rf "$logdir"
	mkdir -p "$logdir"
	chown "$TEST_USER" "$logdir"
	(cd "$logdir" && pg primary env PGOPTIONS="-c synchronous_commit=$level" \
		pgbench -n -f "$WORK/insert.sql" -c "$clients" -j "$clients" -T "$DURATION" -l >/dev/null 2>&1)
	python3 - "$logdir" "$DURATION" <<'PY'
import glob, sys
lat = []
for f in glob.glob(sys.argv[1] + '/pgbench_log.*'):
    for line in open(f):
        lat.append(int(line.split()[2]))
lat.sort()
print(f"{len(lat) / float(sys.argv[2]):.1f} {sum(lat) / len(lat) / 1000:.3f} "
      f"{lat[int(0.99 * (len(lat) - 1))] / 1000:.3f} "
      f"{lat[int(0.5 * (len(lat) - 1))] / 1000:.3f} "
      f"{sum(1 for x in lat if x > 100000)}")
PY
}

raw=$WORK/runs.txt
: >"$raw"
for round in $(seq 1 "$ROUNDS"); do
	for clients in $CLIENTS; do
		n=${#VARIANTS[@]}
		for k in $(seq 0 $((n - 1))); do
			variant=${VARIANTS[$(((k + round) % n))]}
			echo "$round $clients $variant $(run_variant "$variant" "$clients")" | tee -a "$raw" >&2
		done
	done
done

report=$OUT/nvwal-standby.txt
{
	echo "Measured $(date -u +%Y-%m-%d) on commit $(git -C "$TOP" rev-parse --short HEAD)."
	echo "Primary and synchronous standby on one 2-core machine, pg_wal of all on disk, fsync on;"
	echo "one-row INSERT, $ROUNDS round(s) of ${DURATION}s per variant and client count."
	python3 "$TOP/bench/nvwal_standby_report.py" "$raw"
} >"$report"
cat "$report"
