
# Copyright (c) 2026, PostgreSQL Global Development Group

# After a backend crash, the postmaster reinitializes and starts crash
# recovery.  If the startup process then fails, the postmaster must stop the
# processes it started for that recovery and exit, as it does when the
# startup process fails at the first start, instead of waiting for them
# forever.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->start;
$node->safe_psql('postgres', 'CREATE TABLE t AS SELECT 1 AS a');

# Crash recovery will fail to open the WAL it must replay.  Processes that
# have a segment open keep using it.
my $pg_wal = $node->data_dir . '/pg_wal';
opendir(my $dh, $pg_wal) or die "could not open $pg_wal: $!";
my @segments = grep { /^[0-9A-F]{24}$/ } readdir($dh);
closedir($dh);
chmod(0, map { "$pg_wal/$_" } @segments) == @segments
  or die "could not chmod WAL segments: $!";

my $psql = $node->background_psql('postgres');
my $pid = $psql->query_safe('SELECT pg_backend_pid()');
my $offset = -s $node->logfile;
kill('KILL', $pid) or die "could not kill backend $pid: $!";
$psql->quit;

$node->wait_for_log(qr/shutting down due to startup process failure/,
	$offset);
my $log = slurp_file($node->logfile, $offset);
like(
	$log,
	qr/all server processes terminated; reinitializing.*could not open file.*Permission denied/s,
	'crash recovery after the reinitialization failed');
like(
	$log,
	qr/startup process \(PID \d+\) .*\n.*terminating any other active server processes/,
	'the startup process failure ended the processes started for recovery');

# The postmaster exits, removing its lock file.
my $pidfile = $node->data_dir . '/postmaster.pid';
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
usleep(100_000) while -e $pidfile && time() < $deadline;
ok(!-e $pidfile, 'the postmaster exited');
$node->stop('immediate', fail_ok => 1);

# With the WAL readable again, the server starts.
chmod(0600, map { "$pg_wal/$_" } @segments) == @segments
  or die "could not chmod WAL segments: $!";
$node->start;
is($node->safe_psql('postgres', 'SELECT a FROM t'),
	'1', 'the server recovers once the cause is fixed');
$node->stop;

done_testing();
