
# Copyright (c) 2026, PostgreSQL Global Development Group

# A standby with a non-volatile WAL buffer (NVWAL): its walreceiver makes
# received WAL durable in the file before it acknowledges it, and fsyncs
# pg_wal only once a segment is complete.  So a synchronous standby
# acknowledges commits that are not yet fsynced in its pg_wal, and a power
# failure of the standby must still lose none of them.
#
# Power failures are emulated as in 070: every process is killed at once,
# the file keeps only what was flushed and drained (plus some of the rest),
# and pg_wal loses what the file's header says was not fsynced.  The primary
# is stopped before the standby starts again, so the standby cannot fetch
# the lost WAL from it: what it has is what it kept.
#
# Checked: (1) acknowledged commits beyond the fsynced position, for which
# the walreceiver did not fsync, survive a power failure of the standby and
# are there after promotion; (2) after a standby crash, start-up refuses to
# run without nvwal_path, with another size, with the file missing or with
# another cluster's file, leaves the files untouched, and starts once the
# settings and the file are back; (3) a promotion right after commits
# became durable only in the ring, followed by a power failure, loses
# nothing; (4) a clean shutdown in recovery stops pg_control naming the
# file, so the standby can start without it; (5) after a timeline switch, a
# middle standby of a cascade keeps what it acknowledged on the new
# timeline through a power failure; (6) a ring that went around several
# times loses nothing either; (7) nor does a power failure after the
# walreceiver stopped, or after it restarted streaming.
#
# Each of these, removed one at a time, made this test fail: the persist of
# the received range (NvwalPersistRange() in NvwalPersistReceived()), the
# copy into the ring (NvwalReceive()), the header's received end, the
# record of the file in pg_control at the start of streaming, and the fsync
# of a completed segment (XLogWalRcvClose(): part 6); so did an fsync added
# back to XLogWalRcvFlush() (part 1's pg_stat_io check, which needs fsync =
# on: with fsync off, issue_xlog_fsync() counts nothing).  Part 7 fails
# without the sync at the end of a stream (XLogWalRcvStopNvwal()).
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

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
synchronous_standby_names = '*'
autovacuum = off
checkpoint_timeout = 1h
});
$primary->start;
$primary->safe_psql('postgres',
	'SET synchronous_commit = local; CREATE TABLE t (n int PRIMARY KEY, tag text NOT NULL)'
);

my $nvwal_settings = q{
nvwal_path = 'nvwal'
nvwal_size = 32MB
debug_nvwal_persisted_image = on
checkpoint_timeout = 1h
};

# "yes" or "no": does the node's pg_control name an NVWAL file?
sub control_names_file
{
	my ($node) = @_;
	my ($stdout) = run_command([ 'pg_controldata', $node->data_dir ]);
	my ($in_use) = $stdout =~ /^Non-volatile WAL buffer in use:\s+(\S+)$/m;
	return $in_use // 'missing';
}

