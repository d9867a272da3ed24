
# Copyright (c) 2026, PostgreSQL Global Development Group

# Replay of CREATE DATABASE ... STRATEGY FILE_COPY flushes the source
# database's buffers, pinning each one on the assumption that the startup
# process holds no pin on it.  With recovery_prefetch_method = read, the
# look-ahead pins blocks it finds in shared buffers for the records after the
# one being replayed; if those records change the source database, it could
# hold such a pin when the copy is replayed.  It must stop at the copy
# record until that has been replayed.  A standby with a buffer pool large
# enough to hold the source database's table, and pins to spare, replays a
# copy followed by updates of the source; it must replay both, and the copy
# must have the source's contents as they were when it was made.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

my $primary = primary_with_table('primary', 100, archiving => 1);
my $standby = read_mode_standby(
	$primary, 'standby',
	has_restoring => 1,
	extra_conf => "shared_buffers = 32MB\n");

# Everything below is archived before the standby starts, and replayed from
# the archive in one go: the source's blocks are in its buffer pool, just
# replayed and dirty, when the look-ahead meets the updates after the copy,
# which are already there to read ahead, whatever the timing.
$primary->safe_psql('postgres', 'CREATE DATABASE source');
$primary->safe_psql(
	'source', q{
CREATE TABLE s (id int PRIMARY KEY, val int, pad text) WITH (fillfactor = 50);
INSERT INTO s SELECT g, 0, repeat('s', 100) FROM generate_series(1, 20000) g;
});
$primary->safe_psql('postgres',
	'CREATE DATABASE copy TEMPLATE source STRATEGY FILE_COPY');
$primary->safe_psql('source', 'UPDATE s SET val = id');

my $query = 'SELECT count(*), sum(val) FROM s';
my $expected_source = $primary->safe_psql('source', $query);
my $expected_copy = $primary->safe_psql('copy', $query);
is($expected_copy, '20000|0', 'the copy on the primary predates the update');
my $end_lsn = $primary->lsn('insert');
archive_current_segment($primary);

$standby->start;
$standby->poll_query_until('postgres',
	"SELECT pg_last_wal_replay_lsn() >= '$end_lsn'")
  or die_with_failures($standby,
	'timed out waiting for the standby to replay the archive');

is($standby->safe_psql('source', $query),
	$expected_source, 'the standby has the update of the source');
is($standby->safe_psql('copy', $query),
	$expected_copy, 'the standby has the copy as it was made');

# The look-ahead did find blocks in the buffer pool (it pins those).
cmp_ok(
	$standby->safe_psql(
		'postgres', 'SELECT hit FROM pg_stat_recovery_prefetch'),
	'>', 0,
	'the look-ahead found blocks in shared buffers');
ok(!$standby->log_contains($log_failures),
	'no process of the standby failed');

done_testing();
