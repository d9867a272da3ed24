
# Copyright (c) 2026, PostgreSQL Global Development Group

# pg_basebackup --format=nvwal: a plain backup plus a prepared non-volatile
# WAL buffer file, and settings that make the new cluster use it.
#
# The file must carry the source's system identifier, the size asked for
# (or the source's nvwal_size, whether or not the source has a file in use),
# a fresh file id and a clean mark, and take all its space; the new
# cluster must start on it, as a standby (-R) or not, without creating or
# replacing a file.  Every refusal must come before anything is left behind
# and must never touch an existing file.  A backup that fails after the
# file was made removes it, unless --no-clean.  A path inside the target
# data directory gets settings only, the server creates the file, and the
# backup still verifies.
#
# Mutations checked (each made the test fail): writing no settings; the
# file marked not clean (the server then refuses it); no removal by a
# failed backup; no refusal of an existing file (neither the early check
# nor link()'s EEXIST; without the early check alone, link() still refuses
# it, by design); no refusal inside a tablespace or the WAL directory; the
# ring size taken from the default instead of the source; the inherited-path
# warning only for superusers; a SHOW of the one name instead of SHOW ALL
# (an error in the source's log for a role that may not see nvwal_path).
use strict;
use warnings FATAL => 'all';
use Fcntl qw(:flock);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	command_fails_like(
		[
			'pg_basebackup',
			'--pgdata' => PostgreSQL::Test::Utils::tempdir(),
			'--format' => 'nvwal',
			'--nvwal-path' => '/nonexistent/nvwal'
		],
		qr/the nvwal format is not supported by this build/,
		'a build without libpmem refuses the nvwal format');
	done_testing();
	exit;
}

# No persistent memory here: let libpmem treat the files as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

my $tempdir = PostgreSQL::Test::Utils::tempdir();
my $mb = 1024 * 1024;

# NvwalFileHeader, as nv_xlog_buffer.h lays it out.
sub read_header
{
	my ($file) = @_;
	open(my $fh, '<', $file) or die "could not open $file: $!";
	binmode $fh;
	sysread($fh, my $raw, 72) == 72 or die "could not read $file: $!";
	close($fh);
	my %h;
	@h{
		qw(magic version sysid file_id blcksz segsize ring_size
		  timeline clean synced_upto previous_file_id)
	} = unpack('L< L< Q< Q< L< L< Q< Q< Q< Q< Q<', $raw);
	return \%h;
}

