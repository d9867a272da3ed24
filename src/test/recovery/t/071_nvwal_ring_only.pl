
# Copyright (c) 2026, PostgreSQL Global Development Group

# Non-volatile WAL buffer: a commit acknowledged while its WAL existed only
# in the ring survives a crash.
#
# The WAL writer, the only process that writes the ring to pg_wal in the
# background, is stopped with SIGSTOP.  A commit is then durable in the ring
# but neither written nor fsynced in pg_wal, which pg_stat_nvwal and
# pg_waldump confirm.  After a crash (an immediate stop), start-up must
# write the ring's durable tail to pg_wal, and recovery must replay the
# commit.  Start-up must write only that tail, although the ring also holds
# pages initialized ahead of insertion, so that its time does not grow with
# the ring.  A second round, where a checkpoint has written the commit to
# pg_wal before the crash, shows that the same checks see WAL that is there.
# A last round, with the WAL writer stopped again, checks that the
# monitoring functions only read positions: both cover a commit that pg_wal
# does not hold yet, and calling them writes nothing there.  After a backend
# crash, pg_stat_nvwal must still describe the file, which stays mapped.
# Segments that were complete only in the ring at a crash must be archived
# once start-up has written them; and when a record in the ring's tail is
# damaged after the crash, only the segments recovery found valid to their
# end are archived, and what the salvage wrote past the end of WAL is
# zeroed.
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

# Run pg_waldump on pg_wal with the given options; returns whether it
# exited successfully, its output and its errors.
sub run_waldump
{
	my ($node, @options) = @_;
	my ($stdout, $stderr);
	my $ok = IPC::Run::run(
		[ 'pg_waldump', '--path' => $node->data_dir . '/pg_wal', @options ],
		'>' => \$stdout,
		'2>' => \$stderr);
	return ($ok, $stdout, $stderr);
}

# Records pg_waldump finds in pg_wal from $start on.  It stops with an
# error at the end of valid WAL, so its exit status does not matter.
sub waldump
{
	my ($node, $start) = @_;
	my (undef, $stdout) = run_waldump($node, '--start' => $start);
	return $stdout;
}

# With the WAL writer stopped, commit a row with the given note, and check
# that pg_waldump does not find the commit in pg_wal.  Returns where WAL
# ended before it, its transaction ID and where its WAL ends.
sub commit_past_pg_wal
{
	my ($node, $note, $label) = @_;
	my $start =
	  $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	my ($xid, $commit_end) = split /\n/, $node->safe_psql(
		'postgres', qq{
INSERT INTO t SELECT max(id) + 1, '$note' FROM t RETURNING pg_current_xact_id();
SELECT pg_current_wal_insert_lsn();
});
	unlike(
		waldump($node, $start),
		qr/tx:\s+$xid,.*desc: COMMIT/,
		"$label: the commit record is not in pg_wal yet");
	return ($start, $xid, $commit_end);
}

my $salvage_re =
  qr/wrote WAL from (\S+) to (\S+) on timeline \d+ from non-volatile WAL buffer file "nvwal" to pg_wal/;

my $node = PostgreSQL::Test::Cluster->new('nvwal_ring_only');
$node->init;
$node->append_conf('postgresql.conf',
	ring_only_settings() . "wal_writer_flush_after = 0\n");
$node->start;

is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_nvwal'),
	'1', 'the server uses a non-volatile WAL buffer');

$node->safe_psql('postgres',
	'CREATE TABLE t (id int PRIMARY KEY, note text); CHECKPOINT;');
my $redo = $node->safe_psql('postgres',
	'SELECT redo_lsn FROM pg_control_checkpoint()');

# Have the WAL writer write back WAL of an asynchronous commit (which wakes
# it, with wal_writer_flush_after = 0).  After writing, it initializes the
# ring's free pages ahead of insertion, so that the ring holds valid, empty
# pages far beyond the end of WAL, as it normally does.
my $synced_start =
  $node->safe_psql('postgres', 'SELECT synced_lsn FROM pg_stat_nvwal');
