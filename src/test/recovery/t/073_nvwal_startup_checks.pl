
# Copyright (c) 2026, PostgreSQL Global Development Group

# Start-up checks of the non-volatile WAL buffer (NVWAL).
#
# While a server that uses an NVWAL file has not shut down cleanly, that
# file may hold the only copy of committed WAL.  Start-up must then refuse,
# with a FATAL that says what to do, every configuration that would lose it:
# no nvwal_path, a missing file, another ring size, another file of the same
# cluster, a file of another cluster, a file that is no NVWAL file at all, a
# file another server is using, or a file holding another server's
# unsalvaged WAL, or WAL pg_resetwal discarded.  After each refusal, fixing the configuration must bring
# the server up with every committed transaction.  After a clean shutdown,
# the ring can be resized or turned off freely.  A cluster with 1GB WAL
# segments, for which no ring size works, is refused with a message that
# says so.
#
# Commits before each crash are made while the WAL writer is stopped, so
# that their WAL is durable only in the ring, and each crash loses what was
# not synced in pg_wal, so that the commits survive only if start-up writes
# the ring's tail to pg_wal.
use strict;
use warnings FATAL => 'all';
use Fcntl qw(:flock);
use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Spec;
use FindBin;
use lib $FindBin::RealBin;
use NVWAL::Utils;

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	plan skip_all => 'non-volatile WAL buffer not supported by this build';
}

# No persistent memory here: let libpmem treat the file as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

my $ring_bytes = 32 * 1024 * 1024;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', qq{
nvwal_path = 'nvwal'
nvwal_size = 32MB
autovacuum = off
checkpoint_timeout = 1h
});
my $datadir = $node->data_dir;
my $nvwal_file = "$datadir/nvwal";

# The tags of all rows committed so far, in order.
my @committed;

