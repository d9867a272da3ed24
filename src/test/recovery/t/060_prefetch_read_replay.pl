
# Copyright (c) 2026, PostgreSQL Global Development Group

# Recovery prefetch with real reads must not change what redo produces.
#
# A primary runs a write workload with wal_consistency_checking = all, so that
# every standby also checks each replayed block against the primary's image.
# Standbys that catch up on that WAL with recovery_prefetch_method = read,
# under io_method = worker, io_method = io_uring and debug_io_direct = data,
# with a buffer pool far smaller than the data, must end identical to a
# standby that replays with prefetching off: the same pg_dumpall output, and
# the same contents block by block.  So must one under io_method = sync,
# where asynchronous reads are not available and the method falls back to
# read-ahead advice, and one whose look-ahead has pins enough to combine
# reads but only a 64kB decode buffer.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils qw(direct_io_supported die_with_failures);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', qq{
wal_consistency_checking = all
max_wal_size = 1GB
wal_keep_size = 1GB
autovacuum = off
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION pageinspect');
$primary->backup('backup');

# The reference replays without prefetching; the others but one read ahead
# into a 1MB buffer pool, so that most blocks must be read from disk.
my %variants = (
	off => "recovery_prefetch = off\n",
	worker => "recovery_prefetch = on\nio_method = worker\n",
	direct => "recovery_prefetch = on\nio_method = worker\n"
	  . "debug_io_direct = data\n",
	sync => "recovery_prefetch = on\nio_method = sync\n",
	# Pins enough for runs of neighbours, some continuing a scan (read with
	# kernel read-ahead), and a decode buffer that fills up, after which
	# the look-ahead goes on as soon as replay has made room.
	window => "recovery_prefetch = on\nio_method = worker\n"
	  . "shared_buffers = 8MB\nwal_decode_buffer_size = 64kB\n",);
if (!direct_io_supported())
{
	note 'direct I/O not supported here: skipping that variant';
	delete $variants{direct};
}
if (check_pg_config('#define USE_LIBURING 1'))
{
	$variants{io_uring} = "recovery_prefetch = on\nio_method = io_uring\n";
}
else
{
	note 'io_uring not supported by this build: skipping that variant';
}

my %standby;
foreach my $name (sort keys %variants)
{
	my $node = PostgreSQL::Test::Cluster->new("standby_$name");
	$node->init_from_backup($primary, 'backup', has_streaming => 1);
	$node->append_conf('postgresql.conf',
		"shared_buffers = 1MB\nrecovery_prefetch_method = read\n"
		  . $variants{$name});
	$standby{$name} = $node;
}

# The standbys stay down while the primary writes, so that they catch up on
# all of it at once, as a standby does after a pause.
$primary->safe_psql(
	'postgres', q{
CREATE TABLE t1 (id int PRIMARY KEY, val text, pad text) WITH (fillfactor = 70);
INSERT INTO t1 SELECT g, md5(g::text), repeat('x', 200)
  FROM generate_series(1, 20000) g;
CREATE INDEX t1_val ON t1 (val);
UPDATE t1 SET val = md5(val) WHERE id % 3 = 0;
DELETE FROM t1 WHERE id % 7 = 0;
VACUUM t1;
UPDATE t1 SET pad = repeat('y', 200) WHERE id % 5 = 0;
UPDATE t1 SET pad = repeat('z', 100) WHERE id % 5 = 0;
INSERT INTO t1 SELECT g, md5(g::text), 'new'
  FROM generate_series(20001, 30000) g;
CREATE TABLE t2 (id int, data text);
INSERT INTO t2 SELECT g, repeat('a', 500) FROM generate_series(1, 3000) g;
CREATE INDEX t2_id ON t2 (id);
TRUNCATE t2;
INSERT INTO t2 SELECT g, repeat('b', 300) FROM generate_series(1, 2000) g;
CREATE TABLE t3 AS SELECT g AS id FROM generate_series(1, 5000) g;
DROP TABLE t3;
CREATE TABLE t3 AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 5000) g;
DELETE FROM t1 WHERE id > 25000;
VACUUM t1;
VACUUM t2;
UPDATE t1 SET val = 'again' WHERE id % 11 = 0;
DELETE FROM t2 WHERE id % 2 = 0;
VACUUM t2;
});

