
# Copyright (c) 2026, PostgreSQL Global Development Group

# A read the look-ahead starts may fail where redo never goes: here a block
# with a bad checksum is referenced only by WAL past the recovery target.
# Recovery must stop at the target and promote as it does without
# prefetching; the damaged block must still be reported to whoever reads it
# afterwards, also when the startup process ran with zero_damaged_pages or
# ignore_checksum_failure.  Each recovery to the target must end without a
# leaked pin or I/O handle.  Last, on a streaming standby, a reload that
# turns either setting on or off switches the mode at the next record.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PrefetchRead::Utils;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(has_archiving => 1, allows_streaming => 1);
# Without full-page images, the update after the target is replayed by
# reading its block, so the look-ahead reads it; autovacuum would add WAL
# touching the table.
$primary->append_conf(
	'postgresql.conf', q{
full_page_writes = off
autovacuum = off
});
$primary->start;
is($primary->safe_psql('postgres', 'SHOW data_checksums'),
	'on', 'data checksums are on, so a damaged page fails verification');

# VACUUM sets the hint bits the update would otherwise set, which could
# log an image of the page first.
$primary->safe_psql(
	'postgres',
	q{CREATE TABLE t (id int, pad text) WITH (fillfactor = 50);
	  INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g;
	  VACUUM t;
	  CREATE TABLE other (id int);});
my $blkno = $primary->safe_psql('postgres',
	q{SELECT (ctid::text::point)[0]::int FROM t WHERE id = 1000});
my $relpath =
  $primary->safe_psql('postgres', q{SELECT pg_relation_filepath('t')});
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->backup('backup');

# Replayed: an insert and the restore point.  Not replayed: the update.
$primary->safe_psql(
	'postgres',
	q{INSERT INTO other VALUES (1);
	  SELECT pg_create_restore_point('before_update');
	  UPDATE t SET pad = 'y' WHERE id = 1000;});
archive_current_segment($primary);

# Damage the updated block in the backup, away from its header.
my $file = $primary->backup_dir . "/backup/$relpath";
open(my $fh, '+<', $file) or die "could not open $file: $!";
binmode $fh;
sysseek($fh, $blkno * 8192 + 2000, 0) or die "could not seek in $file: $!";
my $byte;
sysread($fh, $byte, 1) == 1 or die "could not read $file: $!";
sysseek($fh, $blkno * 8192 + 2000, 0) or die "could not seek in $file: $!";
syswrite($fh, chr(ord($byte) ^ 0xff)) == 1 or die "could not write $file: $!";
close($fh) or die "could not close $file: $!";

# Recover to the target with read mode and the given settings, and promote.
sub recover_to_target
{
	my ($name, $settings) = @_;
	my $node = read_mode_standby(
		$primary, $name,
		has_restoring => 1,
		extra_conf => "recovery_target_name = 'before_update'\n"
		  . "recovery_target_action = 'promote'\n"
		  # Each node must find the primary's timeline in the archive
		  . "archive_mode = off\n" . $settings);
	my $log_offset = -s $node->logfile;
	$node->start(fail_ok => 1);
	$node->wait_for_log(
		qr/database system is ready to accept connections|startup process \(PID \d+\)/,
		$log_offset);
	ok(!$node->log_contains(qr/startup process \(PID \d+\)/, $log_offset),
		"$name: the startup process did not fail");
	is($node->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
		'f', "$name: recovery ended and the server was promoted");
	ok( $node->log_contains(
			qr/recovery stopping at restore point "before_update"/,
			$log_offset),
		"$name: recovery stopped at the restore point");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM other'),
		'1', "$name: what came before the target was replayed");
	# The startup process exits normally at promotion, with the look-ahead
	# holding blocks past the target until then: a pin or I/O handle it did
	# not release would be reported as a leak.
	ok(!$node->log_contains($log_failures, $log_offset),
		"$name: no leak, crash or assertion failure at the end of recovery");
	return ($node, $log_offset);
}

# Whoever reads the block afterwards, without the settings that tolerate
# damage, must get the error.
sub check_block_reports_damage
{
	my ($node, $name) = @_;
	my ($rc, $stdout, $stderr) = $node->psql('postgres',
		"SET zero_damaged_pages = off; SET ignore_checksum_failure = off; "
		  . "SELECT pad FROM t WHERE ctid = '($blkno,1)'");
	isnt($rc, 0, "$name: reading the damaged block fails");
	like(
		$stderr,
		qr/invalid page in block $blkno/,
		"$name: reading the damaged block reports it");
}

my ($node, $log_offset) = recover_to_target('restored', '');
# Whoever completes a read logs a damaged page at once, to the server log
# only; that the look-ahead's read did so shows it read the block.
ok( $node->log_contains(qr/LOG:  invalid page in block $blkno/, $log_offset),
	'the look-ahead read the damaged block');
ok( !$node->log_contains(
		qr/(?:ERROR|FATAL):  invalid page in block $blkno/, $log_offset),
	'the damaged block raised no error during recovery');
check_block_reports_damage($node, 'restored');
$node->stop;

# A read applies zero_damaged_pages and ignore_checksum_failure as it
# completes, and leaves the page valid in shared buffers.  Set for the
# startup process (to get past a damaged page redo needs), they must not
# zero or accept the block that only WAL past the target references: read
# mode gives advice while either is on.  Enough shared buffers keep a page
# read ahead there until it is read again.
foreach my $setting ('zero_damaged_pages', 'ignore_checksum_failure')
{
	($node, $log_offset) = recover_to_target("with_$setting",
		"$setting = on\nshared_buffers = 16MB\n");
	ok( !$node->log_contains(
			qr/page verification failed|invalid page in block $blkno/,
			$log_offset),
		"with_$setting: recovery did not read the damaged block");
	check_block_reports_damage($node, "with_$setting");
	$node->stop;
}

# Turned on or off by a reload, either setting switches the mode at the next
# record.  A standby from an undamaged backup, streaming, with the defaults
# for recovery prefetch: a reload that sets those would reconfigure
# prefetching anyway.
$primary->backup('undamaged');
my $standby = PostgreSQL::Test::Cluster->new('streaming');
$standby->init_from_backup($primary, 'undamaged', has_streaming => 1);
$standby->start;
$primary->safe_psql('postgres', 'INSERT INTO other VALUES (2)');
$primary->wait_for_replay_catchup($standby);
is( $standby->safe_psql(
		'postgres', 'SELECT method FROM pg_stat_recovery_prefetch'),
	'read',
	'streaming: read mode by default');

foreach my $step (
	[ 'zero_damaged_pages', 'on', 'advice' ],
	[ 'zero_damaged_pages', 'off', 'read' ],
	[ 'ignore_checksum_failure', 'on', 'advice' ],
	[ 'ignore_checksum_failure', 'off', 'read' ])
{
	my ($setting, $value, $method) = @$step;
	$standby->append_conf('postgresql.conf', "$setting = $value\n");
	$standby->reload;

	# The startup process notices the reload in its own time; the record
	# after that switches the mode.
	my $switched = 'f';
	for (my $i = 0; $i < 50 && $switched ne 't'; $i++)
	{
		$primary->safe_psql('postgres', 'INSERT INTO other VALUES (2)');
		$primary->wait_for_replay_catchup($standby);
		$switched = $standby->safe_psql('postgres',
			"SELECT method = '$method' FROM pg_stat_recovery_prefetch");
	}
	is($switched, 't',
		"streaming: $setting = $value by a reload, method $method");
}
$standby->stop;

done_testing();