# "yes SIZE" or "no SIZE" from pg_controldata's NVWAL lines.
sub nvwal_control
{
	my ($n) = @_;
	my ($stdout, $stderr) = run_command([ 'pg_controldata', $n->data_dir ]);
	my ($in_use) = $stdout =~ /^Non-volatile WAL buffer in use:\s+(\S+)$/m;
	my ($size) = $stdout =~ /^Non-volatile WAL buffer size:\s+(\d+)$/m;
	return ($in_use // 'missing') . ' ' . ($size // 'missing');
}

sub system_identifier
{
	my ($n) = @_;
	my ($stdout, $stderr) = run_command([ 'pg_controldata', $n->data_dir ]);
	my ($sysid) = $stdout =~ /^Database system identifier:\s+(\d+)$/m;
	return $sysid;
}

sub commit_row
{
	my ($n, $tag) = @_;
	$n->safe_psql('postgres', "INSERT INTO t (tag) VALUES ('$tag')");
	push @committed, $tag;
	return;
}

# Every row committed so far must be there, and nothing else.
sub check_rows
{
	my ($n, $what) = @_;
	is( $n->safe_psql(
			'postgres', 'SELECT string_agg(tag, \',\' ORDER BY n) FROM t'),
		join(',', @committed),
		"$what: every committed row is present");
	return;
}

# Crash the server right after committing a row whose WAL is durable only in
# the ring: the WAL writer is stopped first, and killed with the server.
# Returns the flush LSN of that commit.
sub crash_after_ring_only_commit
{
	my ($n, $tag) = @_;
	my $walwriter = stop_walwriter($n);

	commit_row($n, $tag);
	my ($flush_lsn, $in_pg_wal) = split /\|/,
	  $n->safe_psql('postgres',
		'SELECT flush_lsn, synced_lsn >= flush_lsn FROM pg_stat_nvwal');
	is($in_pg_wal, 'f',
		"$tag: the commit is durable in the ring but not yet fsynced in pg_wal"
	);

	crash_with_walwriter_stopped($n, $walwriter);
	is( nvwal_control($n),
		"yes $ring_bytes",
		"$tag: pg_control names the NVWAL file after the crash");
	return $flush_lsn;
}

# The server must have written the ring's durable tail, including the commit
# at $flush_lsn, to pg_wal before redo.
sub check_salvage
{
	my ($n, $log_offset, $flush_lsn, $what) = @_;
	my $log = slurp_file($n->logfile, $log_offset);
	my ($from, $to) = $log =~
	  m{wrote WAL from ([0-9A-F]+/[0-9A-F]+) to ([0-9A-F]+/[0-9A-F]+) on timeline \d+ from non-volatile WAL buffer file "[^"]*" to pg_wal};
	ok(defined $to, "$what: start-up wrote the ring's tail to pg_wal");
	$from //= '0/0';
	$to   //= '0/0';
	is( $n->safe_psql(
			'postgres',
			"SELECT '$from'::pg_lsn < '$flush_lsn'::pg_lsn AND '$to'::pg_lsn >= '$flush_lsn'::pg_lsn"
		),
		't',
		"$what: the WAL written to pg_wal ($from to $to) covers the last commit ($flush_lsn)"
	);
	# Only the tail since the WAL writer's last write needs writing, not the
	# rest of the ring, whose pages are initialized ahead of use.
	cmp_ok(
		$n->safe_psql('postgres', "SELECT '$to'::pg_lsn - '$from'::pg_lsn"),
		'<',
		$ring_bytes / 4,
		"$what: start-up wrote only the tail of the ring to pg_wal");
	return;
}

# Start a server that must refuse to start, and check the FATAL it logs.
# If it starts nonetheless, it is stopped again so that the test goes on.
sub start_fails
{
	my ($n, $pattern, $what) = @_;
	my $offset = -s $n->logfile;
	my $started = $n->start(fail_ok => 1);
	ok(!$started, "$what: server refuses to start");
	$n->stop if $started;
	like(
		slurp_file($n->logfile, $offset),
		qr/FATAL:  $pattern/,
		"$what: the refusal says why");
	return $offset;
}

# With the server down, move the file at $substitute to nvwal_path in place
# of the file in use: start-up must refuse it with $pattern.  Then put the
# file in use back and start.  After a crash ($flush_lsn set), the start must
# salvage the WAL only the file in use held.
sub refuse_substitute_then_restore
{
	my ($substitute, $pattern, $flush_lsn, $what) = @_;
	rename($nvwal_file, "$datadir/nvwal.in-use") or die "rename: $!";
	rename($substitute, $nvwal_file) or die "rename: $!";
	start_fails($node, $pattern, $what);
	unlink($nvwal_file) or die "unlink: $!";
	rename("$datadir/nvwal.in-use", $nvwal_file) or die "rename: $!";
	start_and_check($node, $flush_lsn, "$what, file restored");
	return;
}

# Start a node that must come up, and check that every committed row is
# there.  After a crash ($flush_lsn set), the start must also have salvaged
# the WAL that only the file held.
sub start_and_check
{
	my ($n, $flush_lsn, $what) = @_;
	my $offset = -s $n->logfile;
	$n->start;
	check_salvage($n, $offset, $flush_lsn, $what) if defined $flush_lsn;
	check_rows($n, $what);
	return;
}

# First start creates the file.
$node->start;
ok(-f $nvwal_file, 'NVWAL file created in the data directory');
is( -s $nvwal_file,
	$ring_bytes + 8192,
	'NVWAL file holds a one-block header and a 32MB ring');
$node->safe_psql('postgres',
	'CREATE TABLE t (n serial PRIMARY KEY, tag text UNIQUE)');
commit_row($node, 'first');
is( $node->safe_psql(
		'postgres',
		'SELECT path, size, is_pmem, flushes > 0 FROM pg_stat_nvwal'),
	"nvwal|$ring_bytes|t|t",
	'pg_stat_nvwal shows the file, its ring size, and commit flushes');
is( nvwal_control($node),
	"yes $ring_bytes",
	'pg_control names the NVWAL file while the server runs');

$node->stop;
is(nvwal_control($node), 'no 0',
	'a clean shutdown clears the NVWAL file from pg_control');

# (a) nvwal_size must be a multiple of the segment size and two segments.
foreach my $bad ('24MB', '16MB')
{
	$node->adjust_conf('postgresql.conf', 'nvwal_size', $bad);
	start_fails(
		$node,
		qr/"nvwal_size" must be a multiple of the WAL segment size and at least two segments/,
		"nvwal_size = $bad");
}
$node->adjust_conf('postgresql.conf', 'nvwal_size', '32MB');
start_and_check($node, undef, 'valid nvwal_size again');

# (b) A crash, then nvwal_path unset.
my $flush_lsn = crash_after_ring_only_commit($node, 'crash-b');
$node->adjust_conf('postgresql.conf', 'nvwal_path', "''");
my $offset = start_fails(
	$node,
	qr/the server did not shut down cleanly while using a non-volatile WAL buffer, but "nvwal_path" is not set/,
	'crash, then no nvwal_path');
like(
	slurp_file($node->logfile, $offset),
	qr/HINT:  .*"nvwal_size" to 32MB/,
	'crash, then no nvwal_path: the hint names the size to set');
$node->adjust_conf('postgresql.conf', 'nvwal_path', "'nvwal'");
start_and_check($node, $flush_lsn, 'nvwal_path set again');
is( nvwal_control($node),
	"yes $ring_bytes",
	'pg_control names the file again once the server writes to it');

# (c) A crash, then the file is gone.  The server must not create a new one,
# and pointing nvwal_path to where the file went must work, as the hint says.
$flush_lsn = crash_after_ring_only_commit($node, 'crash-c');
rename($nvwal_file, "$datadir/nvwal.moved") or die "rename: $!";
$offset = start_fails(
	$node,
	qr/non-volatile WAL buffer file "nvwal" does not exist/,
	'crash, then file missing');
ok(!-e $nvwal_file, 'crash, then file missing: no new file created');
$node->adjust_conf('postgresql.conf', 'nvwal_path', "'$datadir/nvwal.moved'");
start_and_check($node, $flush_lsn, 'nvwal_path pointed to the moved file');
is($node->safe_psql('postgres', 'SELECT path FROM pg_stat_nvwal'),
	"$datadir/nvwal.moved", 'pg_stat_nvwal shows the moved file');
$node->stop;
rename("$datadir/nvwal.moved", $nvwal_file) or die "rename: $!";
$node->adjust_conf('postgresql.conf', 'nvwal_path', "'nvwal'");
$node->start;

# (d) A crash, then another ring size.  The file must be left as it is.
$flush_lsn = crash_after_ring_only_commit($node, 'crash-d');
$node->adjust_conf('postgresql.conf', 'nvwal_size', '64MB');
$offset = start_fails(
	$node,
	qr/"nvwal_size" does not match the ring size of non-volatile WAL buffer file "nvwal"/,
	'crash, then nvwal_size changed');
like(
	slurp_file($node->logfile, $offset),
	qr/DETAIL:  The file has a ring of $ring_bytes bytes and a size of @{[$ring_bytes + 8192]} bytes, but "nvwal_size" asks for @{[2 * $ring_bytes]} bytes\./,
	'crash, then nvwal_size changed: the detail gives the sizes');
like(
	slurp_file($node->logfile, $offset),
	qr/HINT:  Set "nvwal_size" to 32MB/,
	'crash, then nvwal_size changed: the hint names the size to set');
is( -s $nvwal_file,
	$ring_bytes + 8192,
	'crash, then nvwal_size changed: file left untouched');
$node->adjust_conf('postgresql.conf', 'nvwal_size', '32MB');

# The same crash, and the file was then truncated: its header no longer
# describes it, and no setting can help, only the file itself.
copy($nvwal_file, "$datadir/nvwal.whole") or die "copy: $!";
truncate($nvwal_file, $ring_bytes) or die "truncate: $!";
$offset = start_fails(
	$node,
	qr/non-volatile WAL buffer file "nvwal" does not match its header/,
	'crash, then the file truncated');
like(
	slurp_file($node->logfile, $offset),
	qr/HINT:  .*restore that file unchanged/,
	'crash, then the file truncated: the hint says to restore it');
rename("$datadir/nvwal.whole", $nvwal_file) or die "rename: $!";

start_and_check($node, $flush_lsn, 'nvwal_size restored');

# After a clean shutdown, the ring can be resized.  Keep a copy of the old
# file for (e).
$node->stop;
copy($nvwal_file, "$datadir/nvwal.old") or die "copy: $!";
$node->adjust_conf('postgresql.conf', 'nvwal_size', '48MB');

# While the replacement cannot be built (here: another server holds its
# temporary file), the old file stays where it is.
open(my $tmp_fh, '>', "$datadir/nvwal.tmp") or die "open: $!";
flock($tmp_fh, LOCK_EX) or die "flock: $!";
start_fails(
	$node,
	qr/non-volatile WAL buffer file "\Q$datadir\E\/nvwal.tmp" is in use by another server/,
	'resize while the temporary file is locked');
is( -s $nvwal_file,
	$ring_bytes + 8192,
	'resize while the temporary file is locked: the old file is still there');
close($tmp_fh);
unlink("$datadir/nvwal.tmp") or die "unlink: $!";

# A crash between installing a new file and removing its temporary name
# leaves a second name for the file in use, which must not be rebuilt.
link($nvwal_file, "$datadir/nvwal.tmp") or die "link: $!";
$offset = -s $node->logfile;
$node->start;
ok(!-e "$datadir/nvwal.tmp", 'resize: no temporary file remains');
ok( $node->log_contains(
		qr/replacing non-volatile WAL buffer file "nvwal", which does not match the current settings\n.*DETAIL:  The new file has a ring of 48MB\./,
		$offset),
	'clean shutdown, then nvwal_size changed: file replaced');
$ring_bytes = 48 * 1024 * 1024;
is(-s $nvwal_file, $ring_bytes + 8192, 'replaced file has the new size');
is($node->safe_psql('postgres', 'SELECT size FROM pg_stat_nvwal'),
	$ring_bytes, 'pg_stat_nvwal shows the new ring size');
check_rows($node, 'clean shutdown, then nvwal_size changed');

# (e) A crash, then another file of the same cluster (the copy from before
# the resize) at the path.
# Keep a copy of the crashed file for the second case of (i) below.
$flush_lsn = crash_after_ring_only_commit($node, 'crash-e');
copy($nvwal_file, "$datadir/nvwal.crashed") or die "copy: $!";
refuse_substitute_then_restore(
	"$datadir/nvwal.old",
	qr/non-volatile WAL buffer file "nvwal" is not the file this server used before it stopped/,
	$flush_lsn,
	'crash, then an older file of this cluster in place');

# (i) A copy of this cluster started with the NVWAL file of a server that
# crashed: a base backup, configured with the absolute path of the
# primary's file.  The file's WAL belongs to the primary, which must still
# be able to salvage it.
$node->backup('bk');
ok(!-e $node->backup_dir . '/bk/nvwal',
	'base backup leaves out the NVWAL file in the data directory');
$flush_lsn = crash_after_ring_only_commit($node, 'crash-i');
my $copy = PostgreSQL::Test::Cluster->new('copy');
$copy->init_from_backup($node, 'bk', standby => 0);

# A file reached by a relative path or through a symbolic link is inside the
# copy's data directory only in name: it must not be taken for a file that
# came with the backup, and discarded.
my $relative = File::Spec->abs2rel($nvwal_file, $copy->data_dir);
symlink($datadir, $copy->data_dir . '/primary')
  or die "could not create symbolic link: $!";
foreach my $path ($relative, 'primary/nvwal')
{
	$copy->adjust_conf('postgresql.conf', 'nvwal_path', "'$path'");
	start_fails(
		$copy,
		qr/non-volatile WAL buffer file "\Q$path\E" holds WAL of a server that did not shut down cleanly/,
		"backup copy pointed to the crashed primary's file as $path");
	ok(-f $nvwal_file, "$path: the primary's file is still there");
}
unlink($copy->data_dir . '/primary') or die "unlink: $!";

$copy->adjust_conf('postgresql.conf', 'nvwal_path', "'$nvwal_file'");
start_fails(
	$copy,
	qr/non-volatile WAL buffer file "\Q$nvwal_file\E" holds WAL of a server that did not shut down cleanly/,
	'backup copy pointed to the crashed primary\'s file');
$copy->adjust_conf('postgresql.conf', 'nvwal_path', "'nvwal'");
$copy->start;
is( $copy->safe_psql(
		'postgres', 'SELECT count(*) FROM t WHERE tag = \'crash-e\''),
	'1',
	'backup copy with its own NVWAL file starts with the backed-up data');
is($copy->safe_psql('postgres', 'SELECT path FROM pg_stat_nvwal'),
	'nvwal', 'backup copy uses its own relative NVWAL file');
$copy->stop;
start_and_check($node, $flush_lsn, 'primary after the copy was refused');

# The same with an old copy of this server's own file that is unclean: the
# server shut down cleanly since, so the file is not the one it needs.
$node->stop;
refuse_substitute_then_restore(
	"$datadir/nvwal.crashed",
	qr/non-volatile WAL buffer file "nvwal" holds WAL of a server that did not shut down cleanly/,
	undef,
	'clean shutdown, then an old unclean copy of the file in place');

# Another cluster, with its own NVWAL file.  Run initdb: copies of the
# template share the system identifier.
my $other = PostgreSQL::Test::Cluster->new('other');
$other->init(force_initdb => 1);
isnt(
	system_identifier($other),
	system_identifier($node),
	'the other cluster has a system identifier of its own');
$other->append_conf('postgresql.conf',
	"nvwal_path = 'nvwal'\nnvwal_size = 32MB\n");
$other->start;
$other->safe_psql('postgres', 'CREATE TABLE o AS SELECT 42 AS v');

# (h) Two running servers with the same file.
$other->stop;
$other->adjust_conf('postgresql.conf', 'nvwal_path', "'$nvwal_file'");
start_fails(
	$other,
	qr/non-volatile WAL buffer file "\Q$nvwal_file\E" is in use by another server/,
	'second server on a file in use');
commit_row($node, 'while-other-refused');
check_rows($node, 'first server after the second was refused');

# (f) The same file while its server is stopped (cleanly): it belongs to
# another database system.
$node->stop;
start_fails(
	$other,
	qr/non-volatile WAL buffer file "\Q$nvwal_file\E" belongs to another database system\n[^\n]*DETAIL:  [^\n]*The other system shut down cleanly, and the file holds no WAL it needs\.\n[^\n]*HINT:  [^\n]*or remove the file if no other server is set up to use it\./,
	'file of another cluster, other server stopped');
$other->adjust_conf('postgresql.conf', 'nvwal_path', "'nvwal'");
$other->start;
is($other->safe_psql('postgres', 'SELECT v FROM o'),
	'42', 'other cluster starts with its own file again');
$other->stop;

# (n) A clean file in the data directory whose system identifier is not the
# cluster's: pg_createsubscriber gives the standby it converts a new one
# after shutting it down cleanly.  The file holds nothing, and is replaced.
# (Its header's system identifier is changed here instead.)
my $other_file = $other->data_dir . '/nvwal';
my $other_sysid = system_identifier($other);
open(my $hfh, '+<', $other_file) or die "could not open $other_file: $!";
binmode $hfh;
sysseek($hfh, 8, 0) or die "could not seek in $other_file: $!";
syswrite($hfh, pack('Q<', $other_sysid + 1)) == 8
  or die "could not write $other_file: $!";
close($hfh) or die "could not close $other_file: $!";
my $other_offset = -s $other->logfile;
$other->start;
ok( $other->log_contains(
		qr/replacing non-volatile WAL buffer file "nvwal" of database system \Q@{[$other_sysid + 1]}\E, which holds no WAL/,
		$other_offset),
	'clean file of another system identifier in the data directory: replaced'
);
is($other->safe_psql('postgres', 'SELECT v FROM o'),
	'42', 'clean file of another system identifier: the cluster starts');
$other->stop;

# (f) After a crash, the other cluster's file copied in place of ours.
$node->start;
$flush_lsn = crash_after_ring_only_commit($node, 'crash-f');
copy($other->data_dir . '/nvwal', "$datadir/nvwal.other") or die "copy: $!";
refuse_substitute_then_restore(
	"$datadir/nvwal.other",
	qr/non-volatile WAL buffer file "nvwal" belongs to another database system\n[^\n]*DETAIL:  [^\n]*This server did not shut down cleanly[^\n]*\n[^\n]*HINT:  Restore the file this server used/,
	$flush_lsn,
	'crash, then the file of another cluster in place');

# (g) Files that are not NVWAL files, after a clean shutdown.  The server
# must not overwrite them.
$node->stop;
rename($nvwal_file, "$datadir/nvwal.mine") or die "rename: $!";
foreach my $case (
	[ 'zeros', "\0" x (1024 * 1024) ],
	[ 'text', "this is not a WAL buffer\n" ])
{
	my ($name, $content) = @$case;
	append_to_file($nvwal_file, $content);
	start_fails(
		$node,
		qr/file "nvwal" is not a non-volatile WAL buffer file/,
		"a file of $name at nvwal_path");
	ok(slurp_file($nvwal_file) eq $content,
		"a file of $name at nvwal_path: left untouched");
	unlink($nvwal_file) or die "unlink: $!";
}

# (j) Creating the file.  Servers build it under a temporary name, locked,
# and install it only where no file is.  A temporary file that another
# server holds locked means that it is creating the file right now.
append_to_file("$datadir/nvwal.tmp", "left by an interrupted creation\n");
open($tmp_fh, '<', "$datadir/nvwal.tmp") or die "open: $!";
flock($tmp_fh, LOCK_EX) or die "flock: $!";
start_fails(
	$node,
	qr/non-volatile WAL buffer file "nvwal.tmp" is in use by another server/,
	'another server creating the file');
ok(!-e $nvwal_file, 'another server creating the file: nothing installed');
close($tmp_fh);

# Once nobody holds it, the temporary file is rebuilt from nothing.
$node->start;
is( -s $nvwal_file,
	$ring_bytes + 8192,
	'a temporary file left behind is rebuilt into a complete file');
ok(!-e "$datadir/nvwal.tmp", 'no temporary file remains');
check_rows($node, 'file created over a leftover temporary file');

# A symbolic link at the temporary name is removed, and its target left
# alone.
$node->stop;
unlink($nvwal_file) or die "unlink: $!";
append_to_file("$datadir/victim", "not to be truncated\n");
symlink("$datadir/victim", "$datadir/nvwal.tmp") or die "symlink: $!";
$node->start;
is( slurp_file("$datadir/victim"),
	"not to be truncated\n",
	'a symbolic link at the temporary name: its target is left alone');
ok( !-e "$datadir/nvwal.tmp" && -s $nvwal_file == $ring_bytes + 8192,
	'a symbolic link at the temporary name: the file is created');

# A symbolic link to nothing is not replaced by a file of its own.
$node->stop;
unlink($nvwal_file) or die "unlink: $!";
symlink("$datadir/nowhere/nvwal", $nvwal_file) or die "symlink: $!";
start_fails(
	$node,
	qr/non-volatile WAL buffer file "nvwal" is a symbolic link to a file that does not exist/,
	'nvwal_path is a dangling symbolic link');
ok(-l $nvwal_file && !-e "$datadir/nvwal.tmp",
	'dangling symbolic link: left as it was, no temporary file remains');
unlink($nvwal_file) or die "unlink: $!";

rename("$datadir/nvwal.mine", $nvwal_file) or die "rename: $!";
start_and_check($node, undef, 'own file restored after foreign files');

# After a clean shutdown, NVWAL can be turned off.
$node->stop;
$node->adjust_conf('postgresql.conf', 'nvwal_path', "''");
$node->start;
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_nvwal'),
	'0', 'pg_stat_nvwal has no row with NVWAL off');
