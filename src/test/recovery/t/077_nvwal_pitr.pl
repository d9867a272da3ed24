
# Copyright (c) 2026, PostgreSQL Global Development Group

# Non-volatile WAL buffer: a point-in-time recovery that reuses the file in
# place, then a crash, must not bring back WAL of the abandoned history.
#
# After a clean shutdown the file is a cache, and a base backup restored in
# place may reuse it.  Its ring still holds the pages written after the
# recovery target, with the addresses the new timeline reuses.  If the
# server crashes before it has overwritten them, the salvage at start-up
# must stop where this run's WAL ends.  Without that it would copy the old
# pages into the new timeline's segments.  Recovery would replay the first
# of them, right after the partial page start-up copied in, if a record of
# the new history happened to end where an old one began.
# The test puts the old pages back after the crash, in the slots past the
# last page this run wrote: the state of a crash that came before the WAL
# writer initialized those slots.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use NVWAL::Utils;
use PrefetchRead::Utils qw(archive_current_segment);

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	plan skip_all => 'non-volatile WAL buffer not supported by this build';
}

# No persistent memory here: let libpmem treat the file as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

my $blcksz = 8192;
my $ring_size = 32 * 1024 * 1024;
my $nvwal_file = PostgreSQL::Test::Utils::tempdir() . '/nvwal';

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(has_archiving => 1, allows_streaming => 1);
$node->append_conf('postgresql.conf',
	ring_only_settings() . "nvwal_path = '$nvwal_file'\n");
$node->start;
is($node->safe_psql('postgres', 'SHOW block_size'),
	$blcksz, 'the test assumes 8kB pages');
$node->safe_psql('postgres', 'CREATE TABLE t (id int, tag text)');
$node->backup('bk');

$node->safe_psql('postgres', "INSERT INTO t VALUES (1, 'kept')");
$node->safe_psql('postgres', "SELECT pg_create_restore_point('rp')");

# The abandoned history.  The WAL writer, which initializes ring pages ahead
# of insertion once their WAL is in pg_wal, is held meanwhile, so that the
# ring still holds these pages when they are copied.  Left alone, it would
# soon initialize them for the next lap, and later only a crash soon enough
# after writing them would leave them there for a recovery to meet.
my $walwriter = stop_walwriter($node);
$node->safe_psql('postgres',
	"INSERT INTO t SELECT g, 'abandoned' FROM generate_series(2, 5000) g");
my ($hi, $lo) = split m{/}, $node->lsn('insert');
my $abandoned_end = hex($hi) * 2**32 + hex($lo);
my $old_ring = slurp_file($nvwal_file);
kill('CONT', $walwriter) or die "could not resume the WAL writer: $!";

archive_current_segment($node);
$node->stop;

my $pitr = PostgreSQL::Test::Cluster->new('pitr');
$pitr->init_from_backup($node, 'bk', has_restoring => 1, standby => 0);
$pitr->append_conf('postgresql.conf',
	"recovery_target_name = 'rp'\nrecovery_target_action = 'promote'\n");
$pitr->start;
$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'timed out waiting for the promotion';
is($pitr->safe_psql('postgres', 'SHOW nvwal_path'),
	$nvwal_file, 'the restored copy is set to use the same file');
# This run's WAL must go beyond the page it began on, whose header still
# carries timeline 1: a table of its own, then the row.  (With the row alone,
# that page held all of it when the checkpoint after the promotion had not
# begun yet, under load, and no page of timeline 2 was found below.)
$pitr->safe_psql('postgres',
		"CREATE TABLE pad AS SELECT g FROM generate_series(1, 1000) g;\n"
	  . "INSERT INTO t VALUES (2, 'new history');");
$pitr->stop('immediate');

# Page header fields: xlp_magic, xlp_info, xlp_tli, xlp_pageaddr; then the
# first record's length, after a short (24 bytes) or long (40) header.
sub page_at
{
	my ($ring, $pageaddr) = @_;
	my $page = substr($ring, $blcksz + $pageaddr % $ring_size, $blcksz);
	my ($magic, $info, $tli, $addr) = unpack('S< S< L< Q<', $page);
	my $first_len =
	  unpack('L<', substr($page, ($info & 0x0002) ? 40 : 24, 4));
	return ($page, $magic, $info, $tli, $addr,
		($info & 0x0001) || $first_len != 0);
}

# The last page this run wrote WAL to, on timeline 2.
my $new_ring = slurp_file($nvwal_file);
my $last_new = 0;
for (my $slot = 0; $slot < $ring_size; $slot += $blcksz)
{
	my (undef, $magic, undef, $tli, $addr, $has_data) =
	  page_at($new_ring, $slot);
	$last_new = $addr
	  if $magic == 0xD118 && $tli == 2 && $has_data && $addr > $last_new;
}
ok($last_new > 0, 'this run wrote WAL to the ring on timeline 2');


# Put back the abandoned pages in the slots after it, as the old server left
# them before they were initialized for the next lap.
my $restored = 0;
open(my $fh, '+<', $nvwal_file) or die "could not open $nvwal_file: $!";
binmode $fh;
for (my $slot = 0; $slot < $ring_size; $slot += $blcksz)
{
	my ($page, $magic, undef, $tli, $addr, $has_data) =
	  page_at($old_ring, $slot);
	next
	  unless $magic == 0xD118
	  && $tli == 1
	  && $addr > $last_new
	  && $addr < $abandoned_end;
	sysseek($fh, $blcksz + $slot, 0) or die "could not seek: $!";
	syswrite($fh, $page) == $blcksz or die "could not write: $!";
	$restored++ if $has_data;
}
close($fh) or die "could not close $nvwal_file: $!";
cmp_ok($restored, '>', 0,
	'pages of the abandoned history with WAL follow this run\'s last page');
lose_unsynced_wal($pitr, $nvwal_file);

my $log_offset = -s $pitr->logfile;
$pitr->start;
my ($to) = slurp_file($pitr->logfile, $log_offset) =~
  m{wrote WAL from \S+ to (\S+) on timeline 2 from non-volatile WAL buffer file};
ok(defined $to, 'start-up salvaged the ring');
($hi, $lo) = split m{/}, $to // '0/0';
cmp_ok(
	hex($hi) * 2**32 + hex($lo),
	'<=',
	$last_new + $blcksz,
	'the salvage stopped at the end of this run\'s WAL');
is( $pitr->safe_psql(
		'postgres', 'SELECT tag, count(*) FROM t GROUP BY tag ORDER BY tag'),
	"kept|1\nnew history|1",
	'the restored copy has its own history and nothing of the abandoned one');
$pitr->stop;

done_testing();
