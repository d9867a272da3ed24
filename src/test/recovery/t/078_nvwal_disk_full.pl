
# Copyright (c) 2026, PostgreSQL Global Development Group

# Non-volatile WAL buffer: a full file system loses no committed WAL.
#
# With NVWAL a commit is acknowledged once its WAL is in the ring, before it
# is in pg_wal.  When pg_wal then runs out of space, writing the ring back
# fails, and the server goes down with a PANIC as it would without NVWAL.
# The commits acknowledged from the ring alone must survive: start-up must
# refuse to go on while it cannot write them to pg_wal, saying why, and
# write them once there is room.  Also, an NVWAL file that does not fit on
# its file system must be refused with a message that says so, leave
# nothing behind, and, when a resize does not fit, keep the file in use; a
# file with holes must be refused if they cannot be filled, and a SIGBUS on
# the mapping of a truncated file must say what happened.
#
# The file system is a small tmpfs the test harness mounts as root
# (PG_TEST_SMALL_FS); without it, the test skips.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Fcntl qw(SEEK_END);
use File::Path;
use File::Temp;
use FindBin;
use lib $FindBin::RealBin;
use NVWAL::Utils;

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	plan skip_all => 'non-volatile WAL buffer not supported by this build';
}
if (   !defined $ENV{PG_TEST_SMALL_FS}
	|| !-d $ENV{PG_TEST_SMALL_FS}
	|| !-w $ENV{PG_TEST_SMALL_FS})
{
	plan skip_all =>
	  'PG_TEST_SMALL_FS does not name a small file system to fill (tools/test mounts one as root)';
}
# This test is the only user of that file system.  A run killed by a timeout
# may have left its directory behind, and the test needs most of the space.
foreach my $stale (glob("$ENV{PG_TEST_SMALL_FS}/nvwal_full_*"))
{
	File::Path::rmtree($stale);
}
my ($avail_kb) =
  (`df -k --output=avail '$ENV{PG_TEST_SMALL_FS}'` =~ /(\d+)\s*$/);
$avail_kb //= 0;
plan skip_all =>
  "the small file system has only ${avail_kb}kB free; a server of an earlier run may still be using it"
  if $avail_kb < 28 * 1024;

# A directory of our own there, removed at the end even if the test fails.
my $fs = File::Temp::tempdir(
	'nvwal_full_XXXX',
	DIR => $ENV{PG_TEST_SMALL_FS},
	CLEANUP => 1);

# No persistent memory here: let libpmem treat the file as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

# Fill the file system with one file until it is full, then give back
# $leave bytes.  Returns the file's name.
sub fill_file_system
{
	my ($leave) = @_;
	my $filler = "$fs/filler";
	open(my $fh, '>', $filler) or die "could not create $filler: $!";
	binmode $fh;
	my $chunk = "\0" x (1024 * 1024);
	while (1)
	{
		last if !defined syswrite($fh, $chunk);
	}
	die "filling $fs did not end with ENOSPC: $!" unless $!{ENOSPC};
	my $size = sysseek($fh, 0, SEEK_END);
	truncate($fh, $size - $leave) or die "could not truncate $filler: $!";
	close($fh) or die "could not close $filler: $!";
	return $filler;
}

# Files left in the small file system's top directory.
sub files_in_fs
{
	opendir(my $dh, $fs) or die "could not open $fs: $!";
	my @files = sort grep { !/^\.\.?$/ } readdir($dh);
	closedir($dh);
	return join(' ', @files);
}

#
# 1. pg_wal on the small file system fills up while commits are acknowledged
# from the ring.
#
# 1MB segments and a 4MB ring keep the sizes small.  The WAL writer is held,
# so that WAL leaves the ring only when an inserter finds it full and writes
# back the oldest segment itself: by the time that write fails, the ring is
# full of WAL acknowledged to clients and not in pg_wal.
my $node = PostgreSQL::Test::Cluster->new('full');
$node->init(extra => [ '--waldir' => "$fs/full_wal", '--wal-segsize' => 1 ]);
$node->append_conf(
	'postgresql.conf', q{
nvwal_path = 'nvwal'
nvwal_size = 4MB
min_wal_size = 2MB
max_wal_size = 1GB
checkpoint_timeout = 1h
autovacuum = off
restart_after_crash = on
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE TABLE ledger (id int PRIMARY KEY, payload text);
ALTER TABLE ledger ALTER COLUMN payload SET STORAGE EXTERNAL;
CHECKPOINT;
});

