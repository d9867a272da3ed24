
# Copyright (c) 2026, PostgreSQL Global Development Group

# After a backend crash, the postmaster reinitializes and starts the startup
# process for crash recovery, with the checkpointer, the background writer
# and the IO workers it needs.  Until redo begins, it used to take those for
# children it had already told to exit, and so waited for them forever when
# the startup process failed there, or when a fast shutdown was requested
# there.  Both must stop the server, as they do at a first start.
use strict;
use warnings FATAL => 'all';
use Fcntl qw(O_WRONLY O_NONBLOCK);
use POSIX qw(mkfifo);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

if ($windows_os)
{
	plan skip_all =>
	  'the test blocks WAL segments with file modes and FIFOs, which Windows lacks';
}

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->start;
$node->safe_psql('postgres', 'CREATE TABLE t AS SELECT 1 AS a');
my $pg_wal = $node->data_dir . '/pg_wal';

# Kill a backend with SIGKILL, and wait until the postmaster has started
# crash recovery again.
sub crash_and_reinitialize
{
	my $psql = $node->background_psql('postgres');
	my $pid = $psql->query_safe('SELECT pg_backend_pid()');
	my $offset = -s $node->logfile;
	kill('KILL', $pid);
	$psql->quit;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$offset);
	return $offset;
}

# Wait until the postmaster has exited (it removes its lock file), and tell
# the Cluster object.
sub wait_for_postmaster_exit
{
	my ($what) = @_;
	my $pidfile = $node->data_dir . '/postmaster.pid';
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	usleep(100_000) while -e $pidfile && time() < $deadline;
	ok(!-e $pidfile, "$what: the postmaster exited");
	$node->stop('immediate', fail_ok => 1);
	return;
}

#
# 1. The startup process fails before redo: the WAL segments are made
# unreadable (processes that have one open keep using it).
#
opendir(my $dh, $pg_wal) or die "could not open $pg_wal: $!";
my @segments = grep { /^[0-9A-F]{24}$/ } readdir($dh);
closedir($dh);
chmod(0, map { "$pg_wal/$_" } @segments) == @segments
  or die "could not chmod WAL segments: $!";

my $offset = crash_and_reinitialize();
$node->wait_for_log(qr/shutting down due to startup process failure/,
	$offset);
like(
	slurp_file($node->logfile, $offset),
	qr/reinitializing.*could not open file.*Permission denied.*\n.*startup process \(PID \d+\) .*\n.*terminating any other active server processes/s,
	'the startup process failed, and the postmaster ended the other processes'
);
wait_for_postmaster_exit('startup process failure');

chmod(0600, map { "$pg_wal/$_" } @segments) == @segments
  or die "could not chmod WAL segments: $!";
$node->start;
is($node->safe_psql('postgres', 'SELECT a FROM t'),
	'1', 'the server recovers once the WAL is readable');

#
# 2. A fast shutdown before redo.  The segment holding the checkpoint record
# is replaced with a FIFO, in which the startup process waits, in open(),
# until the test opens it for writing too; the WAL writer keeps writing to
# the real file, moved aside.
#
my $segment = $node->safe_psql('postgres',
	'SELECT pg_walfile_name(checkpoint_lsn) FROM pg_control_checkpoint()');
rename("$pg_wal/$segment", "$pg_wal/$segment.real")
  or die "could not rename $segment: $!";
mkfifo("$pg_wal/$segment", 0600) or die "could not make a FIFO: $!";

$offset = crash_and_reinitialize();
system_or_bail(
	'pg_ctl',
	'--pgdata' => $node->data_dir,
	'--mode' => 'fast',
	'--no-wait', 'stop');
$node->wait_for_log(qr/received fast shutdown request/, $offset);

# Let the startup process go on: it reads nothing, and fails.  (With a
# non-volatile WAL buffer in every test cluster, it may fail before, writing
# to the FIFO, and then no reader ever comes.)
my $pidfile = $node->data_dir . '/postmaster.pid';
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (-e $pidfile && time() < $deadline)
{
	if (sysopen(my $fifo, "$pg_wal/$segment", O_WRONLY | O_NONBLOCK))
	{
		close($fifo);
		last;
	}
	die "could not open FIFO: $!" unless $!{ENXIO};
	usleep(10_000);
}
wait_for_postmaster_exit('fast shutdown');

unlink("$pg_wal/$segment") or die "could not remove FIFO: $!";
rename("$pg_wal/$segment.real", "$pg_wal/$segment")
  or die "could not rename $segment: $!";
$node->start;
is($node->safe_psql('postgres', 'SELECT a FROM t'),
	'1', 'the server recovers with its WAL back');
$node->stop;

done_testing();
