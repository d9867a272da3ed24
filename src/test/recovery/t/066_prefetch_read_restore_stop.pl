
# Copyright (c) 2026, PostgreSQL Global Development Group

# A fast shutdown while restore_command runs ends the startup process from
# its signal handler.  In archive recovery with recovery_prefetch_method =
# read, the look-ahead runs restore_command when it reaches the end of a
# segment, while reads it started for the records before may be in flight;
# it waits for them first, so that exit processing in the handler finds only
# pins to release.  The last records before the segment whose restore the
# test holds change scattered blocks of a table the standby has not read
# yet, so that the look-ahead has reads of its own in flight when it gets
# there: while restore_command runs, pg_aios must show none.  Under
# io_method = worker and io_uring, with direct I/O so that every read is an
# asynchronous one, the server must then stop cleanly, and archive recovery
# go on after a restart.
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

# Table u has one row in each of 100 blocks, which nothing reads before the
# updates at the end of a segment.
my $primary = primary_with_table(
	'primary', 50000,
	archiving => 1,
	setup_sql => "CREATE TABLE u (id int, val int, pad text)
		WITH (fillfactor = 10);
		INSERT INTO u SELECT g, 0, repeat(md5(g::text), 20)
		FROM generate_series(1, 100) g;");
is( $primary->safe_psql(
		'postgres', 'SELECT count(DISTINCT (ctid::text::point)[0]) FROM u'),
	'100',
	'each row of u is in a block of its own');

# Several segments of updates spread over t, then, to end a segment,
# updates of every other block of u, one per transaction (redo then reads
# each of these blocks alone); the next segment has more updates of t.
for my $i (1 .. 6)
{
	$primary->safe_psql('postgres',
		"UPDATE t SET val = val + 1 WHERE id % 2 = $i % 2");
}
$primary->safe_psql('postgres', "UPDATE u SET val = 1 WHERE id = $_")
  for grep { $_ % 2 } 1 .. 100;
archive_current_segment($primary);
my $slow_segment = $primary->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_current_wal_lsn())');
for my $i (7 .. 8)
{
	$primary->safe_psql('postgres',
		"UPDATE t SET val = val + 1 WHERE id % 2 = $i % 2");
}
my $end_lsn = $primary->lsn('insert');
archive_current_segment($primary);

# restore_command stalls on that segment, well after the end of the backup
# (the standby must reach a consistent state and accept connections first),
# once, until the test lets it go.
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
	is( $standby->safe_psql(
			'postgres', q{SELECT count(*) FROM pg_aios
			  WHERE pid = (SELECT pid FROM pg_stat_activity
			               WHERE backend_type = 'startup')}),
		'0',
		"$io_method: no read of the startup process in flight while restore_command runs"
	);

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
