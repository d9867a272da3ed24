
# Copyright (c) 2026, PostgreSQL Global Development Group

# A standby catching up with recovery_prefetch_method = read must shut down
# promptly on a fast shutdown, and promote, while its look-ahead reads ahead:
# neither may wait for more WAL, crash or fail an assertion, and promotion
# must leave no buffer pinned.  A reload that resets the look-ahead while it
# holds blocks must not disturb replay either.  After promotion the standby
# has replayed everything the primary wrote, and takes writes.  Then a
# second standby is asked to promote while a read its startup process
# started is held in flight by an injection point in the I/O worker.  Last,
# a standby restoring from the archive reaches its recovery target while a
# look-ahead read is held in flight: recovery must wait for it, promote at
# the target, and leak nothing.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

# The primary archives for the last part.  The standbys, which promote, do
# not archive: the last one must not find their timelines in the archive.
my $primary = primary_with_table(
	'primary', 50000,
	archiving => 1,
	extra_conf => "wal_keep_size = 1GB\nmax_wal_size = 1GB\n");

# The standby delays applying commits, so that replay stops at the first
# commit it meets, while the look-ahead goes on beyond it.
my $standby = read_mode_standby(
	$primary, 'standby',
	has_streaming => 1,
	extra_conf => "recovery_min_apply_delay = '1h'\narchive_mode = off\n");

# A backlog for the standby to catch up on: updates spread over the table.
sub make_backlog
{
	for my $i (1 .. 4)
	{
		$primary->safe_psql('postgres',
			"UPDATE t SET val = val + 1 WHERE id % 4 = $i % 4");
	}
}

# Wait until the standby's replay waits to apply a commit, while its
# look-ahead has read, and holds, blocks of the records after it.
sub wait_for_full_window
{
	my ($node) = @_;
	$node->poll_query_until(
		'postgres', q{
SELECT p.reads > 0 AND p.block_distance > 0
FROM pg_stat_recovery_prefetch p, pg_stat_activity a
WHERE a.backend_type = 'startup' AND a.wait_event = 'RecoveryApplyDelay'}
	) or die 'timed out waiting for replay to wait with blocks read ahead';
}

make_backlog();
$standby->start;
wait_for_full_window($standby);
$standby->stop('fast');
# The startup process exits with an error code here, which releases its
# pins and I/O handles without a warning: this can show a crash or a failed
# assertion, not a leak (065 checks for leaks at the end of recovery).
ok(!$standby->log_contains($log_failures),
	'fast shutdown with blocks read ahead: no crash or assertion failure');

# A reload resets the look-ahead while blocks it read wait for replay: the
# same reload ends the delay, and replay goes on with the reset look-ahead.
make_backlog();
my $expected =
  $primary->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t');
my $promote_offset = -s $standby->logfile;
$standby->start;
wait_for_full_window($standby);
$standby->append_conf('postgresql.conf',
	"maintenance_io_concurrency = 4\nrecovery_min_apply_delay = 0\n");
$standby->reload;

# Promote once the standby has received all of it, perhaps while it is
# still replaying: promotion must replay everything received first.
$primary->wait_for_catchup($standby, 'flush');
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	$expected, 'the promoted standby has every update');
$standby->safe_psql('postgres', 'UPDATE t SET val = -1 WHERE id = 1');
is($standby->safe_psql('postgres', 'SELECT val FROM t WHERE id = 1'),
	'-1', 'the promoted standby takes writes');
# The startup process exits normally once recovery ends, so a pin or an I/O
# handle it left behind would be reported as a warning, before the
# postmaster reports the server ready.
$standby->wait_for_log(qr/database system is ready to accept connections/,
	$promote_offset);
ok( !$standby->log_contains($log_failures, $promote_offset),
	'promotion: nothing leaked, no crash or assertion failure');

# Above, reads are seldom in flight at the moment that matters: with
# buffered I/O most complete at once in the startup process.  Here a
# promotion is requested while a read the startup process started is held
# in flight, deterministically: under direct I/O the look-ahead's reads go
# to the one I/O worker, which an injection point stops before it performs
# the read.  Promotion must then complete, once the read is let go, with every
# update replayed and nothing leaked.  Promotion is noticed only once replay
# has used up the WAL received, so recovery ends after the held read has
# completed and been waited for: this shows that a held read delays a
# promotion without breaking it.  The last part ends recovery with a read
# in flight.  The session that lets the worker go is opened beforehand, and
# runs its queries once first, so that it needs no read meanwhile.
if (   $ENV{enable_injection_points} ne 'yes'
	|| !$primary->check_extension('injection_points')
	|| !direct_io_supported())
{
  SKIP:
	{
		skip 'injection points or direct I/O not available: no held read', 1;
	}
	done_testing();
	exit;
}
$primary->safe_psql('postgres',
	'CREATE EXTENSION injection_points; CREATE EXTENSION pg_buffercache;');
my $held = read_mode_standby(
	$primary, 'held',
	has_streaming => 1,
	extra_conf => "shared_buffers = 16MB\nio_method = worker\n"
	  . "io_workers = 1\ndebug_io_direct = data\narchive_mode = off\n");
$held->start;
$primary->wait_for_replay_catchup($held);

my $point = 'aio-worker-after-reopen';
my $startup_reads = q{
SELECT count(*) > 0 FROM pg_aios
WHERE pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup')
  AND operation = 'readv' AND state = 'SUBMITTED'};
