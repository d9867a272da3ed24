
# Copyright (c) 2026, PostgreSQL Global Development Group

# Recovery prefetch in read mode: blocks that the look-ahead finds in shared
# buffers must not count as reads against maintenance_io_concurrency.
#
# A standby whose shared buffers hold the whole table replays updates of
# every block of it.  With maintenance_io_concurrency = 1, the look-ahead
# may have one read in flight, plus one being assembled, and examine up to
# four block references ahead.  Every block is found in shared buffers, so
# it must go on until it has examined four, as advice mode does, with no
# read in flight; if each block it found took the place of a read, it would
# stop after two.  Replay waits at a commit (recovery_min_apply_delay) so
# that pg_stat_recovery_prefetch shows where the look-ahead stopped.
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
# all of the second transaction's updates to examine.
$standby->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
$standby->poll_query_until('postgres',
	q{SELECT pg_get_wal_replay_pause_state() = 'paused'})
  or die 'timed out waiting for replay to pause';
$standby->append_conf('postgresql.conf', "recovery_min_apply_delay = '1h'");
$standby->reload;
$primary->safe_psql('postgres', 'UPDATE t SET val = 1 WHERE id = 1');
$primary->safe_psql('postgres', 'UPDATE t SET val = val + 1');
$primary->wait_for_catchup($standby, 'flush');
$standby->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
$standby->poll_query_until(
	'postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
WHERE backend_type = 'startup' AND wait_event = 'RecoveryApplyDelay'})
  or die_with_failures($standby,
	'timed out waiting for replay to wait at the first commit');

my ($hit_before, $reads_before) = split /\|/, $before;
my ($hit, $reads, $io_depth, $block_distance) = split /\|/,
  $standby->safe_psql(
	'postgres',
	'SELECT hit, reads, io_depth, block_distance FROM pg_stat_recovery_prefetch'
  );
cmp_ok($hit, '>', $hit_before,
	'the look-ahead found blocks in shared buffers');
is($reads, $reads_before, 'it started no read');
is($io_depth, 0, 'no read is in flight');
is($block_distance, 4,
	'it examined four times maintenance_io_concurrency block references');

# Let replay finish.
$standby->append_conf('postgresql.conf', 'recovery_min_apply_delay = 0');
$standby->reload;
$primary->wait_for_replay_catchup($standby);
is( $standby->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	$primary->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	'the standby replayed every update');
$standby->stop;
ok(!$standby->log_contains($log_failures),
	'no leaked pin or I/O, crash or assertion failure');

done_testing();
