#!/usr/bin/env bash
# An emulated cloud volume for benchmarks: a block device whose reads and
# writes take LATENCY each, with an IOPS cap, and an ext4 file system on it.
#
#   bench/cloud_device.sh up       set it up, mounted at $CLOUD_DIR/fs
#   bench/cloud_device.sh fio      measure it (8kB random reads, queue
#                                  depth 1 and 32), into $CLOUD_DIR/fio.txt
#   bench/cloud_device.sh down     tear it down
#
# The chain: nbdkit's file plugin over a sparse file, with its delay
# filter; nbdfuse, which shows the NBD export as a file; a loop device with
# direct I/O on that file (no second page cache); ext4.  The IOPS cap is
# the cgroup v1 blkio throttle of the loop device, for the processes in the
# cgroup $CLOUD_CGROUP (put the server there: echo PID >
# /sys/fs/cgroup/blkio/$CLOUD_CGROUP/cgroup.procs); a 128kB read counts as
# one, as on cloud volumes.  Needs root, nbdkit, nbdfuse (libnbd-bin), FUSE
# and loop devices; it says which is missing.
#
# Its limits, measured with "fio" here (2 CPUs): the chain adds about 0.2ms
# per request (1.35ms at depth 1 with LATENCY=1ms; the delay filter takes
# whole milliseconds only), and libfuse (3.14) serves at most 10 requests at
# a time, which nbdfuse cannot raise, so the device gives about 10 /
# (LATENCY + 0.35ms) IOPS at any depth: 7.3k at depth 32 with 1ms.  Without
# delay it gives 20k at depth 32, and the cap of 16000 holds it at 16.0k.
#
# Settings: LATENCY (default 1ms, whole milliseconds), READ_IOPS and WRITE_IOPS (default
# 16000, 0 for none), SIZE of the device (default 16G, sparse),
# CONNECTIONS from nbdfuse to nbdkit (default 32: each carries one request
# at a time), THREADS of nbdkit (default 64), CLOUD_DIR (default
# build/cloud), CLOUD_CGROUP (default pg-cloud).
set -euo pipefail
. "$(dirname "$0")/../tools/lib.sh"

LATENCY=${LATENCY:-1ms}
READ_IOPS=${READ_IOPS:-16000}
WRITE_IOPS=${WRITE_IOPS:-16000}
SIZE=${SIZE:-16G}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-64}
CLOUD_DIR=${CLOUD_DIR:-$BUILD/cloud}
CLOUD_CGROUP=${CLOUD_CGROUP:-pg-cloud}
FUSE_BACKGROUND=${FUSE_BACKGROUND:-256}

sock=$CLOUD_DIR/nbd.sock
file=$CLOUD_DIR/mnt/disk
cgroup=/sys/fs/cgroup/blkio/$CLOUD_CGROUP

need() {
	[ "$(id -u)" = 0 ] || die "the cloud device needs root"
	local c
	for c in nbdkit nbdfuse losetup mkfs.ext4 fusermount3; do
		command -v "$c" >/dev/null ||
			die "$c is missing (apt-get install nbdkit libnbd-bin fuse3 e2fsprogs util-linux)"
	done
	[ -c /dev/fuse ] || die "no /dev/fuse: this machine has no FUSE"
	[ -d /sys/fs/cgroup/blkio ] ||
		die "no cgroup v1 blkio hierarchy at /sys/fs/cgroup/blkio: no IOPS cap possible"
}

# The loop device is recorded when it is attached: losetup -j cannot find it
# by the FUSE file's name.
loop_device() {
	local loop
	[ -f "$CLOUD_DIR/loop" ] || return 0
	loop=$(cat "$CLOUD_DIR/loop")
	[ -e "/sys/block/${loop#/dev/}/loop" ] && echo "$loop"
	return 0
}

# FUSE lets a connection have only max_background requests in flight (12
# by default), which would cap the device far below its IOPS.
raise_fuse_limits() {
	local conn
	mountpoint -q /sys/fs/fuse/connections ||
		mount -t fusectl none /sys/fs/fuse/connections
	conn=$(stat -c %d "$CLOUD_DIR/mnt")
	# the connection is named by the device number's minor
	conn=$((conn & 0xff | (conn >> 12 & 0xfff00)))
	[ -d "/sys/fs/fuse/connections/$conn" ] ||
		die "cannot find the FUSE connection of $CLOUD_DIR/mnt"
	echo "$FUSE_BACKGROUND" >"/sys/fs/fuse/connections/$conn/max_background"
	echo $((FUSE_BACKGROUND * 3 / 4)) >"/sys/fs/fuse/connections/$conn/congestion_threshold"
}