$node->safe_psql(
	'postgres', q{
SET synchronous_commit = off;
INSERT INTO t VALUES (0, 'asynchronous');
});
ok( $node->poll_query_until(
		'postgres', "SELECT synced_lsn > '$synced_start' FROM pg_stat_nvwal"),
	'the WAL writer wrote back WAL of an asynchronous commit');

# Stop the WAL writer.
my $walwriter = stop_walwriter($node);

# Commit, and note the transaction and where its WAL ends.
my ($xid, $commit_end) = split /\n/, $node->safe_psql(
	'postgres', q{
INSERT INTO t VALUES (1, 'only in the ring') RETURNING pg_current_xact_id();
SELECT pg_current_wal_insert_lsn();
});

my ($synced_before, $durable, $synced_lsn, $flush_lsn) = split /\|/,
  $node->safe_psql(
	'postgres',
	"SELECT synced_lsn < '$commit_end', flush_lsn >= '$commit_end', synced_lsn, flush_lsn FROM pg_stat_nvwal"
  );
note
  "commit ends at $commit_end, synced_lsn $synced_lsn, flush_lsn $flush_lsn";
is($synced_before, 't',
	'the commit is not yet written back and fsynced to pg_wal');
is($durable, 't', 'the commit is durable in the ring');

my $dump = waldump($node, $redo);
like($dump, qr/CHECKPOINT_ONLINE/,
	'pg_waldump reads pg_wal up to the checkpoint');
unlike(
	$dump,
	qr/tx:\s+$xid,.*desc: COMMIT/,
	'the commit record is not in pg_wal');

# Crash: the commit's WAL is in the ring only.
crash_with_walwriter_stopped($node, $walwriter);
my $logpos = -s $node->logfile;
$node->start;

is( $node->safe_psql('postgres', 'SELECT note FROM t WHERE id = 1'),
	'only in the ring',
	'the commit survived the crash');

my $log = slurp_file($node->logfile, $logpos);
like($log, $salvage_re, 'start-up wrote the ring\'s durable tail to pg_wal');
if (my ($from, $to) = $log =~ $salvage_re)
{
	is( $node->safe_psql(
			'postgres',
			"SELECT '$from'::pg_lsn <= '$synced_lsn' AND '$to'::pg_lsn >= '$commit_end'"
		),
		't',
		"the written range $from to $to covers the commit");

	# Start-up time must not grow with the ring: only the WAL after the
	# synced position is written, not the empty pages beyond it.
	cmp_ok(
		$node->safe_psql('postgres', "SELECT '$to'::pg_lsn - '$from'"),
		'<',
		1024 * 1024,
		'start-up wrote only the tail of WAL, not the whole ring');
}
like(
	waldump($node, $redo),
	qr/tx:\s+$xid,.*desc: COMMIT/,
	'the commit record is in pg_wal after the restart');

# Control: with the WAL writer running and a checkpoint after the commit,
# the commit is in pg_wal before the crash, and the checks above see it.
($xid, $commit_end) = split /\n/, $node->safe_psql(
	'postgres', q{
INSERT INTO t VALUES (2, 'written back') RETURNING pg_current_xact_id();
SELECT pg_current_wal_insert_lsn();
CHECKPOINT;
});
is( $node->safe_psql(
		'postgres', "SELECT synced_lsn >= '$commit_end' FROM pg_stat_nvwal"),
	't',
	'control: after a checkpoint, the commit is fsynced in pg_wal');
like(
	waldump($node, $redo),
	qr/tx:\s+$xid,.*desc: COMMIT/,
	'control: pg_waldump finds the commit record in pg_wal');

$node->stop('immediate');
$logpos = -s $node->logfile;
$node->start;
ok( $node->log_contains($salvage_re, $logpos),
	'control: start-up checked the ring again');
