
# Copyright (c) 2026, PostgreSQL Global Development Group

# A fast shutdown while restore_command runs ends the startup process from
# its signal handler.  In archive recovery with recovery_prefetch_method =
# read, the look-ahead runs restore_command when it reaches the end of a
# segment, while reads it started for the records before may be in flight;
# it now waits for them first, so that exit processing in the handler finds
# only pins to release.  Under io_method = worker and io_uring, with direct
# I/O so that every read is an asynchronous one, the server must stop
# cleanly, and archive recovery go on after a restart.  (Whether a read is
# in flight when restore_command starts is up to timing: the test passes
# without the wait too, and guards the path.)
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

# The look-ahead's reads are asynchronous only under direct I/O (buffered
# ones mostly complete at once in the startup process).
plan skip_all => 'direct I/O not supported here' unless direct_io_supported();

my $primary = primary_with_table('primary', 50000, archiving => 1);

# Several segments of updates spread over the table.
my $late_lsn;
for my $i (1 .. 8)
{
	$primary->safe_psql('postgres',
		"UPDATE t SET val = val + 1 WHERE id % 2 = $i % 2");
	$late_lsn = $primary->lsn('insert') if $i == 6;
}
my $end_lsn = $primary->lsn('insert');
archive_current_segment($primary);

# restore_command stalls on a segment well after the end of the backup (the
# standby must reach a consistent state and accept connections first), once,
# until the test lets it go.
my $slow_segment =
  $primary->safe_psql('postgres', "SELECT pg_walfile_name('$late_lsn')");
my $archive = $primary->archive_dir;

my @io_methods = ('worker');
push @io_methods, 'io_uring' if check_pg_config('#define USE_LIBURING 1');

foreach my $io_method (@io_methods)
{
	my $marker = "$PostgreSQL::Test::Utils::tmp_check/stalled_$io_method";
	my $release = "$PostgreSQL::Test::Utils::tmp_check/released_$io_method";
	my $standby = read_mode_standby(
		$primary, "standby_$io_method",
		extra_conf => qq{io_method = $io_method
debug_io_direct = data
shared_buffers = 16MB
restore_command = 'if [ "%f" = "$slow_segment" ] && [ ! -e "$marker" ]; then touch "$marker"; while [ ! -e "$release" ]; do sleep 0.1; done; fi; cp "$archive/%f" "%p"'
});
	$standby->set_standby_mode;
	$standby->start;
	poll_until(sub { -e $marker })
	  or die 'timed out waiting for restore_command to stall';

	$standby->stop('fast');
	append_to_file($release, '');
	ok(!$standby->log_contains($log_failures),
		"$io_method: no crash or assertion failure on a fast shutdown during restore_command"
	);

	$standby->start;
	$standby->poll_query_until('postgres',
		"SELECT pg_last_wal_replay_lsn() >= '$end_lsn'")
	  or die_with_failures($standby,
		'timed out waiting for the rest of the archive');
	cmp_ok(
		$standby->safe_psql(
			'postgres', 'SELECT reads FROM pg_stat_recovery_prefetch'),
		'>', 0,
		"$io_method: prefetching with reads after the restart");
	is( $standby->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
		$primary->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
		"$io_method: the standby restored everything from the archive");
	$standby->stop;
}

sub poll_until
{
	my ($check) = @_;
	for (1 .. $PostgreSQL::Test::Utils::timeout_default * 10)
	{
		return 1 if $check->();
		usleep(100_000);
	}
	return 0;
}

done_testing();
