#!/usr/bin/env bash
# Crash recovery time with recovery prefetch: vanilla PostgreSQL against the
# patched server, side by side in one run, on copies of the same crashed
# cluster.
#
# For each row (ROWS), it makes one crashed cluster: pgbench -i at SCALE, a
# checkpoint, then, for rows "on" and "off" (full_page_writes), DURATION
# seconds of pgbench -N with CLIENTS clients, or, for row "ordered"
# (full_page_writes off), a DELETE of every 20th row of pgbench_accounts and
# a VACUUM of it, which change the table in block order, as bulk changes
# do: the case where the look-ahead combines neighbouring blocks.  Then an
# immediate stop.  Each variant then recovers a
# fresh copy of it, after the page cache has been dropped, with the server in
# a memory cgroup limited to MEMORY_LIMIT so that the data cannot all be
# cached; the "cached" variants instead read every file of the copy into the
# page cache in 8kB pieces (bench/warm_cache.py), lock it there (vmtouch -l:
# these VMs page out idle memory with DAMON) and run without a limit, the
# lower bound.  It reports the "redo done ... elapsed"
# time of each, the ratios, and plots replay progress (from
# log_startup_progress_interval) per variant.
#
# Needs root (cgroup, drop_caches) and the optimized builds (make
# bench-builds).  Usage: bench/recovery_prefetch.sh [VARIANT...]
#
# ROUNDS=N (default 1) recovers each chosen variant N times per row, the
# order rotated from round to round; the report gives median times, and
# ratios taken within each round, then their median and range: one run
# varies by 5-15% on this VM, more than some targets' margins.  The plots
# show the last round.
#
# Variants named *_bgw (vanilla_advice_bgw, ours_read_uring_bgw,
# vanilla_direct_bgw, ours_direct_bgw, vanilla_cached_bgw, ours_cached_bgw)
# run only when named: they add an aggressive background writer.  So do
# vanilla_direct_sized and ours_direct_sized (below) outside the cloud
# profile.
#
# PROFILE=cloud recovers on the emulated cloud volume of
# bench/cloud_device.sh (run "bench/cloud_device.sh up" first): each copy
# of the crashed cluster goes to its file system, the server runs in its
# blkio cgroup (the IOPS cap), and the report adds the read requests the
# device served per variant and the device's limit, max(all cached,
# requests / IOPS cap).  Its default variants are the ones that profile is
# for, among them *_direct_sized: direct I/O with shared_buffers sized as
# for direct I/O (DIRECT_SHARED_BUFFERS, default 1GB of the memory limit).
# The all-cached variants recover a copy on the local disk, as they read
# nothing from a device.
#
# PREV=DIR compares a change to the patched server with the server before it:
# DIR is an installation of the earlier patched build (for example a copy of
# build/install/patched-opt made before rebuilding it), and the variants
# prev_read_uring and prev_cached run it as ours_read_uring and ours_cached
# run the current one.
set -euo pipefail
. "$(dirname "$0")/../tools/lib.sh"

SCALE=${SCALE:-200}
DURATION=${DURATION:-120}
CLIENTS=${CLIENTS:-4}
MEMORY_LIMIT=${MEMORY_LIMIT:-1536M}
ROWS=${ROWS:-"on off"}
ROUNDS=${ROUNDS:-1}
WORK=${BENCH_DIR:-$BUILD/bench/recovery-prefetch}
OUT=${BENCH_OUT:-$TOP/bench/results}
PORT=${BENCH_PORT:-54400}
PROFILE=${PROFILE:-local}
CLOUD_DIR=${CLOUD_DIR:-$BUILD/cloud}
CLOUD_CGROUP=${CLOUD_CGROUP:-pg-cloud}
DIRECT_SHARED_BUFFERS=${DIRECT_SHARED_BUFFERS:-1GB}

