
# Copyright (c) 2026, PostgreSQL Global Development Group

# After a backend crash, the postmaster reinitializes and starts the startup
# process for crash recovery, with the checkpointer, the background writer
# and the IO workers it needs.  Until redo begins, it used to take those for
# children it had already told to exit, and so waited for them forever when
# the startup process failed there, or when a fast shutdown was requested
# there (whether the startup process then fails or exits cleanly).  Each must
# stop the server, as at a first start.
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

#
# 3. A fast shutdown before redo, where the startup process exits cleanly: a
# standby made from a base backup without WAL, whose primary is gone, waits
# for its checkpoint record.  Its checkpointer is killed, and the startup
# process that the postmaster starts again waits there too.
#
SKIP:
{
	skip 'finding the checkpointer needs /proc', 3 unless -d '/proc/self';

	my $primary = PostgreSQL::Test::Cluster->new('primary');
	$primary->init(allows_streaming => 1);
	$primary->start;
	$primary->backup('nowal', backup_options => [ '--wal-method' => 'none' ]);
	$primary->stop;

	my $standby = PostgreSQL::Test::Cluster->new('standby');
	$standby->init_from_backup($primary, 'nowal', has_streaming => 1);
	$standby->append_conf('postgresql.conf', 'restart_after_crash = on');

	# The server never becomes ready, so pg_ctl must not wait for it.
	system_or_bail(
		'pg_ctl',
		'--pgdata' => $standby->data_dir,
		'--log' => $standby->logfile,
		'--options' => '--cluster-name=standby',
		'--no-wait', 'start');
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	usleep(10_000) while !-e $standby->logfile && time() < $deadline;
	$standby->wait_for_log(qr/could not connect to the primary server/);

	my $offset = -s $standby->logfile;
	kill('KILL', child_pid($standby, 'checkpointer'));
	$standby->wait_for_log(
		qr/all server processes terminated; reinitializing/, $offset);

	# The new walreceiver retries; one attempt after this offset shows that
	# the new startup process waits for WAL.
	my $reinit_offset = -s $standby->logfile;
	$standby->wait_for_log(qr/could not connect to the primary server/,
		$reinit_offset);

	system_or_bail(
		'pg_ctl',
		'--pgdata' => $standby->data_dir,
		'--mode' => 'fast',
		'--no-wait', 'stop');
	my $pidfile = $standby->data_dir . '/postmaster.pid';
	$deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	usleep(100_000) while -e $pidfile && time() < $deadline;
	ok(!-e $pidfile, 'standby waiting for WAL: the postmaster exited');
	like(
		slurp_file($standby->logfile, $offset),
		qr/received fast shutdown request.*database system is shut down/s,
		'standby waiting for WAL: the server shut down');
	unlike(
		slurp_file($standby->logfile, $offset),
		qr/startup process \(PID \d+\) (?:was terminated|exited)/,
		'standby waiting for WAL: the startup process exited cleanly');

	# What a failure leaves behind must not outlive the test.
	if (-e $pidfile)
	{
		system_log(
			'pg_ctl',
			'--pgdata' => $standby->data_dir,
			'--mode' => 'immediate',
			'stop');
	}
}

done_testing();

# The PID of the child of $node's postmaster whose process title ends with
# $type, from /proc.
sub child_pid
{
	my ($node, $type) = @_;
	my $postmaster =
	  (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];

	opendir(my $proc, '/proc') or die "could not open /proc: $!";
	foreach my $pid (grep { /^\d+$/ } readdir($proc))
	{
		my ($status, $cmdline);
		next unless open(my $fh, '<', "/proc/$pid/status");
		$status = do { local $/; <$fh> };
		close($fh);
		next unless $status =~ /^PPid:\s+$postmaster$/m;
		next unless open($fh, '<', "/proc/$pid/cmdline");
		$cmdline = do { local $/; <$fh> };
		close($fh);
		return $pid if $cmdline =~ /: \Q$type\E\s*\0*$/;
	}
	die "no $type process found under postmaster $postmaster";
}