# Count on the primary before the standbys start: a scan may prune pages, and
# the WAL for that must be replayed too before the standbys are compared.
my $primary_count =
  $primary->safe_psql('postgres', 'SELECT count(*) FROM t1');

foreach my $name (sort keys %variants)
{
	$standby{$name}->start;
}
foreach my $name (sort keys %variants)
{
	eval { $primary->wait_for_replay_catchup($standby{$name}); 1 }
	  or die_with_failures($standby{$name}, $@);
}

# What each block holds, leaving out hint bits, which are set without WAL and
# so may differ between servers.
my $blocks_query = q{
SELECT c.relname, b.blkno,
  CASE c.relkind
    WHEN 'r' THEN
      (SELECT md5(coalesce(string_agg(concat_ws(' ', lp, lp_flags, lp_off,
          lp_len, t_xmin, t_xmax, t_field3, t_ctid, t_infomask2, t_hoff,
          t_bits, t_oid, t_data), '|' ORDER BY lp), ''))
       FROM heap_page_items(get_raw_page(c.relname::text, b.blkno::int)))
    ELSE
      (SELECT md5(coalesce(string_agg(concat_ws(' ', itemoffset, ctid,
          itemlen, nulls, vars, data), '|' ORDER BY itemoffset), ''))
       FROM bt_page_items(get_raw_page(c.relname::text, b.blkno::int)))
  END
FROM pg_class c,
  generate_series(0, pg_relation_size(c.oid) / current_setting('block_size')::int - 1) b(blkno)
WHERE c.relnamespace = 'public'::regnamespace
  AND c.relkind IN ('r', 'i')
  AND (c.relkind = 'r' OR b.blkno > 0)
ORDER BY 1, 2};

sub dumpall
{
	my ($node) = @_;
	my ($stdout, $stderr);
	my $ok =
	  IPC::Run::run [ 'pg_dumpall', '-h', $node->host, '-p', $node->port ],
	  '>' => \$stdout,
	  '2>' => \$stderr;
	ok($ok, $node->name . ': pg_dumpall succeeded') or diag $stderr;

	# Each dump has its own random \restrict key.
	$stdout =~ s/^\\(un)?restrict .*$//mg;
	return $stdout;
}

my $ref = $standby{off};
my $ref_dump = dumpall($ref);
my $ref_blocks = $ref->safe_psql('postgres', $blocks_query);
cmp_ok(scalar(split /\n/, $ref_blocks),
	'>', 500, 'the reference standby has many blocks to compare');
is($ref->safe_psql('postgres', 'SELECT count(*) FROM t1'),
	$primary_count, 'the reference standby has replayed everything');

foreach my $name (grep { $_ ne 'off' } sort keys %variants)
{
	my $node = $standby{$name};

	is(dumpall($node), $ref_dump,
		"$name: same pg_dumpall as without prefetch");
	is($node->safe_psql('postgres', $blocks_query),
		$ref_blocks, "$name: same block contents as without prefetch");

	# The reads really happened, through the buffer manager.
	my ($method, $reads, $blocks_read, $prefetch) = split /\|/,
	  $node->safe_psql(
		'postgres',
		'SELECT method, reads, blocks_read, prefetch FROM pg_stat_recovery_prefetch'
	  );
	if ($name eq 'sync')
	{
		is($method, 'advice', "$name: falls back to advice");
		cmp_ok($prefetch, '>', 0, "$name: the kernel was advised");
		next;
	}
	is($method, 'read', "$name: prefetching with reads");
	cmp_ok($reads, '>', 0, "$name: reads were started");
	# A 1MB pool allows the look-ahead about one pin at a time, so only the
	# larger one combines neighbouring blocks.
	cmp_ok($blocks_read, '>', $reads, "$name: neighbours were combined")
	  if $name eq 'window';
	note "$name: $reads reads of $blocks_read blocks";
}

done_testing();