check_rows($node, 'clean shutdown, then NVWAL off');
is(nvwal_control($node), 'no 0',
	'pg_control names no NVWAL file with NVWAL off');

# Without NVWAL, a crash is an ordinary crash.
commit_row($node, 'off-crash');
$node->stop('immediate');
start_and_check($node, undef, 'crash with NVWAL off');

# And it can be turned on again, reusing the clean file.
$node->stop;
$node->adjust_conf('postgresql.conf', 'nvwal_path', "'nvwal'");
$offset = -s $node->logfile;
$node->start;
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_nvwal'),
	'1', 'pg_stat_nvwal has one row with NVWAL on again');
ok( !$node->log_contains(qr/replacing non-volatile WAL buffer file/, $offset),
	'NVWAL on again: the clean file of the right size is reused');
$flush_lsn = crash_after_ring_only_commit($node, 'crash-on-again');
start_and_check($node, $flush_lsn, 'NVWAL on again');
$node->stop;

# A copy of the file made after a clean shutdown, before the server last
# started: it is clean and of the right size, but the WAL committed since is
# only in the file the server used, so after a crash it must be refused.
copy($nvwal_file, "$datadir/nvwal.before") or die "copy: $!";
$node->start;
$flush_lsn = crash_after_ring_only_commit($node, 'crash-copy');
refuse_substitute_then_restore(
	"$datadir/nvwal.before",
	qr/non-volatile WAL buffer file "nvwal" is not the file this server used before it stopped/,
	$flush_lsn,
	'crash, then a copy of the file from before the last start');