sub new_standby
{
	my ($name, $extra_conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$primary->backup("for_$name");
	$node->init_from_backup($primary, "for_$name", has_streaming => 1);
	$node->append_conf('postgresql.conf',
		$nvwal_settings . ($extra_conf // ''));
	$node->start;
	return $node;
}

# Commit rows n = $from .. $to on the primary, each acknowledged by the
# synchronous standby; return the primary's insert position after them.
sub commit_rows
{
	my ($from, $to) = @_;
	$primary->safe_psql('postgres',
		"SET synchronous_commit = on; INSERT INTO t VALUES ($_, 'row $_')")
	  foreach $from .. $to;
	return $primary->safe_psql('postgres',
		'SELECT pg_current_wal_insert_lsn()');
}

# Start the rows of a test in a fresh segment, so that the walreceiver does
# not complete one (and fsync it) while they arrive.
sub start_new_segment
{
	$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
	$primary->safe_psql('postgres',
		"SET synchronous_commit = on; INSERT INTO t VALUES (-1, 'x'); DELETE FROM t WHERE n = -1"
	);
	return;
}

# Once the standby's flush position, and the durable position of its ring
# (pg_stat_nvwal), have reached $lsn: is its pg_wal fsynced only up to a
# point before $lsn?
sub ring_only_up_to
{
	my ($node, $lsn) = @_;
	$node->poll_query_until(
		'postgres', qq{
SELECT s.flushed_lsn >= '$lsn' AND n.flush_lsn >= '$lsn'
FROM pg_stat_wal_receiver s, pg_stat_nvwal n}
	) or die "the standby did not flush up to $lsn";
	return $node->safe_psql('postgres',
		"SELECT synced_lsn < '$lsn' FROM pg_stat_nvwal");
}

# A power failure of the node: returns the position pg_wal keeps.
sub power_failure
{
	my ($node) = @_;
	my $file = $node->data_dir . '/nvwal';
	$node->stop('immediate');
	lose_unpersisted_nvwal($file);
	return lose_unsynced_wal($node, $file);
}

# The salvage's log line since $offset: where the WAL it wrote ends.
sub salvage_end
{
	my ($node, $offset) = @_;
	my ($to) = slurp_file($node->logfile, $offset) =~
	  m{wrote WAL from [0-9A-F]+/[0-9A-F]+ to ([0-9A-F]+/[0-9A-F]+) on timeline \d+ from non-volatile WAL buffer file "[^"]*" to pg_wal};
	return $to // '0/0';
}

my $walreceiver_io = q{FROM pg_stat_io
WHERE backend_type = 'walreceiver' AND object = 'wal' AND context = 'normal'};

sub count_rows
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE n > 0');
}

# (1) Acknowledged, durable in the standby's ring only, then a power failure
# of the standby.
# With fsync on, so that pg_stat_io counts the walreceiver's fsyncs.
my $standby = new_standby('standby', "fsync = on\n");
ok(-f $standby->data_dir . '/nvwal', 'the standby created its NVWAL file');
start_new_segment();
$standby->safe_psql('postgres', "SELECT pg_stat_reset_shared('io')");
my $lsn = commit_rows(1, 20);
is( ring_only_up_to($standby, $lsn),
	't',
	'the standby acknowledged 20 commits that are durable in its ring but not fsynced in pg_wal'
);

# The walreceiver reports its I/O statistics when it has nothing to do; once
# they show the writes of the 20 commits, they show their fsyncs too.  At
# most the one of the segment completed just before the reset may come late.
$standby->poll_query_until('postgres', "SELECT writes >= 20 $walreceiver_io")
  or die 'the walreceiver did not report its writes';
cmp_ok($standby->safe_psql('postgres', "SELECT fsyncs $walreceiver_io"),
	'<=', 1, 'and did not fsync pg_wal to acknowledge them (pg_stat_io)');
is(control_names_file($standby),
	'yes', 'pg_control names the file while it holds received WAL');

my $synced = power_failure($standby);
$primary->stop;
my $offset = -s $standby->logfile;
$standby->start;
my $end = salvage_end($standby, $offset);
is( $standby->safe_psql(
		'postgres', "SELECT '$end'::pg_lsn >= '$lsn' AND '$synced' < '$lsn'"),
	't',
	"start-up wrote the ring's received WAL (up to $end) to pg_wal, past what was fsynced ($synced)"
);
$standby->promote;
is(count_rows($standby), 20,
	'after the power failure and promotion, the standby has all 20 commits');
$standby->stop;

# (2) Start-up refusals after a standby crash.  A new standby of the primary.
$primary->start;
$standby = new_standby('standby2');
start_new_segment();
$lsn = commit_rows(21, 30);
is(ring_only_up_to($standby, $lsn), 't', 'commits durable in the ring only');
$standby->stop('immediate');
my $file = $standby->data_dir . '/nvwal';
my $before = slurp_file($file);

# With the settings in $conf, the crashed standby must not start, and must
# log a line matching $expected.
sub refused_start
{
	my ($conf, $expected, $what, $why) = @_;
	$standby->append_conf('postgresql.conf', $conf);
	my $offset = -s $standby->logfile;
	ok(!$standby->start(fail_ok => 1),
		"a crashed standby does not start $what");
	like(slurp_file($standby->logfile, $offset), $expected, $why);
	return;
}

refused_start(
	"nvwal_path = ''",
	qr/did not shut down cleanly while using a non-volatile WAL buffer, but "nvwal_path" is not set/,
	'without nvwal_path',
	'and says why');
refused_start(
	"nvwal_path = 'nvwal'\nnvwal_size = 64MB",
	qr/"nvwal_size" does not match the ring size.*HINT:  Set "nvwal_size" to 32MB/s,
	'with another nvwal_size',
	'and says which size to set');
rename($file, "$file.moved") or die "could not rename $file: $!";
refused_start(
	'nvwal_size = 32MB',
	qr/non-volatile WAL buffer file "[^"]*" does not exist/,
	'without its file',
	'and says which file is missing');
ok(!-e $file, 'and creates none in its place');
rename("$file.moved", $file) or die "could not rename $file.moved: $!";

# The file of another cluster, which shut down cleanly.
my $other = PostgreSQL::Test::Cluster->new('other');
$other->init(force_initdb => 1);
$other->append_conf('postgresql.conf', $nvwal_settings);
$other->start;
$other->stop;
my $other_file = $other->data_dir . '/nvwal';
my $other_before = slurp_file($other_file);
refused_start(
	"nvwal_path = '$other_file'",
	qr/non-volatile WAL buffer file "\Q$other_file\E" belongs to another database system/,
	"with another cluster's file",
	'and says whose file it is');
ok( slurp_file($other_file) eq $other_before,
	"the other cluster's file is unchanged");
$standby->append_conf('postgresql.conf', "nvwal_path = 'nvwal'");
ok(slurp_file($file) eq $before, 'the refusals left the file unchanged');

$offset = -s $standby->logfile;
$standby->start;
isnt(salvage_end($standby, $offset),
	'0/0', 'with the settings back, start-up salvages the ring');

# (3) Promotion right after commits became durable in the ring only, then a
# power failure of the new primary.
start_new_segment();
$lsn = commit_rows(31, 40);
is(ring_only_up_to($standby, $lsn), 't', 'commits durable in the ring only');
$primary->stop;
$standby->promote;
power_failure($standby);
$standby->start;
is(count_rows($standby), 40,
	'a power failure right after promotion loses no acknowledged commit');
$standby->stop;

# (4) A clean shutdown in recovery: pg_control stops naming the file.
$primary->start;
$standby = new_standby('standby3');
start_new_segment();
commit_rows(41, 45);
$standby->stop;
is(control_names_file($standby),
	'no', 'after a clean shutdown in recovery, pg_control names no file');
$standby->append_conf('postgresql.conf', "nvwal_path = ''");
$standby->start;
$primary->wait_for_replay_catchup($standby);
is(count_rows($standby), 45, 'the standby starts without the file');

$standby->stop;

# (5) A timeline switch under a cascade of NVWAL standbys: the middle one
# follows a promoted primary to its new timeline and acknowledges its
# commits; after the downstream one replayed them, a power failure of the
# middle one loses nothing, with neither primary left to stream from.
my $newprimary = PostgreSQL::Test::Cluster->new('newprimary');
$primary->backup('for_newprimary');
$newprimary->init_from_backup($primary, 'for_newprimary', has_streaming => 1);
$newprimary->start;
my $middle = new_standby('middle');
$middle->backup('for_downstream');
my $downstream = PostgreSQL::Test::Cluster->new('downstream');
$downstream->init_from_backup($middle, 'for_downstream', has_streaming => 1);
$downstream->append_conf('postgresql.conf', $nvwal_settings);
$downstream->start;
commit_rows(46, 50);
$primary->wait_for_replay_catchup($newprimary);
$primary->wait_for_replay_catchup($middle);
$primary->stop;

$newprimary->promote;
$middle->append_conf('postgresql.conf',
	"primary_conninfo = '" . $newprimary->connstr . "'");
$middle->reload;
$newprimary->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 'middle'"
) or die "the middle standby did not connect to the new primary";
$newprimary->safe_psql('postgres',
	"SET synchronous_commit = on; INSERT INTO t VALUES ($_, 'row $_')")
  foreach 51 .. 60;