# name | build | settings appended for the recovery | memory
VARIANTS=(
	"vanilla_off|vanilla|recovery_prefetch = off|limited"
	"vanilla_advice|vanilla|recovery_prefetch = on|limited"
	"vanilla_advice_deep|vanilla|recovery_prefetch = on;maintenance_io_concurrency = 100;wal_decode_buffer_size = 4MB|limited"
	"ours_read_uring|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring|limited"
	"ours_read_worker|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = worker|limited"
	"ours_read_single|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring;io_combine_limit = 1|limited"
	"ours_read_deep|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring;maintenance_io_concurrency = 100;wal_decode_buffer_size = 4MB|limited"
	"vanilla_direct|vanilla|recovery_prefetch = on;debug_io_direct = data|limited"
	"ours_direct|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring;debug_io_direct = data|limited"
	"vanilla_cached|vanilla|recovery_prefetch = off|cached"
	"ours_cached|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring|cached"
)
# Run only when named: the same with a background writer that cleans
# buffers ahead of the startup process's clock sweep (at defaults it writes
# at most 500 pages a second), so that the startup process has fewer dirty
# victims to write itself.
BGW="bgwriter_delay = 10ms;bgwriter_lru_maxpages = 1000;bgwriter_lru_multiplier = 10"
NAMED_ONLY=(
	"vanilla_advice_bgw|vanilla|recovery_prefetch = on;$BGW|limited"
	"ours_read_uring_bgw|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring;$BGW|limited"
	"vanilla_direct_bgw|vanilla|recovery_prefetch = on;debug_io_direct = data;$BGW|limited"
	"ours_direct_bgw|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring;debug_io_direct = data;$BGW|limited"
	"vanilla_cached_bgw|vanilla|recovery_prefetch = off;$BGW|cached"
	"ours_cached_bgw|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring;$BGW|cached"
	# direct I/O with shared_buffers sized for it
	"vanilla_direct_sized|vanilla|recovery_prefetch = on;debug_io_direct = data;shared_buffers = $DIRECT_SHARED_BUFFERS|limited"
	"ours_direct_sized|patched|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring;debug_io_direct = data;shared_buffers = $DIRECT_SHARED_BUFFERS|limited"
)
# ours_cached is left out: all cached does not depend on the device, and
# the local profile measures it.
CLOUD_DEFAULT="vanilla_off vanilla_advice vanilla_advice_deep ours_read_uring
	ours_read_deep vanilla_direct_sized ours_direct_sized vanilla_cached"
if [ -n "${PREV:-}" ]; then
	VARIANTS+=(
		"prev_read_uring|prev|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring|limited"
		"prev_cached|prev|recovery_prefetch = on;recovery_prefetch_method = read;io_method = io_uring|cached"
	)
fi

[ "$(id -u)" = 0 ] ||
	die "this benchmark needs root: it drops the page cache and puts the server in a memory cgroup"

bin_of() {
	if [ "$1" = prev ]; then
		echo "$PREV/bin"
	else
		echo "$INSTALL/$1-opt/bin"
	fi
}
for b in patched vanilla; do
	[ -x "$(bin_of $b)/postgres" ] || die "no $b-opt build; run 'make bench-builds'"
done
[ -z "${PREV:-}" ] || [ -x "$PREV/bin/postgres" ] || die "PREV=$PREV has no bin/postgres"
# The crashed clusters are made by the patched server, so that its runs can
# report pg_stat_recovery_prefetch; vanilla's copies get pg_control in
# vanilla's layout (bench/pg_control_vanilla.py, which compiles against both
# trees' headers).
[ -d "$VANILLA_SRC" ] || die "no vanilla tree; run 'make bench-builds'"

# On the cloud profile, copies go to the device's file system and the
# server joins its blkio cgroup.
COPY_DIR=$WORK BLKIO= CLOUD_LOOP= IOPS_CAP=0
if [ "$PROFILE" = cloud ]; then
	mountpoint -q "$CLOUD_DIR/fs" ||
		die "the cloud device is not mounted at $CLOUD_DIR/fs; run 'bench/cloud_device.sh up' first"
	COPY_DIR=$CLOUD_DIR/fs/recovery-prefetch
	BLKIO=/sys/fs/cgroup/blkio/$CLOUD_CGROUP
	CLOUD_LOOP=$(cat "$CLOUD_DIR/loop")
	IOPS_CAP=$(awk '{print $2}' "$BLKIO/blkio.throttle.read_iops_device")
	[ -n "$IOPS_CAP" ] || IOPS_CAP=0
elif [ "$PROFILE" != local ]; then
	die "PROFILE must be local or cloud"
fi

# Read requests the cloud device completed, and 8kB blocks read.
device_reads() {
	[ -n "$CLOUD_LOOP" ] || { echo "0 0"; return; }
	awk '{print $1, int($3 * 512 / 8192)}' "/sys/block/${CLOUD_LOOP#/dev/}/stat"
}