# The settings pg_basebackup appended, as "name = value" lines.
sub appended_settings
{
	my ($datadir) = @_;
	my @lines = split /\n/, slurp_file("$datadir/postgresql.auto.conf");
	return join("\n", grep { /^nvwal_/ } @lines);
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
my $primary_file = "$tempdir/primary.nvwal";
$primary->append_conf('postgresql.conf',
	"nvwal_path = '$primary_file'\nnvwal_size = 32MB\n");
$primary->start;
$primary->safe_psql('postgres',
	'CREATE TABLE t (id int); INSERT INTO t VALUES (1)');
my $sysid = $primary->safe_psql('postgres',
	'SELECT system_identifier FROM pg_control_system()');
my $segsize = $primary->safe_psql('postgres',
	"SELECT setting::int FROM pg_settings WHERE name = 'wal_segment_size'");

# A standby with its own file: -R, the source's size, settings after the
# source's lines.
my $standby_dir = $primary->backup_dir . '/standby';
my $standby_file = "$tempdir/standby.nvwal";
$primary->command_ok(
	[
		'pg_basebackup',
		'--pgdata' => $standby_dir,
		'--format' => 'nvwal',
		'--nvwal-path' => $standby_file,
		'--write-recovery-conf',
		'--dbname' => 'application_name=standby',
		'--checkpoint' => 'fast',
	],
	'nvwal format with -R');
my $h = read_header($standby_file);
is($h->{magic}, 0x4C41574E, 'file has the NVWAL magic number');
is($h->{version}, 1, 'file has format version 1');
is($h->{sysid}, $sysid, "file carries the source's system identifier");
ok($h->{file_id} != 0, 'file has a file id');
isnt(
	$h->{file_id},
	read_header($primary_file)->{file_id},
	"file id differs from the source's file");
is($h->{ring_size}, 32 * $mb,
	"ring size defaults to the source's nvwal_size");
is($h->{blcksz}, 8192, 'file records the WAL block size');
is($h->{segsize}, $segsize, 'file records the WAL segment size');
is($h->{clean}, 1, 'file is marked clean');
is(-s $standby_file, 8192 + 32 * $mb, 'file has its full size');
ok( (stat($standby_file))[12] * 512 >= 32 * $mb,
	'its space is allocated, not a hole');
ok(!-e "$standby_file.tmp", 'no temporary file is left');
is( appended_settings($standby_dir),
	"nvwal_path = '$standby_file'\nnvwal_size = '32MB'",
	'settings appended to postgresql.auto.conf');
like(
	slurp_file("$standby_dir/postgresql.auto.conf"),
	qr/primary_conninfo.*\n(.*\n)*nvwal_path/,
	'after the lines -R writes');
ok(-e "$standby_dir/standby.signal", '-R still writes standby.signal');

my $standby = PostgreSQL::Test::Cluster->new('standby');
# The settings -R wrote, not those of Cluster.pm, make it a standby.
$standby->init_from_backup($primary, 'standby');
$standby->start;
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (2)');
$primary->wait_for_replay_catchup($standby);
ok( !$standby->log_contains(
		qr/created non-volatile WAL buffer file|replacing non-volatile WAL buffer file/
	),
	'the standby starts on the prepared file');
$standby->promote;
$standby->safe_psql('postgres', 'INSERT INTO t VALUES (3)');
is( $standby->safe_psql('postgres', 'SELECT path, size FROM pg_stat_nvwal'),
	"$standby_file|" . 32 * $mb,
	'after promotion, the new primary writes WAL to the prepared file');
$standby->stop('immediate');
$standby->start;
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'),
	'3', 'a commit made with the prepared file survives a crash');
$standby->stop;

# Without -R: no standby.signal, a size of its own.
my $copy_dir = $primary->backup_dir . '/copy';
my $copy_file = "$tempdir/copy.nvwal";
$primary->command_ok(
	[
		'pg_basebackup',
		'--pgdata' => $copy_dir,
		'--format' => 'n',
		'--nvwal-path' => $copy_file,
		'--nvwal-size' => '64MB',
		'--no-sync',
	],
	'nvwal format without -R');
ok(!-e "$copy_dir/standby.signal", 'no standby.signal without -R');
is(read_header($copy_file)->{ring_size}, 64 * $mb, 'ring of --nvwal-size');
is( appended_settings($copy_dir),
	"nvwal_path = '$copy_file'\nnvwal_size = '64MB'",
	'settings name the file and its size');
my $copy = PostgreSQL::Test::Cluster->new('copy');
$copy->init_from_backup($primary, 'copy');
$copy->start;
is($copy->safe_psql('postgres', 'SELECT size FROM pg_stat_nvwal'),
	64 * $mb, 'the copy runs with its file');
ok(!$copy->log_contains(qr/created non-volatile WAL buffer file/),
	'without creating one');
$copy->stop;

# Without -Fn, the copy keeps the source's settings: with an absolute
# nvwal_path that would be the source's file.
$primary->command_checks_all(
	[
		'pg_basebackup',
		'--pgdata' => "$tempdir/inherits",
		'--no-sync',
	],
	0,
	[qr/^$/],
	[
		qr/the new cluster will be set up to use the source server's non-volatile WAL buffer file "\Q$primary_file\E"/
	],
	'a plain backup warns that it inherits an absolute nvwal_path');

# The source is asked with SHOW ALL, which shows a role what it may see and
# never fails: a replication role that may read all settings is warned too,
# one that may not is not, and neither puts an error into the source's log
# (a server without nvwal_path, vanilla's, would get one at every backup
# from a SHOW of that name).
$primary->safe_psql('postgres',
	'CREATE ROLE backup_reader LOGIN REPLICATION IN ROLE pg_read_all_settings;'
	  . ' CREATE ROLE backup_plain LOGIN REPLICATION;');