my $filler = fill_file_system(3 * 1024 * 1024);
my $walwriter = stop_walwriter($node);

# Rows of 100kB, stored out of line and uncompressed, one per transaction.  A row is acknowledged when psql gets the answer to the
# statement after its INSERT; that statement reports the insert position,
# which is past the row's commit record.
my $offset = -s $node->logfile;
my @acked;
my $last_acked_lsn;
my $error = '';
foreach my $id (1 .. 500)
{
	my ($ret, $stdout, $stderr) = $node->psql(
		'postgres',
		"INSERT INTO ledger VALUES ($id, repeat(md5('$id'), 3200));
		 SELECT pg_current_wal_insert_lsn();",
		on_error_stop => 1,
		timeout => $PostgreSQL::Test::Utils::timeout_default);
	if ($ret != 0)
	{
		$error = $stderr;
		last;
	}
	push @acked, $id;
	$last_acked_lsn = $stdout;
}
$last_acked_lsn //= '0/0';
note "acknowledged " . scalar(@acked) . " rows, up to $last_acked_lsn";
isnt($error, '', 'commits stop once pg_wal is full');

# The postmaster's SIGQUIT reaches the held WAL writer only when it runs.
kill('KILL', $walwriter);

# After the PANIC, the postmaster restarts; start-up must write the ring's
# tail to pg_wal, cannot, and ends the server.
$node->wait_for_log(qr/shutting down due to startup process failure/,
	$offset);
my $log = slurp_file($node->logfile, $offset);
like(
	$log,
	qr/PANIC:  could not write to file "pg_wal\/xlogtemp\.\d+": No space left on device/,
	'the write-back that found pg_wal full ended the server with a PANIC');
like(
	$log,
	qr/FATAL:  could not write to file "pg_wal\/xlogtemp\.\d+": No space left on device\n.*CONTEXT:  writing WAL from \S+ to \S+, still kept in non-volatile WAL buffer file "nvwal", to pg_wal/,
	'start-up says it could not write the ring to pg_wal, and that the WAL is still in the file'
);
unlike($log, qr/redo starts at/, 'recovery did not start without that WAL');
$node->stop('immediate', fail_ok => 1);

# A second try without room must fail the same way, and not give up on the
# file: it is still the only copy of that WAL.
$offset = -s $node->logfile;
ok(!$node->start(fail_ok => 1),
	'without room in pg_wal, start-up fails again');
like(
	slurp_file($node->logfile, $offset),
	qr/CONTEXT:  writing WAL from \S+ to \S+, still kept in non-volatile WAL buffer file "nvwal", to pg_wal/,
	'the second failure says the same');

# With room, start-up writes the tail to pg_wal, and every acknowledged
# commit is there.
unlink($filler) or die "could not remove $filler: $!";
$offset = -s $node->logfile;
$node->start;
my ($from, $to) = slurp_file($node->logfile, $offset) =~
  qr/wrote WAL from (\S+) to (\S+) on timeline \d+ from non-volatile WAL buffer file "nvwal" to pg_wal/;
ok(defined $to, 'once pg_wal has room, start-up writes the ring to it');
$from //= '0/0';
$to   //= '0/0';
is( $node->safe_psql(
		'postgres',
		"SELECT '$last_acked_lsn'::pg_lsn > '$from'::pg_lsn AND '$last_acked_lsn'::pg_lsn <= '$to'::pg_lsn"
	),
	't',
	'the last acknowledged commit was in the ring only, in the range written'
);
my $expected = join(',', @acked);
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(id::text, ',' ORDER BY id) FROM ledger
		 WHERE id <= $acked[-1] AND payload = repeat(md5(id::text), 3200)"),
	$expected,
	'every acknowledged row is there, intact');
$node->safe_psql('postgres', 'CHECKPOINT');
$node->stop;

