#!/usr/bin/env bash
# An emulated cloud volume for benchmarks: a block device whose reads and
# writes take about LATENCY_US each at any queue depth, with an IOPS cap,
# and an ext4 file system on it.
#
#   bench/cloud_device.sh up       set it up, mounted at $CLOUD_DIR/fs
#   bench/cloud_device.sh fio      measure it (8kB random reads, queue
#                                  depth 1 and 32 under the cap, 32
#                                  without it), into $CLOUD_DIR/fio.txt
#   bench/cloud_device.sh down     tear it down
#
# The chain: bench/latency_device.c, a FUSE file system of one file backed
# by a sparse file, which answers each request LATENCY_US after it came; a
# loop device with direct I/O on that file (no second page cache); ext4.
# The IOPS cap is the cgroup v1 blkio throttle of the loop device, for the
# processes in the cgroup $CLOUD_CGROUP (put the server there: echo PID >
# /sys/fs/cgroup/blkio/$CLOUD_CGROUP/cgroup.procs); a 128kB read counts as
# one, as on cloud volumes.  Needs root, a C compiler, libfuse3-dev, FUSE
# and loop devices; it says which is missing.
#
# Measured with "fio" here (2 CPUs, 2026-12-03), FUSE's round trip adds
# about 0.2ms to LATENCY_US, hence its default of 850: 1.04ms per 8kB read
# at queue depth 1, and at depth 32 1.18ms and 26.9k IOPS without the cap
# (the daemon's CPU time is the limit), 16.0k with the default cap.
# bench/latency_device.c says why not nbdkit's delay filter and nbdfuse.
#
# Settings: LATENCY_US (default 850), WRITE_LATENCY_US (default
# LATENCY_US), READ_IOPS and WRITE_IOPS (default 16000, 0 for none), SIZE
# of the device (default 16G, sparse), THREADS (default 128), CLOUD_DIR
# (default build/cloud), CLOUD_CGROUP (default pg-cloud).
set -euo pipefail
. "$(dirname "$0")/../tools/lib.sh"

LATENCY_US=${LATENCY_US:-850}
WRITE_LATENCY_US=${WRITE_LATENCY_US:-$LATENCY_US}
READ_IOPS=${READ_IOPS:-16000}
WRITE_IOPS=${WRITE_IOPS:-16000}
SIZE=${SIZE:-16G}
THREADS=${THREADS:-128}
CLOUD_DIR=${CLOUD_DIR:-$BUILD/cloud}
CLOUD_CGROUP=${CLOUD_CGROUP:-pg-cloud}

file=$CLOUD_DIR/mnt/disk
daemon=$CLOUD_DIR/latency_device
cgroup=/sys/fs/cgroup/blkio/$CLOUD_CGROUP

need() {
	[ "$(id -u)" = 0 ] || die "the cloud device needs root"
	local c
	for c in cc pkg-config losetup mkfs.ext4 fusermount3; do
		command -v "$c" >/dev/null ||
			die "$c is missing (apt-get install build-essential pkg-config fuse3 e2fsprogs util-linux)"
	done
	pkg-config --exists fuse3 || die "libfuse3 is missing (apt-get install libfuse3-dev)"
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

up() {
	need
	[ -z "$(loop_device)" ] || die "the cloud device is up already ($(loop_device)); run '$0 down' first"
	mkdir -p "$CLOUD_DIR/mnt" "$CLOUD_DIR/fs"
	rm -f "$CLOUD_DIR/backing.img"
	cc -O2 -Wall -o "$daemon" "$TOP/bench/latency_device.c" $(pkg-config --cflags --libs fuse3)
	truncate -s "$SIZE" "$CLOUD_DIR/backing.img"
	say "latency device: $SIZE, ${LATENCY_US}us per read, ${WRITE_LATENCY_US}us per write, $THREADS threads"
	"$daemon" "$CLOUD_DIR/backing.img" "$CLOUD_DIR/mnt" "$LATENCY_US" "$WRITE_LATENCY_US" "$THREADS" \
		>"$CLOUD_DIR/latency_device.log" 2>&1 &
	echo $! >"$CLOUD_DIR/latency_device.pid"
	for _ in $(seq 50); do [ -f "$file" ] && break; sleep 0.1; done
	[ -f "$file" ] || die "the latency device did not show $file (log: $CLOUD_DIR/latency_device.log)"
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
	[ -f "$CLOUD_DIR/latency_device.pid" ] && kill "$(cat "$CLOUD_DIR/latency_device.pid")" 2>/dev/null
	rm -f "$CLOUD_DIR/latency_device.pid" "$CLOUD_DIR/backing.img" "$CLOUD_DIR/loop"
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
		echo "cloud device: ${LATENCY_US}us per read in the daemon, read IOPS cap $READ_IOPS, $THREADS threads; $(nproc) CPUs, $(uname -r); $(date -u +%F)"
		for run in "1 $cgroup" "32 $cgroup" "32 /sys/fs/cgroup/blkio"; do
			read -r qd group <<<"$run"
			echo "8kB random reads, O_DIRECT, io_uring, queue depth $qd$([ "$group" = "$cgroup" ] || echo ", without the IOPS cap"):"
			sh -c "echo \$\$ >$group/cgroup.procs && exec fio --name=cloud --filename=$loop \
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