$node->stop;

# (k) A crash, then a copy of the data directory, made before restarting the
# server as one is advised to do, and sharing its file through an absolute
# nvwal_path.  Whichever of the two starts first takes the file's WAL into
# its pg_wal; the other must then be refused instead of finding the file
# clean and recovering without that WAL.
$node->start;
$flush_lsn = crash_after_ring_only_commit($node, 'crash-k');
PostgreSQL::Test::RecursiveCopy::copypath(
	$datadir,
	$node->backup_dir . '/crashed',
	filterfn => sub { return $_[0] !~ /^nvwal/; });
my $dircopy = PostgreSQL::Test::Cluster->new('dircopy');
$dircopy->init_from_backup($node, 'crashed', standby => 0);
$dircopy->adjust_conf('postgresql.conf', 'nvwal_path', "'$nvwal_file'");
start_and_check($dircopy, $flush_lsn, 'copy of the crashed data directory');
$dircopy->stop;
start_fails(
	$node,
	qr/non-volatile WAL buffer file "nvwal" is not the file this server used before it stopped/,
	'crashed server after a copy of its data directory took the WAL');
ok(-f $nvwal_file, 'the refused server left the file in place');

# (l) A crash, then pg_resetwal, which discards the WAL in the ring with the
# rest.  It must say so, and the server must then refuse the file, which
# still holds WAL, until it is removed.  Data pages may have been written
# once their WAL was durable in the ring, past the segment files in pg_wal:
# the WAL after the reset must begin past the ring's WAL, or such a page's
# LSN would lie in its future (a later change to it would get no full-page
# image, and redo after a crash would take it as already applied).  Here
# the ring holds more than a segment of WAL, the last commit's page is
# evicted from shared buffers, which writes it, and the segment files past
# the one pg_wal is synced into are gone after the crash, as where none
# were preallocated or recycled.
$dircopy->start;
$dircopy->safe_psql('postgres', 'CREATE EXTENSION pg_buffercache');
my $walwriter = stop_walwriter($dircopy);
$dircopy->safe_psql(
	'postgres',
	q{CREATE TABLE filler AS
	  SELECT g, repeat('f', 500) AS pad FROM generate_series(1, 40000) g});
