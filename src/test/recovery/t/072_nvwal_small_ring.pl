
# Copyright (c) 2026, PostgreSQL Global Development Group

# Non-volatile WAL buffer: a ring of two segments under sustained writes.
#
# With 1MB segments and the smallest ring allowed, two segments, the server
# writes WAL many times the size of the ring.  For part of it the WAL writer
# is stopped, so that inserters find the ring full and must write it back to
# pg_wal themselves; nothing may fail or hang, and the statistics must show
# it.  A crash afterwards must lose nothing, and after a clean shutdown
# pg_control must no longer depend on the file.
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

# No persistent memory here: let libpmem treat the file as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

# Run SQL in several sessions at once; all must succeed.
sub run_concurrently
{
	my ($node, $name, @sqls) = @_;
	my @runs;
	foreach my $sql (@sqls)
	{
		my %run = (stdout => '', stderr => '');
		$run{h} = IPC::Run::start(
			[
				'psql', '--no-psqlrc', '--quiet', '--no-align',
				'--tuples-only',
				'--set' => 'ON_ERROR_STOP=1',
				'--command' => $sql,
				'--dbname' => $node->connstr('postgres')
			],
			'<' => '/dev/null',
			'>' => \$run{stdout},
			'2>' => \$run{stderr},
			IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
		push @runs, \%run;
	}
	my @failures;
	foreach my $i (0 .. $#runs)
	{
		my $run = $runs[$i];
		push @failures, "session $i: $run->{stderr}"
		  unless $run->{h}->finish && $run->{stderr} eq '';
	}
	is(join("\n", @failures), '', $name);
	return;
}

# Rows of about 1kB, below the TOAST threshold, so that each makes about as
# much WAL.
sub insert_sql
{
	my ($from, $to) = @_;
	return
	  "INSERT INTO big SELECT g, repeat(md5(g::text), 31) FROM generate_series($from, $to) g";
}

sub nvwal_stats
{
	my ($node) = @_;
	my %s;
	@s{qw(ring_full written_back synced_lsn flush_lsn size)} = split /\|/,
	  $node->safe_psql(
		'postgres',
		'SELECT ring_full, written_back, synced_lsn, flush_lsn, size FROM pg_stat_nvwal'
	  );
	return \%s;
}

my $node = PostgreSQL::Test::Cluster->new('nvwal_small_ring');
$node->init(extra => ['--wal-segsize=1']);
$node->append_conf(
	'postgresql.conf', q{
nvwal_path = 'nvwal'
nvwal_size = 2MB
min_wal_size = 2MB
max_wal_size = 16MB
autovacuum = off
});
$node->start;

my $stats = nvwal_stats($node);
is($stats->{size}, 2 * 1024 * 1024, 'the ring is two 1MB segments');

$node->safe_psql('postgres',
	'CREATE TABLE big (id int PRIMARY KEY, payload text)');
my $lsn_start = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# Writes with the WAL writer running: about 20MB.
run_concurrently(
	$node,
	'inserts with the WAL writer running succeed',
	insert_sql(1, 9000),
	insert_sql(9001, 18000));

# Writes with the WAL writer stopped: about 30MB, in concurrent sessions
# and several transactions.  Apart from checkpoints, which write back only
# up to their own record, only the inserters can free ring pages now.
my $walwriter = stop_walwriter($node);

my $before = nvwal_stats($node);
run_concurrently(
	$node,
	'inserts with the WAL writer stopped succeed',
	insert_sql(18001, 23000) . ';' . insert_sql(23001, 28000),
	insert_sql(28001, 33000) . ';' . insert_sql(33001, 38000),
	insert_sql(38001, 46000));
my $after = nvwal_stats($node);
note
  "with the WAL writer stopped: ring_full $before->{ring_full} -> $after->{ring_full}, "
  . "written_back $before->{written_back} -> $after->{written_back}, "
  . "synced_lsn $before->{synced_lsn} -> $after->{synced_lsn}";
cmp_ok($after->{ring_full}, '>', $before->{ring_full},
	'inserters found the ring full');
# An inserter that finds the ring full writes back the rest of a segment,
# as far as insertions have finished, not one page per fsync.
cmp_ok(
	($after->{written_back} - $before->{written_back}) /
	  ($after->{ring_full} - $before->{ring_full} || 1),
	'>',
	4 * 8192,
	'inserters that found the ring full wrote back several pages per stall');
cmp_ok(
	$after->{written_back},
	'>',
	$before->{written_back},
	'WAL was written back to pg_wal');
is( $node->safe_psql(
		'postgres',
		"SELECT '$after->{synced_lsn}'::pg_lsn - '$before->{synced_lsn}' > $stats->{size}"
	),
	't',
	'pg_wal advanced by more than the ring while the WAL writer was stopped');
# Each stall is counted in both views; pg_stat_wal's count, unlike the ring's,
# survives clean restarts.
ok( $node->poll_query_until(
		'postgres',
		"SELECT wal_buffers_full >= $after->{ring_full} FROM pg_stat_wal"),
	'pg_stat_wal counts the stalls on a full ring');

kill('CONT', $walwriter) or die "could not continue the WAL writer: $!";

# More writes with the WAL writer back: about 14MB.
run_concurrently(
	$node,
	'inserts after the WAL writer continued succeed',
	insert_sql(46001, 52000),
	insert_sql(52001, 58800));

is( $node->safe_psql(
		'postgres',
		"SELECT pg_current_wal_lsn() - '$lsn_start' > 20 * $stats->{size}"),
	't',
	'WAL written exceeds 20 times the ring');

# pg_stat_reset_shared('nvwal') zeroes the counters, not the locations.  The
# WAL writer may write back a little WAL in between, far less than what the
# rounds above wrote back.
my $before_reset = nvwal_stats($node);
my $reset_before =
  $node->safe_psql('postgres', 'SELECT stats_reset FROM pg_stat_nvwal');
$node->safe_psql('postgres', "SELECT pg_stat_reset_shared('nvwal')");
my $after_reset = nvwal_stats($node);
is($after_reset->{ring_full}, 0, 'reset: ring_full is zero');
cmp_ok(
	$after_reset->{written_back},
	'<',
	$before_reset->{written_back} / 2,
	'reset: written_back starts again');
is( $node->safe_psql(
		'postgres',
		"SELECT stats_reset > '$reset_before' AND flush_lsn >= '$before_reset->{flush_lsn}' FROM pg_stat_nvwal"
	),
	't',
	'reset: stats_reset moves, the flushed location does not');

# Leave more than a segment of committed WAL only in the ring, wherever the
# ring has wrapped to by now: stop the WAL writer again, write everything
# back with a checkpoint, and commit the last rows.
$walwriter = stop_walwriter($node);
$node->safe_psql('postgres', 'CHECKPOINT');
my $tail_end = $node->safe_psql('postgres',
	insert_sql(58801, 60000) . '; SELECT pg_current_wal_insert_lsn()');
my $tail = nvwal_stats($node);
note
  "tail: synced_lsn $tail->{synced_lsn}, flush_lsn $tail->{flush_lsn}, inserted up to $tail_end";
is( $node->safe_psql(
		'postgres',
		"SELECT '$tail_end'::pg_lsn - '$tail->{synced_lsn}' > 1024 * 1024 AND '$tail->{flush_lsn}' >= '$tail_end'::pg_lsn"
	),
	't',
	'more than a segment of committed WAL is durable only in the ring');

my $check_sql =
  'SELECT count(*), sum(id), bool_and(payload = repeat(md5(id::text), 31)) FROM big';

crash_with_walwriter_stopped($node, $walwriter);
$node->command_like(
	[ 'pg_controldata', $node->data_dir ],
	qr/Non-volatile WAL buffer in use:\s+yes/,
	'pg_control names the file after the crash');

my $logpos = -s $node->logfile;
$node->start;
my ($from, $to) = slurp_file($node->logfile, $logpos) =~
  qr/wrote WAL from (\S+) to (\S+) on timeline \d+ from non-volatile WAL buffer file "nvwal" to pg_wal/;
ok(defined $to, 'start-up wrote the ring\'s durable tail to pg_wal');
$to //= '0/0';
is($node->safe_psql('postgres', "SELECT '$to'::pg_lsn >= '$tail_end'"),
	't', 'the WAL written from the ring reaches the last commit');
is($node->safe_psql('postgres', $check_sql),
	'60000|1800030000|t', 'all rows survived the crash');

unlike(slurp_file($node->logfile),
	qr/PANIC|TRAP:/, 'no PANIC or assertion failure in the server log');

$node->stop;
$node->command_like(
	[ 'pg_controldata', $node->data_dir ],
	qr/Non-volatile WAL buffer in use:\s+no/,
	'pg_control no longer names the file after a clean shutdown');

done_testing();
