
# Copyright (c) 2026, PostgreSQL Global Development Group

# A hot standby query waits for a read that the startup process completes
# itself.
#
# In read mode, the startup process first tries a read with
# preadv2(RWF_NOWAIT) and completes it at once when the page cache holds the
# data.  Meanwhile the buffer is marked as being read, and a query needing
# the block waits for that IO.  It must wait on the IO's condition variable:
# under io_method = io_uring, waiting in the startup process's ring would
# wait for a completion that never comes.  An injection point holds the
# startup process between the start and the completion of such a read.
#
# Last, under io_uring, a query begins to wait for a read that is only
# staged and then misses the page cache: the query must complete it through
# io_uring itself, while the startup process is held before it waits.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils qw(poll_session);

if ($ENV{enable_injection_points} ne 'yes')
{
	plan skip_all => 'Injection points not supported by this build';
}

my @io_methods = ('worker');
push @io_methods, 'io_uring' if check_pg_config('#define USE_LIBURING 1');

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# Without full-page images, redo reads the block the update changes.
$primary->append_conf(
	'postgresql.conf', qq{
full_page_writes = off
autovacuum = off
});
$primary->start;
if (!$primary->check_extension('injection_points'))
{
	plan skip_all => 'Extension injection_points not installed';
}
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION injection_points;
CREATE EXTENSION pg_buffercache;
CREATE EXTENSION pg_prewarm;
CREATE TABLE t (id int, val int);
INSERT INTO t SELECT g, 0 FROM generate_series(1, 100) g;
});
$primary->backup('backup');

# A streaming standby in read mode with the given io_method, started.
sub start_read_standby
{
	my ($name, $io_method) = @_;
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, 'backup', has_streaming => 1);
	$standby->append_conf(
		'postgresql.conf', qq{
recovery_prefetch = on
recovery_prefetch_method = read
io_method = $io_method
});
	$standby->start;
	return $standby;
}

