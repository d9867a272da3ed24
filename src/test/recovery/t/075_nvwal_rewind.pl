
# Copyright (c) 2026, PostgreSQL Global Development Group

# pg_rewind between clusters that keep their non-volatile WAL buffer (NVWAL)
# file inside the data directory.
#
# The source's file must not be copied: it is the source's cache of WAL it
# also has in pg_wal.  A target with a file of its own keeps it, a target
# without one gets none, with a source server (libpq) and with a stopped
# source data directory alike.  Both rewound nodes must then follow the new
# primary and end up with its data.  Last, a standby stopped during its
# promotion (while recovery_end_command runs), whose last WAL may be in its
# ring only, is rewound: pg_rewind must not take that for a clean shutdown.
use strict;
use warnings FATAL => 'all';
use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	plan skip_all => 'non-volatile WAL buffer not supported by this build';
}

# No persistent memory here: let libpmem treat the file as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

# The random file id in the file's header (after magic, version and system
# identifier), or 'none'.
sub nvwal_file_id
{
	my ($node) = @_;
	my $path = $node->data_dir . '/nvwal';
	return 'none' unless -e $path;
	open(my $fh, '<', $path) or die "could not open $path: $!";
	binmode $fh;
	my $header;
	sysread($fh, $header, 24) == 24 or die "could not read $path";
	close $fh;
	return unpack('x16 H16', $header);
}

sub rows
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT count(*), sum(v) FROM t');
}

# Rewind 'target' from 'source_args' and restart it as a standby of 'leader'.
# pg_rewind copies the source's configuration: keep the target's own
# outside the data directory, where pg_rewind would remove it.
sub rewind
{
	my ($target, $leader, $name, @source_args) = @_;
	my $conf = $target->data_dir . '/postgresql.conf';
	my $keep = PostgreSQL::Test::Utils::tempdir . '/postgresql.conf';
	copy($conf, $keep) or die "could not copy $conf: $!";
	# What a crash while the source built its file would leave behind.
	my $leftover = $leader->data_dir . '/nvwal.tmp';
	append_to_file($leftover, 'a file being built');
	my ($stdout, $stderr) = ('', '');
	my $ok = IPC::Run::run(
		[
			'pg_rewind', '--debug',
			'--target-pgdata' => $target->data_dir,
			@source_args
		],
		'>' => \$stdout,
		'2>' => \$stderr);
	ok($ok, "$name: pg_rewind succeeds") or diag($stderr);
	like(
		$stderr,
		qr/entry "nvwal" is the source's NVWAL file or its temporary file, not copied/,
		"$name: pg_rewind recognizes the source's NVWAL file");
	unlike(
		$stderr,
		qr/^pg_rewind: nvwal \(COPY\)$/m,
		"$name: pg_rewind does not copy the source's NVWAL file");
	like(
		$stderr,
		qr/entry "nvwal\.tmp" is the source's NVWAL file or its temporary file, not copied/,
		"$name: pg_rewind does not copy the source's temporary NVWAL file");
	ok(!-e $target->data_dir . '/nvwal.tmp',
		"$name: the target has no temporary NVWAL file");
	unlink($leftover) or die "could not remove $leftover: $!";
	move($keep, $conf) or die "could not restore $conf: $!";
	$target->enable_streaming($leader);
	return $stderr;
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
nvwal_path = 'nvwal'
nvwal_size = 32MB
wal_log_hints = on
wal_keep_size = 320MB
});
$primary->start;
$primary->safe_psql('postgres',
	'CREATE TABLE t (v int); INSERT INTO t SELECT generate_series(1, 1000)');
$primary->backup('b');

# standby1 will be promoted; its NVWAL file is 'nvwal' as on the primary.
my $standby1 = PostgreSQL::Test::Cluster->new('standby1');
$standby1->init_from_backup($primary, 'b', has_streaming => 1);
$standby1->start;

# standby2 follows the old primary and runs without NVWAL.
my $standby2 = PostgreSQL::Test::Cluster->new('standby2');
$standby2->init_from_backup($primary, 'b', has_streaming => 1);
$standby2->append_conf('postgresql.conf', "nvwal_path = ''");
$standby2->start;

$primary->safe_psql('postgres',
	'INSERT INTO t SELECT generate_series(1, 100)');
$primary->wait_for_replay_catchup($standby1);
$primary->wait_for_replay_catchup($standby2);

