
# Copyright (c) 2026, PostgreSQL Global Development Group

# Recovery prefetch in read mode: blocks that the look-ahead finds in shared
# buffers, and reads that have completed, must not count as reads in flight
# against maintenance_io_concurrency.
#
# A standby replays updates of every block of a table.  With
# maintenance_io_concurrency = 1, the look-ahead may have one read in
# flight, plus one being assembled, and examine up to four block references
# ahead.  Replay waits at a commit (recovery_min_apply_delay) so that
# pg_stat_recovery_prefetch shows where the look-ahead stopped.
#
# First, the standby's shared buffers hold the whole table.  Every block is
# found there, so the look-ahead must go on until it has examined four, as
# advice mode does, with no read in flight; if each block it found took the
# place of a read, it would stop after two.
#
# Then the standby restarts with empty shared buffers, the table in the
# kernel's page cache, so that its reads complete as soon as they are
# started.  The look-ahead must again examine four, having read blocks; if
# a read counted until redo reached its record, it would stop after two.
#
# Last, the standby reads with direct I/O, so that its reads are in flight
# for a while, and the first transaction writes a hundred thousand WAL
# records without block references before its commit, whose replay gives
# the look-ahead the time to see its reads complete.  It must again examine
# four: it checks on its reads before each record is replayed, and one that
# completed no longer counts.  (Whether its last read has completed by the
# time replay waits depends on timing, so io_depth is not checked.)
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

my $primary = primary_with_table('primary', 4000,
	setup_sql => 'CREATE EXTENSION pg_prewarm');
my $standby = read_mode_standby(
	$primary, 'standby',
	has_streaming => 1,
	extra_conf => "shared_buffers = 16MB\nmaintenance_io_concurrency = 1\n");
$standby->start;
$primary->wait_for_replay_catchup($standby);

# Read the table and its index into the standby's shared buffers.
$standby->safe_psql('postgres',
	q{SELECT pg_prewarm('t'), pg_prewarm('t_pkey')});
my $before = $standby->safe_psql('postgres',
	'SELECT hit, reads FROM pg_stat_recovery_prefetch');

# Hold replay until both transactions below have arrived, then let it go
# on until it waits to apply the first commit: the look-ahead has then had
# all of the second transaction's updates to examine.  Returns the view's
# hit, reads, io_depth and block_distance then.  The first transaction also
# writes the given number of logical decoding messages.
sub lookahead_at_delayed_commit
{
	my $messages = shift // 0;

	$standby->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
	$standby->poll_query_until('postgres',
		q{SELECT pg_get_wal_replay_pause_state() = 'paused'})
	  or die 'timed out waiting for replay to pause';
	$standby->append_conf('postgresql.conf',
		"recovery_min_apply_delay = '1h'");
	$standby->reload;
	$primary->safe_psql(
		'postgres', qq{
BEGIN;
UPDATE t SET val = 1 WHERE id = 1;
SELECT count(pg_logical_emit_message(true, 'test', 'x'))
  FROM generate_series(1, $messages);
COMMIT;
});
	$primary->safe_psql('postgres', 'UPDATE t SET val = val + 1');
	$primary->wait_for_catchup($standby, 'flush');
	$standby->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
	$standby->poll_query_until(
		'postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE backend_type = 'startup' AND wait_event = 'RecoveryApplyDelay'})
	  or die_with_failures($standby,
		'timed out waiting for replay to wait at the first commit');

	return split /\|/,
	  $standby->safe_psql('postgres',
		'SELECT hit, reads, io_depth, block_distance FROM pg_stat_recovery_prefetch'
	  );
}

# Let replay finish.
sub finish_replay
{
	$standby->append_conf('postgresql.conf', 'recovery_min_apply_delay = 0');
	$standby->reload;
	$primary->wait_for_replay_catchup($standby);
	is( $standby->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
		$primary->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
		'the standby replayed every update');
}

my ($hit_before, $reads_before) = split /\|/, $before;
my ($hit, $reads, $io_depth, $block_distance) = lookahead_at_delayed_commit();
cmp_ok($hit, '>', $hit_before,
	'the look-ahead found blocks in shared buffers');
is($reads, $reads_before, 'it started no read');
is($io_depth, 0, 'no read is in flight');
is($block_distance, 4,
	'it examined four times maintenance_io_concurrency block references');
finish_replay();

# The page cache serves a read in the process that starts it only where
# preadv2() has RWF_NOWAIT (Linux); elsewhere I/O workers complete it, and
# whether they have by the time replay waits depends on timing.
SKIP:
{
	skip 'reads complete in the startup process only on Linux', 4
	  unless $^O eq 'linux';

	# Empty shared buffers, after a checkpoint so that the restart replays none
	# of the updates, and read the table and its index into the page cache only
	# (pg_prewarm's "read" mode uses a private buffer).
	$primary->safe_psql('postgres', 'CHECKPOINT');
	$primary->wait_for_replay_catchup($standby);
	$standby->restart;
	$standby->safe_psql('postgres',
		q{SELECT pg_prewarm('t', 'read'), pg_prewarm('t_pkey', 'read')});
	($hit_before, $reads_before) = split /\|/,
	  $standby->safe_psql('postgres',
		'SELECT hit, reads FROM pg_stat_recovery_prefetch');
	($hit, $reads, $io_depth, $block_distance) =
	  lookahead_at_delayed_commit();
	cmp_ok($reads, '>', $reads_before, 'the look-ahead started reads');
	is($io_depth, 0, 'no read is in flight');
	is($block_distance, 4,
		'with its reads complete, it examined four block references');
	finish_replay();
}

SKIP:
{
	skip 'direct I/O is not supported here', 3 unless direct_io_supported();

	# The look-ahead goes on once its read has completed, which the replay of
	# the first transaction's messages gives time for; but a busy machine
	# may take longer, and leave it one block short.  So try again, with
	# empty shared buffers, a few times.
	$standby->append_conf('postgresql.conf',
		"debug_io_direct = data\nwal_decode_buffer_size = 32MB\n");
	foreach my $attempt (1 .. 3)
	{
		$primary->safe_psql('postgres', 'CHECKPOINT');
		$primary->wait_for_replay_catchup($standby);
		$standby->restart;
		($hit_before, $reads_before) = split /\|/,
		  $standby->safe_psql('postgres',
			'SELECT hit, reads FROM pg_stat_recovery_prefetch');
		($hit, $reads, $io_depth, $block_distance) =
		  lookahead_at_delayed_commit(100000);
		last if $block_distance == 4 || $attempt == 3;
		note "attempt $attempt: the look-ahead stopped at $block_distance";
		finish_replay();
	}
	cmp_ok($reads, '>', $reads_before,
		'with direct I/O, the look-ahead started reads');
	is($block_distance, 4,
		'with direct I/O, it examined four block references');
	finish_replay();
}
$standby->stop;
ok(!$standby->log_contains($log_failures),
	'no leaked pin or I/O, crash or assertion failure');

done_testing();