commit_row($dircopy, 'crash-l');
pop @committed;
$dircopy->safe_psql('postgres',
	q{SELECT buffers_flushed FROM pg_buffercache_evict_relation('t')});
my ($flush_lsn_l, $synced_lsn_l) = split /\|/,
  $dircopy->safe_psql('postgres',
	'SELECT flush_lsn, synced_lsn FROM pg_stat_nvwal');
crash_with_walwriter_stopped($dircopy, $walwriter);

sub lsn_value
{
	my ($hi, $lo) = split m{/}, $_[0];
	return hex($hi) * 2**32 + hex($lo);
}
my ($controldata) = run_command([ 'pg_controldata', $dircopy->data_dir ]);
my ($seg_bytes) = $controldata =~ /^Bytes per WAL segment:\s+(\d+)$/m;
my $segs_per_id = 2**32 / $seg_bytes;
my $wal_end = 0;
my $pg_wal = $dircopy->data_dir . '/pg_wal';
opendir(my $wal_dir, $pg_wal) or die "opendir $pg_wal: $!";
for my $name (readdir $wal_dir)
{
	next unless $name =~ /^[0-9A-F]{8}([0-9A-F]{8})([0-9A-F]{8})$/;
	my $start = (hex($1) * $segs_per_id + hex($2)) * $seg_bytes;
	if ($start > lsn_value($synced_lsn_l))
	{
		unlink("$pg_wal/$name") or die "unlink $pg_wal/$name: $!";
		next;
	}
	$wal_end = $start + $seg_bytes if $start + $seg_bytes > $wal_end;
}
closedir($wal_dir);
cmp_ok(lsn_value($flush_lsn_l), '>', $wal_end,
	'crash-l: the ring held WAL past the last segment file in pg_wal');