is( $node->safe_psql(
		'postgres', 'SELECT string_agg(note, \', \' ORDER BY id) FROM t'),
	'asynchronous, only in the ring, written back',
	'control: all commits survived the second crash');

# The monitoring functions only read positions.  With the commit durable in
# the ring only, both pg_current_wal_lsn() and pg_current_wal_flush_lsn()
# cover it, as they would without NVWAL once the commit returned, and the
# write location is not behind the flush location; pg_stat_nvwal.synced_lsn
# says how far pg_wal is complete, and a program reading pg_wal up to it
# finds all of it there; calling the functions writes nothing to pg_wal.  A
# checkpoint then writes the commit back, and synced_lsn follows.
{
	# pg_wal then holds the checkpoint record, at least, from its redo
	# pointer on.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $checkpoint_redo = $node->safe_psql('postgres',
		'SELECT redo_lsn FROM pg_control_checkpoint()');
	$walwriter = stop_walwriter($node);
	my ($start, $xid, $commit_end) =
	  commit_past_pg_wal($node, 'monitoring', 'monitoring');
	my ($synced, $flushed, $written, $ordered, $in_pg_wal) =
	  split /\|/, $node->safe_psql(
		'postgres', qq{
SELECT synced_lsn,
       pg_current_wal_flush_lsn() >= '$commit_end',
       pg_current_wal_lsn() >= '$commit_end',
       pg_current_wal_lsn() >= pg_current_wal_flush_lsn(),
       synced_lsn >= '$commit_end'
  FROM pg_stat_nvwal});
	is($flushed, 't',
		'monitoring: pg_current_wal_flush_lsn() covers the durable commit');
	is($written, 't',
		'monitoring: pg_current_wal_lsn() covers the durable commit');
	is($ordered, 't',
		'monitoring: the write location is not behind the flush location');
	is($in_pg_wal, 'f',
		'monitoring: synced_lsn does not cover it, pg_wal lacks the commit');

	# With --end, pg_waldump fails if WAL before that position is missing.
	my ($ok, $dump, $errors) =
	  run_waldump($node, '--start' => $checkpoint_redo, '--end' => $synced);
	ok($ok, 'monitoring: pg_waldump reads pg_wal up to synced_lsn')
	  or diag("pg_waldump: $errors");
	unlike(
		waldump($node, $start),
		qr/tx:\s+$xid,.*desc: COMMIT/,
		'monitoring: the functions wrote nothing to pg_wal');

	$node->safe_psql('postgres', 'CHECKPOINT');
	is( $node->safe_psql(
			'postgres',
			"SELECT synced_lsn >= '$commit_end' FROM pg_stat_nvwal"),
		't',
		'monitoring: after a checkpoint, synced_lsn covers the commit');
	like(
		waldump($node, $start),
		qr/tx:\s+$xid,.*desc: COMMIT/,
		'monitoring: after a checkpoint, pg_waldump finds the commit record');
	kill('CONT', $walwriter) or die "could not resume the WAL writer: $!";
}

# When a backend crashes, the postmaster reinitializes shared memory but
# keeps the file mapped: the start-up process salvages the ring through that
# mapping, and pg_stat_nvwal must still describe it.  The last commit
# before the crash is in the ring only (the WAL writer is stopped, then
# killed with the backend), so it survives only if that salvage works.
$node->safe_psql('postgres', 'ALTER SYSTEM SET restart_after_crash = on');
$node->reload;
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
$walwriter = stop_walwriter($node);
(undef, $xid, $commit_end) =
  commit_past_pg_wal($node, 'before a backend crash', 'crash restart');
my $log_offset = -s $node->logfile;
kill('KILL', $victim_pid) or die "could not kill backend $victim_pid: $!";
kill('KILL', $walwriter) or die "could not kill the WAL writer: $!";
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
$node->wait_for_log(qr/database system is ready to accept connections/,
	$log_offset);