my $log_offset = -s $primary->logfile;
$primary->command_checks_all(
	[
		'pg_basebackup',
		'--pgdata' => "$tempdir/inherits_reader",
		'--username' => 'backup_reader',
		'--no-sync',
	],
	0,
	[qr/^$/],
	[qr/the source server's non-volatile WAL buffer file/],
	'a role that may read all settings is warned as well');
$primary->command_checks_all(
	[
		'pg_basebackup',
		'--pgdata' => "$tempdir/inherits_plain",
		'--username' => 'backup_plain',
		'--no-sync',
	],
	0,
	[qr/^$/],
	[qr/^$/],
	'a role that may not see nvwal_path is told nothing');
ok(!$primary->log_contains(qr/ERROR/, $log_offset),
	'asking for the settings puts no error into the source\'s log');

# Refusals: each leaves no target directory, no file and no temporary
# file, and leaves an existing file as it was.
my $tablespace = "$tempdir/tblspc";
mkdir $tablespace or die "could not create $tablespace: $!";
$primary->safe_psql('postgres',
	"CREATE TABLESPACE ts LOCATION '$tablespace'");
my $mapped = "$tempdir/tblspc_copy";
my $refused = 0;

sub refused
{
	my ($name, $args, $message, $path) = @_;
	my $target = "$tempdir/refused" . $refused++;
	$primary->command_fails_like(
		[ 'pg_basebackup', '--pgdata' => $target, '--no-sync', @$args ],
		$message, "refused: $name");
	ok(!-e $target, "refused: $name: no target directory is left");
	if (defined $path)
	{
		ok(!-e $path, "refused: $name: no file is left");
		ok(!-e "$path.tmp", "refused: $name: no temporary file is left");
	}
}

my $ts_path = "$mapped/nvwal";
refused(
	'a file inside a tablespace directory',
	[
		'--format' => 'nvwal',
		'--nvwal-path' => $ts_path,
		'--tablespace-mapping' => "$tablespace=$mapped"
	],
	qr/cannot be inside tablespace directory/,
	$ts_path);
ok(!-e $mapped, 'refused: the tablespace directory is not left either');
$primary->safe_psql('postgres', 'DROP TABLESPACE ts');
my $waldir = "$tempdir/waldir";
refused(
	'a file inside the WAL directory',
	[
		'--format' => 'nvwal',
		'--nvwal-path' => "$waldir/nvwal",
		'--waldir' => $waldir
	],
	qr/cannot be inside the WAL directory/,
	"$waldir/nvwal");
ok(!-e $waldir, 'refused: the WAL directory is not made');

my $before = slurp_file($copy_file);
refused(
	'an existing file',
	[ '--format' => 'nvwal', '--nvwal-path' => $copy_file ],
	qr/non-volatile WAL buffer file "\Q$copy_file\E" already exists/);
is(slurp_file($copy_file), $before, 'refused: the existing file is intact');
refused(
	'the file of a running server',
	[ '--format' => 'nvwal', '--nvwal-path' => $primary_file ],
	qr/already exists/);

my $locked_path = "$tempdir/locked.nvwal";
open(my $lock, '>', "$locked_path.tmp") or die "could not create: $!";
flock($lock, LOCK_EX) or die "could not lock: $!";
refused(
	'a file another process is creating',
	[ '--format' => 'nvwal', '--nvwal-path' => $locked_path ],
	qr/is being created by another process/);
ok(-e "$locked_path.tmp", "refused: the other process's file is left alone");
ok(!-e $locked_path, 'refused: nothing is linked in its place');
close($lock);
unlink("$locked_path.tmp");

refused(
	'a file in a directory that does not exist',
	[ '--format' => 'nvwal', '--nvwal-path' => "$tempdir/nodir/nvwal" ],
	qr/directory ".*nodir" of non-volatile WAL buffer file .* does not exist/
);

my $any = "$tempdir/any.nvwal";
refused(
	'no --nvwal-path',
	[ '--format' => 'nvwal' ],
	qr/the nvwal format requires --nvwal-path/);
refused(
	'--nvwal-path without the format',
	[ '--nvwal-path' => $any ],
	qr/--nvwal-path and --nvwal-size require --format=nvwal/, $any);
refused(
	'a size that is not a size',
	[ '--format' => 'nvwal', '--nvwal-path' => $any, '--nvwal-size' => 'x' ],
	qr/invalid non-volatile WAL buffer size "x"/,
	$any);

foreach my $size ($segsize / $mb, 3 * $segsize / $mb + 1, 4096)
{
	refused(
		"a size of ${size}MB",
		[
			'--format' => 'nvwal',
			'--nvwal-path' => $any,
			'--nvwal-size' => "${size}MB"
		],
		qr/invalid non-volatile WAL buffer size: ${size}MB/,
		$any);
}
$primary->command_fails_like(
	[
		'pg_basebackup',
		'--pgdata' => '-',
		'--format' => 'nvwal',
		'--nvwal-path' => $any
	],
	qr/cannot write the nvwal format to standard output/,
	'refused: standard output');
ok(!-e $any, 'refused: standard output: no file is left');

# A backup that fails after the file was made (its WAL streamer finds no
# slot) removes it, unless told not to.
my $failed = "$tempdir/failed.nvwal";
$primary->command_fails(
	[
		'pg_basebackup',
		'--pgdata' => "$tempdir/failed",
		'--format' => 'nvwal',
		'--nvwal-path' => $failed,
		'--wal-method' => 'stream',
		'--slot' => 'nonexistent',
		'--no-sync'
	],
	'a backup that fails after making the file');
ok(!-e $failed && !-e "$failed.tmp", 'the failed backup removed its file');
ok(!-e "$tempdir/failed", 'and its data directory');
my ($stdout, $stderr);
IPC::Run::run(
	[
		'pg_basebackup',
		'--pgdata' => "$tempdir/failed_kept",
		'--format' => 'nvwal',
		'--nvwal-path' => $failed,
		'--wal-method' => 'stream',
		'--slot' => 'nonexistent',
		'--no-sync',
		'--no-clean',
		'--host' => $primary->host,
		'--port' => $primary->port
	],
	'>' => \$stdout,
	'2>' => \$stderr);
ok(-e $failed, 'with --no-clean the file is kept');
like(
	$stderr,
	qr/non-volatile WAL buffer file "\Q$failed\E" not removed at user's request/,
	'and the user is told');

# A path inside the target data directory: settings only; the server
# creates the file at first start, and the backup verifies as it is.
my $inside_dir = $primary->backup_dir . '/inside';
$primary->command_ok(
	[
		'pg_basebackup',
		'--pgdata' => $inside_dir,
		'--format' => 'nvwal',
		'--nvwal-path' => 'nvwal',
		'--no-sync'
	],
	'a file inside the data directory');
ok(!-e "$inside_dir/nvwal", 'pg_basebackup does not create it');
is( appended_settings($inside_dir),
	"nvwal_path = 'nvwal'\nnvwal_size = '32MB'",
	'the settings name it relative to the data directory');
$primary->command_ok([ 'pg_verifybackup', $inside_dir ],
	'the backup verifies');
my $inside = PostgreSQL::Test::Cluster->new('inside');
$inside->init_from_backup($primary, 'inside');
$inside->start;
ok($inside->log_contains(qr/created non-volatile WAL buffer file "nvwal"/),
	'the server creates the file at first start');
$inside->stop;

# A source without a file still has an nvwal_size, and the ring takes it.
# (The default of 256MB is only for sources that have no such setting, older
# servers, which this test cannot start.)
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init(allows_streaming => 1);
$plain->append_conf('postgresql.conf',
	"nvwal_path = ''\nnvwal_size = 48MB\n");
$plain->start;
my $plain_file = "$tempdir/plain.nvwal";
$plain->command_ok(
	[
		'pg_basebackup',
		'--pgdata' => "$tempdir/from_plain",
		'--format' => 'nvwal',
		'--nvwal-path' => $plain_file,
		'--no-sync'
	],
	'nvwal format from a source without NVWAL');
is(read_header($plain_file)->{ring_size},
	48 * $mb, "ring size is the nvwal_size of a source without a file");
$plain->stop;

$primary->stop;
done_testing();