my $point = 'aio-inline-read-before-completion';
my $round = 0;
foreach my $io_method (@io_methods)
{
	my $standby = start_read_standby("standby_$io_method", $io_method);
	$primary->wait_for_replay_catchup($standby);

	# While the startup process is held, the block it reads may be one that
	# a new connection needs (a catalog page): no new connection is made
	# then.  Two sessions are opened before, and run what they will need
	# once, so that their catalog lookups are cached: one polls and lets the
	# startup process go, the other reads the block.
	my $held_sql = qq{SELECT count(*) > 0 FROM pg_stat_activity
WHERE backend_type = 'startup' AND wait_event = '$point'};
	my $waiting_sql = q{SELECT count(*) > 0 FROM pg_stat_activity
WHERE backend_type = 'client backend' AND wait_event = 'AioIoCompletion'};
	my $aio_sql = q{
SELECT target_desc FROM pg_aios
WHERE pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup')
  AND f_sync};
	my $monitor = $standby->background_psql('postgres');
	$monitor->query_safe($_) for ($held_sql, $waiting_sql, $aio_sql);
	$monitor->query_safe(
		"SELECT injection_points_attach('$point-warm-up', 'wait')");
	$monitor->query_safe("SELECT injection_points_detach('$point-warm-up')");
	$monitor->query_safe(
			"DO \$\$BEGIN PERFORM injection_points_wakeup('$point-warm-up'); "
		  . "EXCEPTION WHEN OTHERS THEN NULL; END\$\$");
	my $read_held_sql = q{
SELECT pg_prewarm(pg_filenode_relation(
         CASE WHEN target_desc LIKE '%"global/%' THEN 1664 ELSE 0 END,
         substring(target_desc from '/(\d+)"$')::oid),
       'buffer', 'main', b, b)
FROM pg_aios,
     LATERAL (SELECT substring(target_desc from '^blocks? (\d+)')::int8 AS b) l
WHERE pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup')
  AND f_sync};
	my $query = $standby->background_psql('postgres');
	$query->query_safe($read_held_sql);
	$query->query_safe("SELECT pg_prewarm('t', 'buffer', 'main', 0, 0)");

	# Read t's only block, so that the kernel caches it, then evict it from
	# shared buffers: redo of the next update reads it again, at once.
	$monitor->query_safe('SELECT count(*) FROM t');
	$monitor->query_safe(
		"SELECT buffers_evicted FROM pg_buffercache_evict_relation('t')");
	$monitor->query_safe("SELECT injection_points_attach('$point', 'wait')");
	my $reads_cached_before = $monitor->query_safe(
		'SELECT reads_cached FROM pg_stat_recovery_prefetch');

	$round++;
	$primary->safe_psql('postgres', "UPDATE t SET val = $round WHERE id = 1");
	ok(poll_session($monitor, $held_sql),
		"$io_method: the startup process is held during a read");

	# The first such read need not be t's: on-access pruning of a catalog
	# page on the primary, say, comes first.  Whichever it is, a query reads
	# the same block.  The read held at the injection point is the one
	# marked synchronous; the look-ahead may have other reads in flight.
	# The other session finds the relation itself: looking it up may need
	# the held block, and then it waits for the same read.
	like(
		$monitor->query_safe($aio_sql),
		qr/^blocks? \d+/,
		"$io_method: the startup process is reading a block");
	$query->query_until(qr/start/, "\\echo start\n$read_held_sql;\n");
	ok( poll_session($monitor, $waiting_sql),
		"$io_method: the query waits for the read on its condition variable");

	$monitor->query_safe("SELECT injection_points_detach('$point')");
	$monitor->query_safe("SELECT injection_points_wakeup('$point')");
	is($query->query_safe("SELECT 'done'"),
		"1\ndone", "$io_method: the query completed after the read");
	$query->quit;
	$monitor->quit;

	# Redo goes on.
	$primary->wait_for_replay_catchup($standby);
	is($standby->safe_psql('postgres', 'SELECT val FROM t WHERE id = 1'),
		$round, "$io_method: redo replayed the update");
	cmp_ok(
		$standby->safe_psql(
			'postgres', 'SELECT reads_cached FROM pg_stat_recovery_prefetch'),
		'>',
		$reads_cached_before,
		"$io_method: the read was completed from the page cache");
	$standby->stop;
}