eval { $victim->quit; };
my ($tail_from, $tail_to) =
  slurp_file($node->logfile, $log_offset) =~ $salvage_re;
ok( defined $tail_to && $node->safe_psql('postgres',
		"SELECT '$tail_from'::pg_lsn < '$commit_end' AND '$tail_to'::pg_lsn >= '$commit_end'"
	) eq 't',
	'crash restart: start-up wrote the ring\'s tail, with the commit, to pg_wal'
);
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM t WHERE note = 'before a backend crash'}),
	'1',
	'crash restart: the last commit survived');
is($node->safe_psql('postgres', 'SELECT is_pmem FROM pg_stat_nvwal'),
	't', 'crash restart: pg_stat_nvwal still shows the file as pmem');

unlike(slurp_file($node->logfile),
	qr/PANIC|TRAP:/, 'no PANIC or assertion failure in the server log');

$node->stop;

# Whether the archiver reached 'segment' and the archive holds it.
sub archived
{
	my ($node, $segment) = @_;
	return $node->poll_query_until('postgres',
		"SELECT last_archived_wal >= '$segment' FROM pg_stat_archiver")
	  && -f $node->archive_dir . "/$segment";
}

# Segments that were complete only in the ring when the server crashed are
# completed in pg_wal by start-up, and must be archived like any other.
# wal_keep_size keeps checkpoints from noticing them, as they would when
# they remove old segments.
my $archiving = PostgreSQL::Test::Cluster->new('nvwal_archiving');
$archiving->init(
	allows_streaming => 1,
	has_archiving => 1,
	extra => [ '--wal-segsize' => 1 ]);
$archiving->append_conf('postgresql.conf',
	ring_only_settings() . "wal_keep_size = 1GB\n");
$archiving->start;
$archiving->safe_psql('postgres',
	'CREATE TABLE a (id int, pad text); CHECKPOINT; SELECT pg_switch_wal()');
my $first_segment = $archiving->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
my $archiving_walwriter = stop_walwriter($archiving);
$archiving->safe_psql('postgres',
	q{INSERT INTO a SELECT g, repeat('a', 200) FROM generate_series(1, 15000) g}
);
my $last_segment = $archiving->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
cmp_ok($last_segment, 'gt', $first_segment,
	'archiving: the commit spans segments');
crash_with_walwriter_stopped($archiving, $archiving_walwriter);
$archiving->start;
ok( archived($archiving, $first_segment),
	'archiving: segments completed by start-up are archived, the first included'
);

# The salvage also writes what follows the durable end, which recovery may
# reject: only segments recovery found valid to their end are archived.  A
# record in the second segment of the ring's tail is damaged after the
# crash; recovery ends there, and the server goes on writing that segment.
$archiving->safe_psql('postgres', 'SELECT pg_switch_wal()');
my $start_lsn =
  $archiving->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
my ($seg1, $seg2, $seg3) = split /\|/,
  $archiving->safe_psql('postgres',
	"SELECT pg_walfile_name('$start_lsn'), pg_walfile_name('$start_lsn'::pg_lsn + 1048576), pg_walfile_name('$start_lsn'::pg_lsn + 2 * 1048576)"
  );
$archiving_walwriter = stop_walwriter($archiving);
$archiving->safe_psql('postgres',
	q{INSERT INTO a SELECT g, repeat('b', 200) FROM generate_series(1, 15000) g}
);
my $damaged = $archiving->safe_psql('postgres',
	"SELECT ('$start_lsn'::pg_lsn + 1048576 + 262144 + 4000) - '0/0'");
crash_with_walwriter_stopped($archiving, $archiving_walwriter);
my $ring_file = $archiving->data_dir . '/nvwal';
open(my $ring, '+<', $ring_file) or die "could not open $ring_file: $!";
binmode $ring;
sysseek($ring, 8192 + $damaged % (32 * 1024 * 1024), 0)
  or die "could not seek in $ring_file: $!";
