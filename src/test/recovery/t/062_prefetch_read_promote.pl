
# Copyright (c) 2026, PostgreSQL Global Development Group

# A standby catching up with recovery_prefetch_method = read must shut down
# promptly on a fast shutdown, and promote, while its look-ahead has reads in
# flight: neither may wait for more WAL or leave buffers behind.  A reload
# while it catches up must not disturb replay either.  After
# promotion it has replayed everything the primary wrote, and takes writes.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

my $primary = primary_with_table('primary', 50000,
	extra_conf => "wal_keep_size = 1GB\nmax_wal_size = 1GB\n");
my $standby = read_mode_standby($primary, 'standby', has_streaming => 1);

# A backlog for the standby to catch up on: updates spread over the table.
sub make_backlog
{
	for my $i (1 .. 4)
	{
		$primary->safe_psql('postgres',
			"UPDATE t SET val = val + 1 WHERE id % 4 = $i % 4");
	}
}

# Wait until the standby's look-ahead has started reads, which it reports
# while replaying.
sub wait_for_reads
{
	my ($node) = @_;
	$node->poll_query_until('postgres',
		'SELECT reads > 0 FROM pg_stat_recovery_prefetch')
	  or die 'timed out waiting for prefetch reads';
}

make_backlog();
$standby->start;
wait_for_reads($standby);
$standby->stop('fast');
ok( $standby->log_contains('database system is shut down'),
	'fast shutdown while catching up completed');

make_backlog();
my $expected =
  $primary->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t');
$standby->start;
wait_for_reads($standby);

# A reload resets the look-ahead while records it examined wait for replay
# and reads are in flight.
$standby->append_conf('postgresql.conf', 'maintenance_io_concurrency = 4');
$standby->reload;

# Promote once the standby has received all of it, while it is still
# replaying: promotion must replay everything received first.
$primary->wait_for_catchup($standby, 'flush');
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	'f', 'promoted while catching up');
is($standby->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	$expected, 'the promoted standby has every update');
$standby->safe_psql('postgres', 'UPDATE t SET val = -1 WHERE id = 1');
is($standby->safe_psql('postgres', 'SELECT val FROM t WHERE id = 1'),
	'-1', 'the promoted standby takes writes');

done_testing();