#
# 2. An NVWAL file that does not fit on its file system.
#
my $node2 = PostgreSQL::Test::Cluster->new('nofit');
$node2->init(extra => [ '--wal-segsize' => 1 ]);
$node2->append_conf(
	'postgresql.conf', qq{
nvwal_path = '$fs/nvwal'
nvwal_size = 64MB
});
$offset = -s $node2->logfile;
ok(!$node2->start(fail_ok => 1),
	'a file larger than its file system is refused');
like(
	slurp_file($node2->logfile, $offset),
	qr/FATAL:  could not create non-volatile WAL buffer file "\Q$fs\E\/nvwal\.tmp": .*\n.*HINT:  Check that the file system has room for \d+ bytes/,
	'the refusal says the file did not fit');
is(files_in_fs(), 'full_wal', 'the failed creation left no file behind');

# A file that fits, then a resize after a clean shutdown that does not: the
# file in use stays as it was, and the server starts again with it.
$node2->append_conf('postgresql.conf', 'nvwal_size = 8MB');
$node2->start;
$node2->safe_psql('postgres', 'CREATE TABLE t AS SELECT 1 AS a');
$node2->stop;
my $size_before = -s "$fs/nvwal";
$node2->append_conf('postgresql.conf', 'nvwal_size = 64MB');
$offset = -s $node2->logfile;
ok(!$node2->start(fail_ok => 1), 'a resize that does not fit is refused');
like(
	slurp_file($node2->logfile, $offset),
	qr/FATAL:  could not create non-volatile WAL buffer file "\Q$fs\E\/nvwal\.tmp": .*\n.*HINT:  Check that the file system has room for \d+ bytes/,
	'the refusal of the resize says the new file did not fit');
is(-s "$fs/nvwal", $size_before, 'the file in use is left as it was');
is(files_in_fs(), 'full_wal nvwal', 'the failed resize left no file behind');
$node2->append_conf('postgresql.conf', 'nvwal_size = 8MB');
$node2->start;
is($node2->safe_psql('postgres', 'SELECT a FROM t'),
	'1', 'the server starts again with the file in use');
$node2->stop;

# The file, clean, copied back by a tool that leaves holes for its zeros,
# onto a file system without room for them: start-up must refuse it, rather
# than let the first write to a hole end in a SIGBUS.
system_or_bail('cp', '--sparse=always', "$fs/nvwal", "$fs/nvwal.copy");
my @st = stat("$fs/nvwal.copy");
note "the copy has $st[7] bytes, " . ($st[12] * 512) . " of them allocated";
cmp_ok(
	$st[12] * 512,
	'<',
	$st[7] - 1024 * 1024,
	'the copy has holes of more than the room left below');
rename("$fs/nvwal.copy", "$fs/nvwal") or die "could not rename: $!";
$filler = fill_file_system(512 * 1024);
$offset = -s $node2->logfile;
ok(!$node2->start(fail_ok => 1),
	'a file with holes the file system has no room for is refused');
like(
	slurp_file($node2->logfile, $offset),
	qr/FATAL:  could not allocate space for non-volatile WAL buffer file "\Q$fs\E\/nvwal": No space left on device/,
	'the refusal says why');
unlink($filler) or die "could not remove $filler: $!";
$node2->start;
$node2->safe_psql('postgres',
	'INSERT INTO t SELECT g FROM generate_series(2, 20000) g');
is($node2->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'20000', 'with room, the server starts and writes to the file');
@st = stat("$fs/nvwal");
cmp_ok($st[12] * 512, '>=', $st[7], 'the file has no holes left');

#
# 3. The file truncated under the running server: the next write to the
# mapping raises SIGBUS, which must be reported as what it is, naming the
# file, and not as a media error.
#
$offset = -s $node2->logfile;
truncate("$fs/nvwal", 0) or die "could not truncate $fs/nvwal: $!";
$node2->psql('postgres',
	'INSERT INTO t SELECT g FROM generate_series(1, 20000) g');
$node2->wait_for_log(qr/database system is shut down/, $offset);
like(
	slurp_file($node2->logfile, $offset),
	qr/PANIC:  SIGBUS accessing non-volatile WAL buffer file "\Q$fs\E\/nvwal": no storage backs the page \(the file was truncated, its file system has no space for it, or a bad block\)\nHINT:  Check that the file has its full size/,
	'a SIGBUS on a truncated file says so');
$node2->stop('immediate', fail_ok => 1);

done_testing();