up() {
	need
	[ -z "$(loop_device)" ] || die "the cloud device is up already ($(loop_device)); run '$0 down' first"
	mkdir -p "$CLOUD_DIR/mnt" "$CLOUD_DIR/fs"
	rm -f "$CLOUD_DIR/backing.img" "$sock"
	truncate -s "$SIZE" "$CLOUD_DIR/backing.img"
	say "nbdkit: $SIZE, $LATENCY per read and write, $THREADS threads"
	nbdkit -U "$sock" -P "$CLOUD_DIR/nbdkit.pid" --threads "$THREADS" \
		--filter=delay file "$CLOUD_DIR/backing.img" \
		delay-read="$LATENCY" delay-write="$LATENCY" delay-zero="$LATENCY" delay-trim=0
	nbdfuse -C "$CONNECTIONS" -P "$CLOUD_DIR/nbdfuse.pid" "$file" --unix "$sock" &
	for _ in $(seq 50); do [ -f "$file" ] && break; sleep 0.1; done
	[ -f "$file" ] || die "nbdfuse did not show the export as $file"
	raise_fuse_limits
	local loop dev
	loop=$(losetup --direct-io=on -f --show "$file")
	echo "$loop" >"$CLOUD_DIR/loop"
	[ "$(cat "/sys/block/${loop#/dev/}/loop/dio")" = 1 ] ||
		die "$loop does not use direct I/O on $file"
	mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
	mount -o noatime "$loop" "$CLOUD_DIR/fs"
	mkdir -p "$cgroup"
	dev=$(lsblk -no MAJ:MIN "$loop" | tr -d ' ')
	[ "$READ_IOPS" = 0 ] || echo "$dev $READ_IOPS" >"$cgroup/blkio.throttle.read_iops_device"
	[ "$WRITE_IOPS" = 0 ] || echo "$dev $WRITE_IOPS" >"$cgroup/blkio.throttle.write_iops_device"
	say "cloud device $loop ($dev) mounted at $CLOUD_DIR/fs; IOPS cap read $READ_IOPS, write $WRITE_IOPS for cgroup $cgroup"
}

down() {
	local loop
	mountpoint -q "$CLOUD_DIR/fs" 2>/dev/null && umount "$CLOUD_DIR/fs"
	loop=$(loop_device)
	[ -z "$loop" ] || losetup -d "$loop"
	mountpoint -q "$CLOUD_DIR/mnt" 2>/dev/null && fusermount3 -u "$CLOUD_DIR/mnt"
	[ -f "$CLOUD_DIR/nbdkit.pid" ] && kill "$(cat "$CLOUD_DIR/nbdkit.pid")" 2>/dev/null
	rm -f "$CLOUD_DIR/nbdkit.pid" "$CLOUD_DIR/nbdfuse.pid" "$CLOUD_DIR/backing.img" "$CLOUD_DIR/loop"
	[ -d "$cgroup" ] && rmdir "$cgroup" 2>/dev/null
	say "cloud device down"
}

# fio inside the cgroup, so that the cap applies.
measure() {
	command -v fio >/dev/null || die "fio is missing (apt-get install fio)"
	local loop qd out=$CLOUD_DIR/fio.txt
	loop=$(loop_device)
	[ -n "$loop" ] || die "the cloud device is not up; run '$0 up' first"
	{
		echo "cloud device: $LATENCY per request, read IOPS cap $READ_IOPS, $CONNECTIONS connections, $THREADS nbdkit threads, FUSE max_background $FUSE_BACKGROUND; $(nproc) CPUs, $(uname -r); $(date -u +%F)"
		for qd in 1 32; do
			echo "8kB random reads, O_DIRECT, io_uring, queue depth $qd:"
			sh -c "echo \$\$ >$cgroup/cgroup.procs && exec fio --name=cloud --filename=$loop \
				--direct=1 --rw=randread --bs=8k --iodepth=$qd --ioengine=io_uring \
				--runtime=10 --time_based --group_reporting" |
				grep -E '^ +(read:|clat \(|lat \()' | sed 's/^ */  /'
		done
	} | tee "$out"
}

case ${1:-} in
	up) up ;;
	down) down ;;
	fio) measure ;;
	*) die "usage: $0 up|fio|down" ;;
esac
