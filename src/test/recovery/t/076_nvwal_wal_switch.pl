
# Copyright (c) 2026, PostgreSQL Global Development Group

# Non-volatile WAL buffer: a commit made durable in the ring just after a WAL
# switch survives a crash.
#
# A WAL switch fills the rest of its segment with empty pages, and the
# session that switched then writes the segment to pg_wal, after other
# sessions may already insert and commit in the next segment.  A crash
# before that write leaves those commits durable only in the ring, behind
# the padding: the salvage at start-up must get past it.  An injection point
# holds the switching session before its write, and the WAL writer is
# stopped so that it does not write the segment either.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use NVWAL::Utils;

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	plan skip_all => 'non-volatile WAL buffer not supported by this build';
}
if ($ENV{enable_injection_points} ne 'yes')
{
	plan skip_all => 'Injection points not supported by this build';
}

# No persistent memory here: let libpmem treat the file as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

my $node = PostgreSQL::Test::Cluster->new('nvwal_wal_switch');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', ring_only_settings());
# Keep the switched segments in pg_wal past the checkpoint after recovery.
$node->append_conf('postgresql.conf', 'wal_keep_size = 256MB');
$node->start;
if (!$node->check_extension('injection_points'))
{
	plan skip_all => 'Extension injection_points not installed';
}
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION injection_points;
CREATE TABLE t (id int PRIMARY KEY, note text);
INSERT INTO t VALUES (1, 'before the switch');
});

my $point = 'nvwal-switch-before-write-back';
$node->safe_psql('postgres',
	"SELECT injection_points_attach('$point', 'wait')");
my $walwriter = stop_walwriter($node);

# The switch record follows closely: the padding begins at most a page
# after this position.
my ($switch_segment) = split /\|/, $node->safe_psql(
	'postgres',
	q{SELECT file_name, file_offset
	  FROM pg_walfile_name_offset(pg_current_wal_insert_lsn())});
my $switcher = $node->background_psql('postgres');
$switcher->query_until(
	qr/start/, q{
\echo start
SELECT pg_switch_wal();
});
$node->wait_for_event('client backend', $point);

$node->safe_psql('postgres', "INSERT INTO t VALUES (2, 'after the switch')");
my ($commit_segment, $padding_synced) = split /\|/, $node->safe_psql(
	'postgres',
	q{SELECT pg_walfile_name(pg_current_wal_insert_lsn()),
	         synced_lsn >= pg_current_wal_insert_lsn() -
	           (pg_walfile_name_offset(pg_current_wal_insert_lsn())).file_offset
	  FROM pg_stat_nvwal});
isnt($commit_segment, $switch_segment,
	'the commit is in the segment after the switch');
is($padding_synced, 'f',
	'pg_wal is not yet fsynced up to the end of the switched segment');

crash_with_walwriter_stopped($node, $walwriter);
eval { $switcher->quit; };

my $logpos = -s $node->logfile;
$node->start;
is( $node->safe_psql('postgres', 'SELECT id, note FROM t ORDER BY id'),
	"1|before the switch\n2|after the switch",
	'the commit made after the switch survived the crash');
my ($salvaged_to) = slurp_file($node->logfile, $logpos) =~
  qr/wrote WAL from \S+ to (\S+) on timeline \d+ from non-volatile WAL buffer file "nvwal" to pg_wal/;
ok(defined $salvaged_to, 'start-up wrote the ring\'s durable tail to pg_wal');
$salvaged_to //= '0/1';
is( $node->safe_psql(
		'postgres', "SELECT pg_walfile_name('$salvaged_to'::pg_lsn - 1)"),
	$commit_segment,
	'start-up wrote WAL up into the segment after the switch');

# Without a crash, the session that switches writes the segment itself, and
# a walsender reads it from the ring.
$node->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'backup', has_streaming => 1);
$standby->start;
my ($segment) = split /\|/, $node->safe_psql(
	'postgres',
	q{INSERT INTO t VALUES (3, 'before another switch');
	  SELECT file_name, file_offset
	  FROM pg_walfile_name_offset(pg_current_wal_insert_lsn())});
my $switch_end = $node->safe_psql('postgres', 'SELECT pg_switch_wal()');
is($node->safe_psql('postgres', "SELECT pg_walfile_name('$switch_end')"),
	$segment, 'the WAL switch ended the segment of the last insert');
$node->wait_for_catchup($standby, 'write', $switch_end);
$standby->stop;

# Recovery reads past the padding, as it does without the ring.
$node->safe_psql('postgres',
	"INSERT INTO t VALUES (4, 'after another switch')");
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'4', 'crash recovery replayed past both switches');

$node->stop;

done_testing();