my ($stdout, $stderr) =
  run_command([ 'pg_resetwal', '-n', $dircopy->data_dir ]);
like(
	$stdout,
	qr/Values to be changed:.*\nNon-volatile WAL buffer in use:\s+no$/ms,
	'pg_resetwal --dry-run says that the NVWAL file will not be in use');
($stdout, $stderr) =
  run_command([ 'pg_resetwal', '-f', $dircopy->data_dir ]);
like(
	$stderr,
	qr/warning: WAL in the server's non-volatile WAL buffer file, if any, was discarded too\n.*hint: If the server then refuses to start because its non-volatile WAL buffer file holds WAL, remove the file that "nvwal_path" points to\./s,
	'pg_resetwal after a crash warns that the ring\'s WAL is discarded');
($controldata) = run_command([ 'pg_controldata', $dircopy->data_dir ]);
my ($reset_lsn) =
  $controldata =~ /^Latest checkpoint location:\s+([0-9A-F]+\/[0-9A-F]+)$/m;
cmp_ok(lsn_value($reset_lsn), '>', lsn_value($flush_lsn_l),
	'pg_resetwal began the new WAL past the WAL the ring held');
is(nvwal_control($dircopy), 'no 0',
	'pg_resetwal cleared the record of the NVWAL file');
start_fails(
	$dircopy,
	qr/non-volatile WAL buffer file "\Q$nvwal_file\E" holds WAL of a server that did not shut down cleanly\n[^\n]*DETAIL:  [^\n]*or pg_resetwal discarded its WAL\./,
	'pg_resetwal, then the unclean file');