$lsn =
  $newprimary->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
is( ring_only_up_to($middle, $lsn),
	't',
	'the middle standby acknowledged commits of the new timeline from its ring'
);
$middle->wait_for_catchup($downstream, 'replay', $lsn);

power_failure($middle);
$newprimary->stop;
$offset = -s $middle->logfile;
$middle->start;
like(
	slurp_file($middle->logfile, $offset),
	qr/wrote WAL from \S+ to \S+ on timeline 2 from non-volatile WAL buffer file/,
	"the middle standby's salvage wrote WAL of the new timeline");
$middle->promote;
is(count_rows($middle), 60,
	'after its power failure, the middle standby has every commit of both timelines'
);
is(count_rows($downstream), 60, 'so has the downstream standby');

$middle->stop;
$downstream->stop;

# (6) The ring, two segments, goes around several times while the standby
# streams; then a power failure of the standby right after a last batch of
# commits, with the primary gone: the standby ends with exactly the
# primary's rows.
$primary->start;
$standby = new_standby('lapping');
$primary->safe_psql('postgres',
	'SET synchronous_commit = local; CREATE TABLE big (n int, pad text)');
my $lsn_before =
  $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
$primary->safe_psql('postgres',
	"INSERT INTO big SELECT g, repeat('x', 400) FROM generate_series(1, 25000 * $_) g"
) foreach 1 .. 4;
$lsn = commit_rows(61, 70);
cmp_ok(
	$primary->safe_psql(
		'postgres', "SELECT pg_wal_lsn_diff('$lsn', '$lsn_before')"),
	'>',
	64 * 1024 * 1024,
	'the standby received more than twice its ring');