# Diverge: standby1 is promoted and writes; the old primary writes too, and
# standby2 follows it.
$standby1->promote;
$standby1->safe_psql('postgres', 'INSERT INTO t VALUES (-1)');
$primary->safe_psql('postgres',
	'INSERT INTO t SELECT generate_series(1, 50)');
$primary->wait_for_replay_catchup($standby2);
$primary->stop;
$standby2->stop;

my $primary_id = nvwal_file_id($primary);
isnt($primary_id, 'none', 'the old primary has an NVWAL file');
isnt(nvwal_file_id($standby1),
	$primary_id, 'the new primary has an NVWAL file of its own');
is(nvwal_file_id($standby2), 'none', 'standby2 has no NVWAL file');

# The old primary from the running new primary.
rewind(
	$primary, $standby1,
	'source server',
	'--source-server' => $standby1->connstr('postgres'));
is(nvwal_file_id($primary), $primary_id,
	'the old primary kept its own NVWAL file');

# standby2 from the new primary's data directory, stopped cleanly.
$standby1->stop;
rewind(
	$standby2, $standby1,
	'source data directory',
	'--source-pgdata' => $standby1->data_dir);
is(nvwal_file_id($standby2),
	'none', 'standby2 did not get the new primary\'s NVWAL file');

# Both follow the new primary and have its data.
$standby1->start;
$primary->start;
$standby2->start;
$standby1->safe_psql('postgres', 'INSERT INTO t VALUES (-2)');
$standby1->wait_for_replay_catchup($primary);
$standby1->wait_for_replay_catchup($standby2);
my $expected = rows($standby1);
is($expected, '1102|505547', 'the new primary has its rows');
is(rows($primary), $expected, 'the rewound old primary matches');
is(rows($standby2), $expected, 'the rewound standby matches');
ok(-f $primary->data_dir . '/nvwal',
	'the rewound old primary runs with its NVWAL file');

# A standby promoted and stopped before the end of recovery was complete,
# here while recovery_end_command runs: it began writing WAL to its ring
# (the end-of-recovery record) but shut down in recovery, so its last WAL
# may be in the ring only.  pg_rewind must not take that for a clean
# shutdown; it runs the target in single-user mode first, which writes the
# ring's WAL to pg_wal.
$standby1->backup('c');
my $standby3 = PostgreSQL::Test::Cluster->new('standby3');
$standby3->init_from_backup($standby1, 'c', has_streaming => 1);
my $marker = PostgreSQL::Test::Utils::tempdir . '/end_command_started';
my $release = PostgreSQL::Test::Utils::tempdir . '/end_command_released';
$standby3->append_conf('postgresql.conf',
	"recovery_end_command = 'touch \"$marker\"; while [ ! -e \"$release\" ]; do sleep 0.1; done'\n"
);
$standby3->start;
$standby1->wait_for_replay_catchup($standby3);
$standby3->safe_psql('postgres', 'SELECT pg_promote(false)');
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
sleep(1) while !-e $marker && time() < $deadline;
ok(-e $marker, 'stopped in recovery: recovery_end_command runs');
$standby3->stop('fast');
append_to_file($release, '');
my ($controldata) = run_command([ 'pg_controldata', $standby3->data_dir ]);
like(
	$controldata,
	qr/^Database cluster state:\s+shut down in recovery$/m,
	'stopped in recovery: pg_control says shut down in recovery');
like(
	$controldata,
	qr/^Non-volatile WAL buffer in use:\s+yes$/m,
	'stopped in recovery: pg_control still names the NVWAL file');
$standby1->safe_psql('postgres', 'INSERT INTO t VALUES (-3)');
my $rewind_log = rewind(
	$standby3, $standby1,
	'stopped in recovery',
	'--source-server' => $standby1->connstr('postgres'));
like(
	$rewind_log,
	qr/for target server to complete crash recovery/,
	'stopped in recovery: pg_rewind ran crash recovery on the target first');
like(
	$rewind_log,
	qr/wrote WAL from \S+ to \S+ on timeline \d+ from non-volatile WAL buffer file/,
	'stopped in recovery: that recovery wrote the ring\'s WAL to pg_wal');
$standby3->start;
$standby1->wait_for_replay_catchup($standby3);
is(rows($standby3), rows($standby1),
	'stopped in recovery: the rewound node matches');

done_testing();
