
# Copyright (c) 2026, PostgreSQL Global Development Group

# Recovery prefetch in read mode and custom WAL resource managers.
#
# A custom resource manager's redo may take a cleanup lock on a block its
# record does not reference, which fails if the startup process holds a
# second pin on it: the look-ahead's, taken for a later record that does
# reference the block.  test_custom_rmgrs writes such records; each is
# followed by an update of the block it names.  Crash recovery with
# full_page_writes = off, where the updates' redo reads their blocks, must
# replay them all.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'test_custom_rmgrs'
recovery_prefetch = on
recovery_prefetch_method = read
full_page_writes = off
autovacuum = off
max_wal_size = 1GB
checkpoint_timeout = 1h
});
$node->start;

my $nblocks = 20;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION test_custom_rmgrs;
CREATE TABLE t (id int, val int, pad text) WITH (fillfactor = 50);
INSERT INTO t SELECT g, 0, repeat('p', 200) FROM generate_series(1, 400) g;
CHECKPOINT;
});
cmp_ok(
	$node->safe_psql(
		'postgres',
		q{SELECT pg_relation_size('t') / current_setting('block_size')::int}),
	'>=', $nblocks,
	"the table has $nblocks blocks to lock");

# For each block, a custom record whose redo locks it for cleanup, then an
# update of its rows, which stay on the block (HOT).
my $sql = '';
for my $blkno (0 .. $nblocks - 1)
{
	my $next = $blkno + 1;
	$sql .= qq{
SELECT test_custom_rmgrs_insert_cleanup_lock_record('t', $blkno);
UPDATE t SET val = val + 1 WHERE ctid >= '($blkno,0)' AND ctid < '($next,0)';
};
}
$node->safe_psql('postgres', $sql);
my $query =
  q{SELECT count(*), sum(val), md5(string_agg(id || ':' || val, ',' ORDER BY id)) FROM t};
my $expected = $node->safe_psql('postgres', $query);

$node->stop('immediate');
my $log_offset = -s $node->logfile;
my $started = $node->start(fail_ok => 1);
ok($started,
	'crash recovery replays cleanup locks of a custom resource manager');
ok( !$node->log_contains('incorrect local pin count', $log_offset),
	'redo of a custom record found no look-ahead pin on its block');
SKIP:
{
	skip 'the server did not start', 3 unless $started;

	is($node->safe_psql('postgres', $query),
		$expected, 'every update survived crash recovery');
	is( $node->safe_psql(
			'postgres', 'SELECT method FROM pg_stat_recovery_prefetch'),
		'read',
		'crash recovery prefetched with reads');

	$node->stop;
	ok(!$node->log_contains($log_failures, $log_offset),
		'no leaked pin or I/O, crash or assertion failure in recovery');
}

done_testing();