my $worker_held = qq{
SELECT count(*) > 0 FROM pg_stat_activity
WHERE backend_type = 'io worker' AND wait_event = '$point'};
my $startup_waits = q{
SELECT wait_event = 'AioIoCompletion' FROM pg_stat_activity
WHERE backend_type = 'startup'};
my @warm_up = (
	$startup_reads, $worker_held, $startup_waits,
	'SELECT pg_is_in_recovery()',
	q{SELECT 'pg_promote'::regproc, 'injection_points_detach'::regproc,
  'injection_points_wakeup'::regproc});
my $session = $held->background_psql('postgres');
$session->query_safe($_) for @warm_up;
$session->query_safe(
	"SELECT buffers_evicted FROM pg_buffercache_evict_relation('t')");
$session->query_safe("SELECT injection_points_attach('$point', 'wait')");

$primary->safe_psql('postgres',
	'UPDATE t SET val = val + 1 WHERE id % 50 = 0');
$expected =
  $primary->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t');
ok( poll_session($session, $worker_held),
	'the I/O worker is held before a read');
ok( poll_session($session, $startup_reads),
	'the startup process has a read in flight');

$primary->wait_for_catchup($held, 'flush');
my $held_offset = -s $held->logfile;
$session->query_safe('SELECT pg_promote(false)');
$session->query_safe("SELECT injection_points_detach('$point')");
$session->query_safe("SELECT injection_points_wakeup('$point')");
$session->quit;

$held->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'timed out waiting for the promotion';
$held->wait_for_log(qr/database system is ready to accept connections/,
	$held_offset);
is($held->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	$expected, 'promoted after the held read, with every update');
ok(!$held->log_contains($log_failures),
	'no leak or failure in the log of the standby');

# Recovery that ends, at a recovery target, while a read the look-ahead
# started for a record past the target is held in flight.  A standby
# replays from the archive, which at first holds only the WAL of its base
# backup; once it is consistent, its session evicts the table, and the I/O
# worker is held before its next read.  Then one segment arrives with a
# restore point followed by updates of the table: the look-ahead decodes
# the updates and starts their reads before replay reaches the restore
# point, where recovery stops and ends.  The end of recovery must wait for
# the held read, then promote with nothing leaked (the startup process
# exits normally, so a pin or an I/O handle left behind would be reported).
# A record before the target that needs a read would wait for the held
# worker forever.  Connecting to the primary may prune catalog pages, which
# without full-page writes leaves records that do: the session that writes
# the WAL of this part connects, and does all that once, before the backup.
my $writer = $primary->background_psql('postgres');
my $at_target = $writer->query_safe('SELECT count(*), sum(val) FROM t');
$writer->query_safe("SELECT pg_create_restore_point('held_target_warm_up')");
$primary->backup('target_backup');
my $target = read_mode_standby(
	$primary, 'target',
	backup => 'target_backup',
	has_restoring => 1,
	extra_conf => "shared_buffers = 16MB\nio_method = worker\n"
	  . "io_workers = 1\ndebug_io_direct = data\narchive_mode = off\n"
	  . "recovery_target_name = 'held_target'\n"
	  . "recovery_target_action = 'promote'\n");
# The base backup ended its segment, which is archived; nothing follows.
$target->start;
$target->poll_query_until('postgres', 'SELECT pg_is_in_recovery()')
  or die 'timed out waiting for the target standby to replay its backup';

# The look-ahead's reads go to the one I/O worker, which will be held: the
# session runs each query it needs once before, so that it does not wait
# for a catalog page then (injection_points_wakeup() fails without a
# waiter).
$session = $target->background_psql('postgres');
$session->query_safe($_) for @warm_up;
$session->query_safe(
	"SELECT injection_points_attach('$point-warm-up', 'wait')");
$session->query_safe("SELECT injection_points_detach('$point-warm-up')");
$session->query_safe(
		"DO \$\$BEGIN PERFORM injection_points_wakeup('$point-warm-up'); "
	  . "EXCEPTION WHEN OTHERS THEN NULL; END\$\$");
$session->query_safe(
	"SELECT buffers_evicted FROM pg_buffercache_evict_relation('t')");
$session->query_safe("SELECT injection_points_attach('$point', 'wait')");

# The look-ahead does not read ahead of the first record after a segment
# switch until replay has passed it, so the restore point must not be that
# record: another one, without block references, comes first.  The update
# touches far more blocks than the look-ahead may pin, so that it does not
# reach the end of the segment, where it would run restore_command, which
# waits for the look-ahead's reads first.
my $log_offset = -s $target->logfile;
$writer->query_safe("SELECT pg_create_restore_point('held_target_lead')");
$writer->query_safe("SELECT pg_create_restore_point('held_target')");
$writer->query_safe('UPDATE t SET val = val + 1 WHERE id % 50 = 0');
$writer->quit;
archive_current_segment($primary);

eval {
	$target->wait_for_log(
		qr/recovery stopping at restore point "held_target"/, $log_offset);
	1;
} or die_with_failures($target, $@);
ok( poll_session($session, $startup_reads),
	'target: a read of the startup process is in flight after recovery stopped'
);
ok( poll_session($session, $startup_waits),
	'target: the end of recovery waits for it');
is($session->query_safe('SELECT pg_is_in_recovery()'),
	't', 'target: the server is still in recovery');
$session->query_safe("SELECT injection_points_detach('$point')");
$session->query_safe("SELECT injection_points_wakeup('$point')");
$session->quit;

$target->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'timed out waiting for the target standby to promote';
# The startup process reports leaks when it exits, after which the server
# accepts connections as a primary.
$target->wait_for_log(qr/database system is ready to accept connections/,
	$log_offset);
is($target->safe_psql('postgres', 'SELECT count(*), sum(val) FROM t'),
	$at_target, 'target: promoted at the restore point, before the update');
ok(!$target->log_contains($log_failures, $log_offset),
	'target: no leak, crash or assertion failure at the end of recovery');

done_testing();
