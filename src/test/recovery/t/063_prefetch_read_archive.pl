
# Copyright (c) 2026, PostgreSQL Global Development Group

# Archive recovery with recovery_prefetch_method = read, where the look-ahead
# runs into WAL that restore_command cannot deliver yet.  The standby must
# wait for it, replay it once archived, and keep prefetching: meeting the end
# of the available WAL must not turn prefetching off for the rest of recovery.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

my $primary = primary_with_table('primary', 30000, archiving => 1);
my $standby = read_mode_standby(
	$primary, 'standby',
	has_restoring => 1,
	extra_conf => "wal_retrieve_retry_interval = 100ms\n");

# Write, then archive everything written so far, and return where it ends.
sub write_and_archive
{
	my ($round) = @_;
	for my $i (1 .. 3)
	{
		$primary->safe_psql('postgres',
			"UPDATE t SET val = val + $round WHERE id % 3 = $i % 3");
	}
	my $lsn = $primary->lsn('insert');
	archive_current_segment($primary);
	return $lsn;
}

sub wait_for_replay
{
	my ($lsn) = @_;
	$standby->poll_query_until('postgres',
		"SELECT pg_last_wal_replay_lsn() >= '$lsn'")
	  or die_with_failures($standby, "timed out waiting for replay of $lsn");
}

sub reads
{
	return $standby->safe_psql('postgres',
		'SELECT reads FROM pg_stat_recovery_prefetch');
}

my $lsn1 = write_and_archive(1);
$standby->start;
wait_for_replay($lsn1);
my $reads1 = reads();
cmp_ok($reads1, '>', 0,
	'prefetch reads during the first part of the archive');

# The look-ahead is now at the end of the archive.  Let restore_command fail
# a few times before the rest arrives.
$standby->poll_query_until('postgres',
	q{SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'RecoveryRetrieveRetryInterval'}
  )
  or die_with_failures($standby,
	'timed out waiting for the standby to wait for WAL');

my $lsn2 = write_and_archive(2);
wait_for_replay($lsn2);
my $reads2 = reads();
cmp_ok($reads2, '>', $reads1,
	'prefetching went on after the look-ahead met missing WAL');
is( $standby->safe_psql(
		'postgres', 'SELECT method FROM pg_stat_recovery_prefetch'),
	'read',
	'still prefetching with reads');
is( $standby->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	$primary->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	'the standby restored everything from the archive');

done_testing();