syswrite($ring, "\xff" x 64) == 64 or die "could not write $ring_file: $!";
close($ring) or die "could not close $ring_file: $!";
my $damaged_offset = -s $archiving->logfile;
$archiving->start;
my ($redo_done) =
  slurp_file($archiving->logfile, $damaged_offset) =~ /redo done at (\S+)/;
$redo_done //= '0/0';
is( $archiving->safe_psql('postgres', "SELECT pg_walfile_name('$redo_done')"),
	$seg2,
	'damaged record: recovery ended in the second segment');
ok( $archiving->poll_query_until(
		'postgres',
		"SELECT last_archived_wal >= '$seg1' FROM pg_stat_archiver"),
	'damaged record: the segment before it is archived');
ok( !-e $archiving->archive_dir . "/$seg2"
	  && !-e $archiving->data_dir . "/pg_wal/archive_status/$seg2.ready",
	'damaged record: the segment where recovery ended is not archived');
ok( !-e $archiving->archive_dir . "/$seg3"
	  && !-e $archiving->data_dir . "/pg_wal/archive_status/$seg3.ready",
	'damaged record: a segment after the end of WAL is not archived');

# The salvage wrote the records after the damaged one to pg_wal too.  Should
# new WAL end exactly where one of them begins, and the server crash again,
# recovery would take it for the next record.  Start-up must have zeroed
# them in pg_wal, and left none in the ring.
my $damaged_log = slurp_file($archiving->logfile, $damaged_offset);
my ($salvaged_to) = ($damaged_log =~ $salvage_re)[1];
ok( defined $salvaged_to
	  && $damaged_log =~
	  /cleared WAL from \S+ to \Q$salvaged_to\E on timeline \d+ past the end of WAL/,
	'damaged record: start-up zeroed what the salvage wrote past the end of WAL'
);
my $seg3_data = slurp_file($archiving->data_dir . "/pg_wal/$seg3");
is($seg3_data =~ tr/\0//c,
	0, 'damaged record: a segment after the end of WAL holds only zeroes');
my $seg3_start = $archiving->safe_psql('postgres',
	"SELECT ('$start_lsn'::pg_lsn + 2 * 1048576 - (pg_walfile_name_offset('$start_lsn'::pg_lsn + 2 * 1048576)).file_offset) - '0/0'"
);
open($ring, '<', $ring_file) or die "could not open $ring_file: $!";
binmode $ring;
sysseek($ring, 8192 + $seg3_start % (32 * 1024 * 1024), 0)
  or die "could not seek in $ring_file: $!";
sysread($ring, my $slot, 44) == 44 or die "could not read $ring_file: $!";
close($ring);
# A long page header takes 40 bytes; then comes the first record's length.
my ($magic, $info) = unpack('S< S<', $slot);
my ($first_len) = unpack('L<', substr($slot, 40, 4));
ok( $magic == 0 || (($info & 1) == 0 && $first_len == 0),
	'damaged record: the ring holds no WAL for a segment after the end of WAL'
);

# A second failure during recovery, after the salvage has emptied the ring,
# must not leave the segments it completed unmarked: the next start has
# nothing to salvage.  Here the first recovery fails on a relation file it
# may not open.
$archiving->safe_psql('postgres',
	'CREATE TABLE b (id int, pad text); CHECKPOINT; SELECT pg_switch_wal()');
my $b_first = $archiving->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
my $b_file = $archiving->data_dir . '/'
  . $archiving->safe_psql('postgres', "SELECT pg_relation_filepath('b')");
$archiving_walwriter = stop_walwriter($archiving);
$archiving->safe_psql('postgres',
	q{INSERT INTO b SELECT g, repeat('c', 200) FROM generate_series(1, 15000) g}
);
cmp_ok(
	$archiving->safe_psql(
		'postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())'),
	'gt', $b_first,
	'second failure: the commit spans segments');