# A query may also begin to wait for a read while the startup process has
# only staged it, before trying it inline.  When the page cache lacks the
# data, the read is then submitted to io_uring, where it completes only when
# someone waits for it through io_uring.  The query must do so itself rather
# than wait for the startup process to: that may take long (replay paused
# or delayed, a recovery conflict).  Here a second injection point holds the
# startup process just before it waits for the read.
if (grep { $_ eq 'io_uring' } @io_methods)
{
	my $staged_point = 'aio-inline-read-before-attempt';
	my $wait_point = 'recovery-prefetch-wait-read';
	my $standby = start_read_standby('standby_staged', 'io_uring');
	# The primary's change comes from a session that has made it once
	# before, so that it writes no other record (catalog pruning, say) whose
	# block the look-ahead might read first.
	my $writer = $primary->background_psql('postgres');
	my $change_sql = 'UPDATE t SET val = val + 1 WHERE id = 1';
	$writer->query_safe($change_sql);
	$primary->wait_for_replay_catchup($standby);

	my $monitor = $standby->background_psql('postgres');
	my $query = $standby->background_psql('postgres');
	my $held_sql = q{SELECT count(*) > 0 FROM pg_stat_activity
WHERE backend_type = 'startup' AND wait_event = '%s'};
	my $staged_held_sql = sprintf($held_sql, $staged_point);
	my $waiting_sql = q{SELECT count(*) > 0 FROM pg_stat_activity
WHERE backend_type = 'client backend' AND wait_event = 'AioIoCompletion'};
	my $staged_sql = q{
SELECT state || ' ' || target_desc FROM pg_aios
WHERE pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup')};
	my $wakeup_sql = q{DO $$BEGIN PERFORM injection_points_wakeup('%s');
EXCEPTION WHEN OTHERS THEN NULL; END$$};
	$monitor->query_safe($_)
	  for ($staged_held_sql, $waiting_sql, $staged_sql);
	$monitor->query_safe(
		"SELECT injection_points_attach('$staged_point-warm-up', 'wait')");
	$monitor->query_safe(
		"SELECT injection_points_detach('$staged_point-warm-up')");
	$monitor->query_safe(sprintf($wakeup_sql, "$staged_point-warm-up"));
	my $val = $query->query_safe('SELECT val FROM t WHERE id = 1');
	my $query_pid = $query->query_safe('SELECT pg_backend_pid()');
	my $done_sql = qq{SELECT state = 'idle' FROM pg_stat_activity
WHERE pid = $query_pid};
	$monitor->query_safe($done_sql);

	# t's block leaves shared buffers and the page cache, so that redo of
	# the update reads it, and the attempt to read it inline misses.  Only
	# the startup process reads t's file from now on; fincore tells whether
	# the kernel has it cached.
	my $t_file = $standby->data_dir . '/'
	  . $monitor->query_safe("SELECT pg_relation_filepath('t')");
	$monitor->query_safe(
		"SELECT buffers_evicted FROM pg_buffercache_evict_relation('t')");
	system('sync', $t_file) == 0 or die "could not sync $t_file";
	my $cached_bytes = sub {
		my $out =
		  `fincore --bytes --noheadings --output RES $t_file 2>/dev/null`;
		return $? == 0 && $out =~ /^\s*(\d+)\s*$/ ? $1 : undef;
	};
	# GNU dd's iflag=nocache advises POSIX_FADV_DONTNEED, which tmpfs
	# ignores.
	my $fs_type = `stat -f -c %T $t_file`;
	chomp $fs_type;
	if (   $fs_type eq 'tmpfs'
		|| !defined $cached_bytes->()
		|| system(
			'dd', "if=$t_file", 'of=/dev/null',
			'iflag=nocache', 'count=0', 'status=none') != 0)
	{
		note "cannot drop $t_file from the page cache ($fs_type) "
		  . 'or tell whether it is cached (fincore): '
		  . 'skipping the read that misses it';
		$query->quit;
		$monitor->quit;
		$writer->quit;
		$standby->stop;
		done_testing();
		exit;
	}

	$monitor->query_safe(
		"SELECT injection_points_attach('$staged_point', 'wait')");
	$monitor->query_safe(
		"SELECT injection_points_attach('$wait_point', 'wait')");
	$writer->query_safe($change_sql);
	ok(poll_session($monitor, $staged_held_sql),
		'staged: the startup process is held before trying a read inline');
	like(
		$monitor->query_safe($staged_sql),
		qr/^STAGED block 0 in file "base\/\d+\/\d+"$/,
		'staged: the held read is of t, and only staged');
	is($cached_bytes->(), 0,
		'staged: the page cache lacks the block the read will try');
	$query->query_until(qr/start/,
		"\\echo start\nSELECT val FROM t WHERE id = 1;\n");
	ok( poll_session($monitor, $waiting_sql),
		'staged: a query waits for the read');

	# The startup process submits the read, and is held again before it
	# waits for it, unless the query has completed it by then.
	$monitor->query_safe("SELECT injection_points_detach('$staged_point')");
	$monitor->query_safe("SELECT injection_points_wakeup('$staged_point')");
	ok(poll_session($monitor, $done_sql),
		'staged: the query completed the read without the startup process');
	$monitor->query_safe("SELECT injection_points_detach('$wait_point')");
	$monitor->query_safe(sprintf($wakeup_sql, $wait_point));
	is($query->query_safe("SELECT 'done'"),
		"$val\ndone", 'staged: the query saw the row as before the update');

	$primary->wait_for_replay_catchup($standby);
	is($standby->safe_psql('postgres', 'SELECT val FROM t WHERE id = 1'),
		$val + 1, 'staged: redo replayed the update');
	$query->quit;
	$monitor->quit;
	$writer->quit;
	$standby->stop;
}

done_testing();
