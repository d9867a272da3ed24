
# Copyright (c) 2026, PostgreSQL Global Development Group

# Crash recovery with recovery_prefetch_method = read.
#
# A write workload with heap pruning, VACUUM and btree deletions, whose redo
# takes cleanup locks, ends in an immediate stop.  Crash recovery must then
# complete with every committed row intact and pg_amcheck clean, and the
# counters must show that prefetching read blocks for redo, combining
# neighbouring ones.  It is run with full_page_writes = off, so that redo
# reads nearly every block it touches, and with crash recovery in
# shared_buffers = 128kB (the minimum), where the look-ahead has hardly any
# pins to spare and must never run out of buffers.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

# Settings for the whole run, and for crash recovery only.
my %configs = (
	fpw_off => [ "full_page_writes = off\n", "" ],
	tiny_buffers => [ "", "shared_buffers = 128kB\n" ],);

foreach my $name (sort keys %configs)
{
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf(
		'postgresql.conf', qq{
recovery_prefetch = on
recovery_prefetch_method = read
autovacuum = off
max_wal_size = 1GB
checkpoint_timeout = 1h
$configs{$name}[0]});
	$node->start;

	$node->safe_psql(
		'postgres', q{
CREATE EXTENSION amcheck;
CREATE TABLE t (id int PRIMARY KEY, val int, pad text) WITH (fillfactor = 80);
INSERT INTO t SELECT g, 0, repeat('p', 150) FROM generate_series(1, 20000) g;
CREATE INDEX t_val ON t (val);
CREATE TABLE ledger (id serial PRIMARY KEY, amount int NOT NULL);
CHECKPOINT;
});

	# Redo from here on reads blocks that are not in shared buffers after
	# the restart.  Updates leave dead tuples that later scans prune, and
	# VACUUM removes heap and btree entries under cleanup locks.
	for my $round (1 .. 3)
	{
		$node->safe_psql(
			'postgres', qq{
UPDATE t SET val = val + $round WHERE id % 4 = $round % 4;
INSERT INTO ledger (amount) SELECT g FROM generate_series(1, 500) g;
SELECT count(*) FROM t WHERE pad <> '';
DELETE FROM t WHERE id % 97 = $round;
VACUUM t;
UPDATE t SET pad = repeat('q', 150) WHERE id % 13 = $round;
INSERT INTO t SELECT g, $round, 'late' FROM generate_series(20000 + $round * 1000, 20000 + $round * 1000 + 999) g;
});
	}
	my $expected = $node->safe_psql('postgres',
		q{SELECT count(*), sum(val), md5(string_agg(id || ':' || val || pad, ',' ORDER BY id)) FROM t}
	);
	my $ledger = $node->safe_psql('postgres',
		'SELECT count(*), sum(amount) FROM ledger');
	is($ledger, '1500|375750', "$name: ledger complete before the crash");

	$node->stop('immediate');
	$node->append_conf('postgresql.conf', $configs{$name}[1]);
	my $log_offset = -s $node->logfile;
	$node->start;

	is( $node->safe_psql(
			'postgres',
			q{SELECT count(*), sum(val), md5(string_agg(id || ':' || val || pad, ',' ORDER BY id)) FROM t}
		),
		$expected,
		"$name: table contents intact after crash recovery");
	is( $node->safe_psql(
			'postgres', 'SELECT count(*), sum(amount) FROM ledger'),
		$ledger,
		"$name: every committed ledger row survived");

	$node->command_ok(
		[
			'pg_amcheck', '--heapallindexed',
			'--parent-check', '-h',
			$node->host, '-p',
			$node->port, 'postgres'
		],
		"$name: pg_amcheck finds no corruption");

	my ($method, $reads, $blocks_read, $reads_cached, $pin_stalls) =
	  split /\|/,
	  $node->safe_psql(
		'postgres',
		'SELECT method, reads, blocks_read, reads_cached, pin_stalls FROM pg_stat_recovery_prefetch'
	  );
	is($method, 'read', "$name: crash recovery prefetched with reads");
	cmp_ok($reads, '>', 0, "$name: reads were started during crash recovery");
	note "$name: $reads reads of $blocks_read blocks, pin_stalls $pin_stalls";

	# With 16 buffers the look-ahead may hold one pin at a time, and must
	# wait for redo to release it, so each read is of one block.  With the
	# default pool, the updates, deletions and VACUUM, which change the table
	# in block order, let it read neighbouring blocks with one I/O.
	if ($name eq 'tiny_buffers')
	{
		cmp_ok($pin_stalls, '>', 0,
			"$name: the look-ahead stopped for lack of pins");
	}
	else
	{
		cmp_ok($blocks_read, '>', 2 * $reads,
			"$name: neighbouring blocks were read together");
	}

	# The files written just before the crash are still in the kernel's page
	# cache, and on Linux the startup process reads such blocks itself with
	# preadv2(RWF_NOWAIT).  (A file system without non-blocking reads would
	# leave this at zero.)
  SKIP:
	{
		skip "reads are completed from the page cache only on Linux", 1
		  unless $^O eq 'linux';
		cmp_ok($reads_cached, '>', 0,
			"$name: reads the page cache held were completed at once");
	}
	ok($node->log_contains('redo done at', $log_offset),
		"$name: crash recovery replayed WAL");

	# The startup process ends normally after crash recovery, so a pin or
	# an I/O it leaked shows only as a warning in the log.
	$node->stop;
	ok( !$node->log_contains($log_failures, $log_offset),
		"$name: no leaked pin or I/O, crash or assertion failure in recovery"
	);
}

done_testing();