crash_with_walwriter_stopped($archiving, $archiving_walwriter);
chmod(0, $b_file) or die "could not chmod $b_file: $!";
my $failed_offset = -s $archiving->logfile;
ok(!$archiving->start(fail_ok => 1),
	'second failure: recovery fails on a file it may not open');
like(
	slurp_file($archiving->logfile, $failed_offset),
	qr/wrote WAL from \S+ to \S+ on timeline \d+ from non-volatile WAL buffer file/,
	'second failure: the failed start had salvaged the ring');
chmod(0600, $b_file) or die "could not chmod $b_file: $!";
my $restart_offset = -s $archiving->logfile;
$archiving->start;
unlike(
	slurp_file($archiving->logfile, $restart_offset),
	qr/wrote WAL from/,
	'second failure: the next start has nothing to salvage');
is($archiving->safe_psql('postgres', 'SELECT count(*) FROM b'),
	'15000', 'second failure: the commit survived');
ok( archived($archiving, $b_first),
	'second failure: the segments the salvage completed are archived, the first included'
);

# What the salvage wrote past the end of WAL must be zeroed even when the
# recovery after it fails and the server then starts without the file:
# pg_control, not the file, says how far the salvage wrote.  As above, a
# record in the second segment of the ring's tail is damaged, and the
# first recovery fails on a relation file it may not open.
$archiving->safe_psql('postgres',
	'CREATE TABLE c (id int, pad text); CHECKPOINT; SELECT pg_switch_wal()');
my $c_start =
  $archiving->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
my $c_seg3 = $archiving->safe_psql('postgres',
	"SELECT pg_walfile_name('$c_start'::pg_lsn + 2 * 1048576)");
my $c_file = $archiving->data_dir . '/'
  . $archiving->safe_psql('postgres', "SELECT pg_relation_filepath('c')");
$archiving_walwriter = stop_walwriter($archiving);
$archiving->safe_psql('postgres',
	q{INSERT INTO c SELECT g, repeat('d', 200) FROM generate_series(1, 15000) g}
);
$damaged = $archiving->safe_psql('postgres',
	"SELECT ('$c_start'::pg_lsn + 1048576 + 262144 + 4000) - '0/0'");
crash_with_walwriter_stopped($archiving, $archiving_walwriter);
open($ring, '+<', $ring_file) or die "could not open $ring_file: $!";
binmode $ring;
sysseek($ring, 8192 + $damaged % (32 * 1024 * 1024), 0)
  or die "could not seek in $ring_file: $!";
syswrite($ring, "\xff" x 64) == 64 or die "could not write $ring_file: $!";
close($ring) or die "could not close $ring_file: $!";
chmod(0, $c_file) or die "could not chmod $c_file: $!";
$failed_offset = -s $archiving->logfile;
ok(!$archiving->start(fail_ok => 1),
	'start without the file: the recovery after the salvage fails');
like(
	slurp_file($archiving->logfile, $failed_offset),
	qr/wrote WAL from \S+ to \S+ on timeline \d+ from non-volatile WAL buffer file/,
	'start without the file: the failed start had salvaged the ring');
chmod(0600, $c_file) or die "could not chmod $c_file: $!";
$archiving->adjust_conf('postgresql.conf', 'nvwal_path', "''");
$restart_offset = -s $archiving->logfile;
$archiving->start;
like(
	slurp_file($archiving->logfile, $restart_offset),
	qr/cleared WAL from \S+ to \S+ on timeline \d+ past the end of WAL/,
	'start without the file: start-up zeroed what the salvage wrote past the end of WAL'
);
my $c_seg3_data = slurp_file($archiving->data_dir . "/pg_wal/$c_seg3");
is( $c_seg3_data =~ tr/\0//c,
	0,
	'start without the file: a segment after the end of WAL holds only zeroes'
);
$archiving->stop;

done_testing();