is(ring_only_up_to($standby, $lsn),
	't', 'the last commits are in the ring only');
my $expected = $primary->safe_psql('postgres',
	'SELECT count(*), sum(n), sum(length(pad)) FROM big');
my $expected_rows = count_rows($primary);
power_failure($standby);
$primary->stop;
$standby->start;
$standby->promote;
is( $standby->safe_psql(
		'postgres', 'SELECT count(*), sum(n), sum(length(pad)) FROM big'),
	$expected,
	'after laps of the ring and a power failure, the standby has what the primary had'
);
is(count_rows($standby), $expected_rows, 'and every acknowledged commit');
$standby->stop;

# (7) Streaming stops and starts again.  Without primary_conninfo the
# walreceiver exits, syncing what it received, marking the file clean and
# letting pg_control forget it; a power failure then, with the primary
# gone, loses nothing.  Then the walsender of a new stream is terminated:
# the walreceiver exits and a new one streams from the beginning of the
# segment, writing the same WAL into the ring again.  Commits acknowledged
# after that, then a power failure: all there.
$primary->start;
$standby = new_standby('restart');
start_new_segment();
$lsn = commit_rows(71, 75);
is(ring_only_up_to($standby, $lsn), 't', 'commits durable in the ring only');
$standby->append_conf('postgresql.conf', "primary_conninfo = ''");
$standby->reload;
$standby->poll_query_until('postgres',
	'SELECT count(*) = 0 FROM pg_stat_wal_receiver')
  or die 'the walreceiver did not exit';
is(control_names_file($standby),
	'no', 'a walreceiver that exits lets pg_control forget the file');
$expected_rows = count_rows($primary);
power_failure($standby);
$primary->stop;
$standby->start;
ok( $standby->poll_query_until(
		'postgres', "SELECT count(*) = $expected_rows FROM t WHERE n > 0"),
	'a power failure after the walreceiver exited loses no acknowledged commit'
);

$standby->append_conf('postgresql.conf',
	"primary_conninfo = '" . $primary->connstr . "'");
$primary->start;
$standby->reload;
$standby->poll_query_until('postgres',
	"SELECT status = 'streaming' FROM pg_stat_wal_receiver")
  or die 'the walreceiver did not stream again';
my $pid =
  $standby->safe_psql('postgres', 'SELECT pid FROM pg_stat_wal_receiver');
$primary->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = 'restart'"
);
$standby->poll_query_until('postgres',
	"SELECT pid <> $pid AND status = 'streaming' FROM pg_stat_wal_receiver")
  or die 'the walreceiver did not stream again';
$lsn = commit_rows(76, 80);
is(ring_only_up_to($standby, $lsn),
	't', 'after a streaming restart, commits are durable in the ring only');
$expected_rows = count_rows($primary);
power_failure($standby);
$primary->stop;
$standby->start;
$standby->promote;
is(count_rows($standby), $expected_rows,
	'a power failure after a streaming restart loses no acknowledged commit');
$standby->stop;
done_testing();