# A memory cgroup for the server (v1 or v2, whichever has the controller).
setup_cgroup() {
	local v1=/sys/fs/cgroup/memory v2=/sys/fs/cgroup
	if [ -f "$v1/memory.limit_in_bytes" ]; then
		local self
		self=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
		CGROUP=$v1$self/pgbench-recovery
		mkdir -p "$CGROUP"
		echo "$MEMORY_LIMIT" >"$CGROUP/memory.limit_in_bytes"
	elif grep -qw memory "$v2/cgroup.controllers" 2>/dev/null; then
		CGROUP=$v2/pgbench-recovery
		mkdir -p "$CGROUP"
		echo "$MEMORY_LIMIT" >"$CGROUP/memory.max"
	else
		die "no memory cgroup controller available; cannot hold the server's memory below the data size"
	fi
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

pg() {
	local build=$1
	shift
	as_test_user env PATH="$(bin_of "$build"):$PATH" PGHOST="$WORK" PGPORT=$PORT "$@"
}

# Start a server inside the cgroup (or not), and wait until it accepts
# connections, that is, until crash recovery is over.
start_server() {
	local build=$1 data=$2 memory=$3 log=$4 join=
	[ "$memory" != limited ] || join="echo \$\$ >'$CGROUP/cgroup.procs' && "
	[ -z "$BLKIO" ] || join+="echo \$\$ >'$BLKIO/cgroup.procs' && "
	bash -c "${join}exec runuser -u '$TEST_USER' -- '$(bin_of "$build")/pg_ctl' -D '$data' -l '$log' -w -t 3600 start" >/dev/null
}

# Clusters made by an earlier run are reused while the patched build's
# catalog version is the same; the marker names it.
DONE=.done-patched-$(sed -n 's/^#define CATALOG_VERSION_NO[[:space:]]*\([0-9]*\).*/\1/p' \
	"$SRC/src/include/catalog/catversion.h")

make_base() {
	local base=$WORK/base
	[ -f "$base/$DONE" ] && return
	say "initializing pgbench scale $SCALE"
	rm -rf "$base"
	pg patched initdb -D "$base" -N --no-instructions >/dev/null
	cat >>"$base/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = $PORT
shared_buffers = 128MB
max_wal_size = 100GB
min_wal_size = 1GB
checkpoint_timeout = 1d
autovacuum = off
log_startup_progress_interval = 250ms
CONF
	pg patched pg_ctl -D "$base" -l "$WORK/base.log" -w start >/dev/null
	pg patched pgbench -i -s "$SCALE" -q postgres 2>&1 | tail -n 1
	pg patched pg_ctl -D "$base" -m fast stop >/dev/null
	touch "$base/$DONE"
}

make_crashed() {
	local row=$1 dir=$WORK/crashed-fpw-$1 fpw=$1
	[ "$row" = ordered ] && fpw=off
	[ -f "$dir/$DONE" ] && return
	rm -rf "$dir"
	cp -a "$WORK/base" "$dir"
	rm -f "$dir"/.done-patched*
	echo "full_page_writes = $fpw" >>"$dir/postgresql.conf"
	pg patched pg_ctl -D "$dir" -l "$WORK/crashed-$row.log" -w start >/dev/null
	pg patched psql -qX -c checkpoint postgres
	if [ "$row" = ordered ]; then
		say "crashed cluster for row $row: DELETE of every 20th account, VACUUM"
		pg patched psql -qX -c 'DELETE FROM pgbench_accounts WHERE aid % 20 = 0' \
			-c 'VACUUM pgbench_accounts' postgres
	else
		say "crashed cluster with full_page_writes = $fpw: $DURATION s of pgbench -N -c $CLIENTS"
		pg patched pgbench -N -c "$CLIENTS" -j "$CLIENTS" -T "$DURATION" postgres 2>&1 |
			grep -E '^tps' || true
	fi
	pg patched pg_ctl -D "$dir" -m immediate stop >/dev/null
	touch "$dir/$DONE"
}

# Recover a copy of the crashed cluster; print the redo time in seconds and
# keep the progress lines for the plot.
recover() {
	local fpw=$1 name=$2 build=$3 settings=$4 memory=$5
	local copy=$COPY_DIR/copy log=$WORK/$name-fpw-$fpw.log
	# All cached reads nothing from any device, and warming a copy on the
	# cloud volume in 8kB reads would take many minutes.
	[ "$memory" != cached ] || copy=$WORK/copy
	rm -rf "$COPY_DIR/copy" "$WORK/copy"
	cp -a "$WORK/crashed-fpw-$fpw" "$copy"
	tr ';' '\n' <<<"$settings" >>"$copy/postgresql.conf"
	if [ "$build" = vanilla ]; then
		python3 "$TOP/bench/pg_control_vanilla.py" "$copy" "$SRC" "$MESON/patched-opt" \
			"$VANILLA_SRC" "$MESON/vanilla-opt"
	fi
	chown -R "$TEST_USER:" "$copy"
	rm -f "$log"
	drop_caches
	local locker=
	if [ "$memory" = cached ]; then
		python3 "$TOP/bench/warm_cache.py" "$copy"
		vmtouch -q -l -d -w -P "$WORK/vmtouch.pid" "$copy"
		locker=$(cat "$WORK/vmtouch.pid")
	fi
	local before after
	before=$(device_reads)
	start_server "$build" "$copy" "$memory" "$log"
	local stats=-
	if [ "$build" != vanilla ]; then
		stats=$(pg patched psql -XAtq -d postgres -c \
			"SELECT format('method=%s,reads=%s,blocks_read=%s,reads_cached=%s,read_waits=%s,pin_stalls=%s,prefetch=%s,hit=%s', method, reads, blocks_read, reads_cached, read_waits, pin_stalls, prefetch, hit) FROM pg_stat_recovery_prefetch")
	fi
	[ -n "$stats" ] || stats=-
	pg "$build" pg_ctl -D "$copy" -m immediate stop >/dev/null
	after=$(device_reads)
	[ -z "$locker" ] || kill "$locker"
	echo "$(sed -n 's/.*redo done at .* elapsed: \([0-9.]*\) s.*/\1/p' "$log") $stats" \
		"$(awk -v b="$before" -v a="$after" 'BEGIN { split(b, x, " "); split(a, y, " "); print y[1] - x[1], y[2] - x[2] }')"
}

mkdir -p "$WORK" "$OUT" "$COPY_DIR"
prepare_test_user "$WORK"
chmod 755 "$WORK" "$COPY_DIR"
setup_cgroup
make_base
for fpw in $ROWS; do
	make_crashed "$fpw"
done
chown -R "$TEST_USER:" "$WORK"

selected=("$@")
prefix=recovery-prefetch
[ "$PROFILE" = local ] || prefix=recovery-prefetch-$PROFILE
results=$OUT/$prefix.txt
[ "$ROWS" = "on off" ] || results=$OUT/$prefix-${ROWS// /-}.txt
: >"$WORK/times"
chosen=()
if [ ${#selected[@]} -eq 0 ] && [ "$PROFILE" = cloud ]; then
	read -r -a selected <<<"$(echo $CLOUD_DEFAULT)"
fi
if [ ${#selected[@]} -eq 0 ]; then
	chosen=("${VARIANTS[@]}")
else
	for v in "${VARIANTS[@]}" "${NAMED_ONLY[@]}"; do
		if printf '%s\n' "${selected[@]}" | grep -qx "${v%%|*}"; then
			chosen+=("$v")
		fi
	done
fi
[ ${#chosen[@]} -gt 0 ] || die "no variant named ${selected[*]}"
for fpw in $ROWS; do
	for round in $(seq 1 "$ROUNDS"); do
		# Rotate the order of the variants by one each round, so that drift
		# of the machine does not always favour the same ones.
		rot=$(((round - 1) % ${#chosen[@]}))
		for v in "${chosen[@]:rot}" "${chosen[@]:0:rot}"; do
			IFS='|' read -r name build settings memory <<<"$v"
			say "row $fpw, round $round/$ROUNDS: $name"
			read -r t stats ios blocks < <(recover "$fpw" "$name" "$build" "$settings" "$memory")
			case $t in [0-9]*) ;; *) die "no 'redo done' line for $name (log: $WORK/$name-fpw-$fpw.log)" ;; esac
			echo "$fpw $name $t $stats $round $ios $blocks" | tee -a "$WORK/times"
		done
	done
done
rm -rf "$COPY_DIR/copy" "$WORK/copy"

description="scale $SCALE, ${DURATION}s pgbench -N -c $CLIENTS or the ordered changes, shared_buffers 128MB, memory limit $MEMORY_LIMIT, $ROUNDS round(s)"
if [ "$PROFILE" = cloud ]; then
	description+="; on the emulated cloud volume, read IOPS cap $IOPS_CAP"
	[ ! -f "$CLOUD_DIR/fio.txt" ] || description+=$'\n'"$(cat "$CLOUD_DIR/fio.txt")"
fi
python3 "$TOP/bench/recovery_prefetch_report.py" "$WORK" "$OUT" "$description" "$prefix" "$IOPS_CAP" |
	tee "$results"