unlink($nvwal_file) or die "unlink: $!";
$dircopy->start;
is( $dircopy->safe_psql(
		'postgres', 'SELECT count(*) FROM t WHERE tag = \'crash-k\''),
	'1',
	'pg_resetwal, then the file removed: the server starts with the data of before'
);
$dircopy->stop;
($stdout, $stderr) = run_command([ 'pg_resetwal', $dircopy->data_dir ]);
unlike($stderr, qr/non-volatile/,
	'pg_resetwal after a clean shutdown does not warn about the file');

# (m) WAL segments of 1GB.  No ring of two segments fits under the maximum
# nvwal_size, and the refusal must say so, rather than ask for a size that
# cannot be set.
my $bigseg = PostgreSQL::Test::Cluster->new('bigseg');

# Segments are left sparse, not written full of zeros.
$bigseg->init(
	extra => [ '--wal-segsize' => 1024, '--set' => 'wal_init_zero=off' ]);
$bigseg->append_conf(
	'postgresql.conf', q{
nvwal_path = 'nvwal'
nvwal_size = 2047MB
});
start_fails(
	$bigseg,
	'a non-volatile WAL buffer cannot be used with a WAL segment size of 1024MB',
	'1GB WAL segments');
like(
	slurp_file($bigseg->logfile),
	qr/HINT:  Set "nvwal_path" to an empty string, or use a cluster initialized with a smaller WAL segment size/,
	'1GB WAL segments: the hint says what can be done');
ok(!-e $bigseg->data_dir . '/nvwal', '1GB WAL segments: no file is created');
$bigseg->append_conf('postgresql.conf', "nvwal_path = ''");
$bigseg->start;
$bigseg->stop;

# No server hit an assertion failure or a PANIC along the way.
foreach my $n ($node, $copy, $other, $dircopy, $bigseg)
{
	unlike(slurp_file($n->logfile),
		qr/TRAP:|PANIC:/,
		$n->name . ': no assertion failure or PANIC in the server log');
}

done_testing();
