
# Copyright (c) 2026, PostgreSQL Global Development Group

# Replication, logical replication, archiving and base backups of a primary
# that uses a non-volatile WAL buffer (NVWAL), across a crash of the primary.
#
# A streaming standby (synchronous, with its own NVWAL file), a logical
# subscriber and the WAL archive must end up with exactly what the primary
# committed, including commits that were durable only in the primary's ring
# when it crashed: the WAL writer is stopped for them, so only the
# walsenders can ship them before the crash, and, as the crash loses what
# was not synced in pg_wal, only the start-up salvage can keep them on the
# primary after.
# Synchronous commits must return without waiting for the WAL writer or any
# other periodic wake-up of the walsenders.  A node restored by archive
# recovery from a base backup taken before the crash must equal the primary
# too.  Standbys and restored nodes must survive restarts of their own.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use NVWAL::Utils;
use PrefetchRead::Utils qw(archive_current_segment);

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	plan skip_all => 'non-volatile WAL buffer not supported by this build';
}

# No persistent memory here: let libpmem treat the file as if it were.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

my $ring_bytes = 32 * 1024 * 1024;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 'logical', has_archiving => 1);
$primary->append_conf(
	'postgresql.conf', qq{
nvwal_path = 'nvwal'
nvwal_size = 32MB
autovacuum = off
max_wal_size = 256MB
checkpoint_timeout = 1h
max_prepared_transactions = 5
});
$primary->start;

$primary->safe_psql(
	'postgres', q{
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 100) g;
CREATE TABLE ledger (id bigserial PRIMARY KEY, acct int NOT NULL,
	amount int NOT NULL, note text);
CREATE PUBLICATION pub FOR TABLE accounts, ledger;
});

# The base backup is streamed from pg_wal; the primary's file is not in it,
# nor what a crash while building the file would have left behind.
append_to_file($primary->data_dir . '/nvwal.tmp', 'a file being built');
$primary->backup('before');
my $backup_path = $primary->backup_dir . '/before';
ok(-f "$backup_path/global/pg_control", 'base backup taken');
ok(!-e "$backup_path/nvwal",
	'base backup does not contain the primary\'s NVWAL file');
ok(!-e "$backup_path/nvwal.tmp",
	'base backup does not contain the primary\'s temporary NVWAL file');

# A streaming standby with an NVWAL file of its own (the relative path of
# the primary's configuration), synchronous below.
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'before', has_streaming => 1);
$standby->start;
ok(-f $standby->data_dir . '/nvwal', 'standby created its own NVWAL file');
is( $standby->safe_psql(
		'postgres',
		'SELECT path, is_pmem, flush_lsn IS NULL AND synced_lsn IS NULL FROM pg_stat_nvwal'
	),
	'nvwal|t|t',
	'standby uses its own NVWAL file, and shows no ring positions in recovery'
);

# A logical subscriber, without NVWAL.
my $subscriber = PostgreSQL::Test::Cluster->new('subscriber');
$subscriber->init;
$subscriber->start;
$subscriber->safe_psql(
	'postgres', q{
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
CREATE TABLE ledger (id bigint PRIMARY KEY, acct int NOT NULL,
	amount int NOT NULL, note text);
});
my $primary_connstr = $primary->connstr . ' dbname=postgres';
$subscriber->safe_psql('postgres',
	"CREATE SUBSCRIPTION sub CONNECTION '$primary_connstr' PUBLICATION pub");
$subscriber->wait_for_subscription_sync($primary, 'sub');

$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = 'standby'");
$primary->reload;
$primary->poll_query_until('postgres',
	"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'"
) or die 'standby did not become synchronous';

my $query_ledger =
  q{SELECT count(*), sum(amount), md5(string_agg(id || ':' || acct || ':' || amount || ':' || coalesce(note, '-'), ',' ORDER BY id)) FROM ledger};
my $query_accounts =
  q{SELECT sum(balance), md5(string_agg(id || ':' || balance, ',' ORDER BY id)) FROM accounts};

# Concurrent transfers, each commit acknowledged by the synchronous standby.
my $transfer = q{
\set acct random(1, 100)
\set amt random(-50, 50)
BEGIN;
UPDATE accounts SET balance = balance + :amt WHERE id = :acct;
INSERT INTO ledger (acct, amount, note) VALUES (:acct, :amt, 'transfer');
COMMIT;
};

$primary->pgbench(
	'--no-vacuum --client=3 --jobs=3 --transactions=100',
	0,
	[qr{processed: 300/300}],
	[qr{^$}],
	'transfers before the crash, with a synchronous standby',
	{ '074_transfer_before' => $transfer });

# More WAL than the ring holds, so that ring pages are reused.
$primary->safe_psql('postgres',
	q{INSERT INTO ledger (acct, amount, note) SELECT g % 100 + 1, 0, repeat('b', 200) FROM generate_series(1, 60000) g}
);
cmp_ok(
	$primary->safe_psql('postgres', 'SELECT written_back FROM pg_stat_nvwal'),
	'>', $ring_bytes, 'the workload went around the ring');

# Commits that are durable only in the ring: the WAL writer is stopped, so
# pg_wal gets them only if the walsenders write them back before reading.
# Each commit must wake the walsenders itself: no periodic reply or
# keepalive is to do it instead, or twenty synchronous commits in a row
# take longer than the test waits.
$primary->wait_for_catchup('standby');
$primary->wait_for_catchup('sub');
$primary->append_conf('postgresql.conf', "wal_sender_timeout = '1h'");
$primary->reload;
foreach my $node ($standby, $subscriber)
{
	$node->append_conf('postgresql.conf',
		"wal_receiver_status_interval = '1h'\nwal_receiver_timeout = '1h'");
	$node->reload;
}
my $walwriter = stop_walwriter($primary);
my ($stdout, $stderr, $timed_out);
my $ret = $primary->psql(
	'postgres',
	join(
		'',
		map {
			"INSERT INTO ledger (acct, amount, note) VALUES ($_, 0, 'ring-only');\n"
		} 1 .. 19)
	  . "BEGIN;\n"
	  . "INSERT INTO ledger (acct, amount, note) VALUES (20, 0, 'ring-only');\n"
	  . "PREPARE TRANSACTION 'ring_only';\n"
	  . "COMMIT PREPARED 'ring_only';\n",
	stdout => \$stdout,
	stderr => \$stderr,
	timeout => $PostgreSQL::Test::Utils::timeout_default,
	timed_out => \$timed_out);
ok(!$timed_out && $ret == 0,
	'synchronous commits return while the WAL writer is idle');
SKIP:
{
	skip 'the synchronous commits did not return', 2 if $timed_out;
	ok( $standby->poll_query_until(
			'postgres',
			q{SELECT count(*) = 20 FROM ledger WHERE note = 'ring-only'}),
		'standby replayed the commits that were only in the primary\'s ring');
	ok( $subscriber->poll_query_until(
			'postgres',
			q{SELECT count(*) = 20 FROM ledger WHERE note = 'ring-only'}),
		'subscriber received the commits that were only in the primary\'s ring'
	);
}
is( $primary->safe_psql(
		'postgres', 'SELECT synced_lsn < flush_lsn FROM pg_stat_nvwal'),
	't',
	'the commits are still not fsynced in the primary\'s pg_wal');

foreach my $node ($primary, $standby, $subscriber)
{
	$node->adjust_conf('postgresql.conf', 'wal_sender_timeout', undef);
	$node->adjust_conf('postgresql.conf', 'wal_receiver_status_interval',
		undef);
	$node->adjust_conf('postgresql.conf', 'wal_receiver_timeout', undef);
}
$standby->reload;
$subscriber->reload;

# Crash the primary.
crash_with_walwriter_stopped($primary, $walwriter);

my $log_offset = -s $primary->logfile;
$primary->start;
my ($tail_from, $tail_to) = slurp_file($primary->logfile, $log_offset) =~
  qr/wrote WAL from (\S+) to (\S+) on timeline 1 from non-volatile WAL buffer file "nvwal" to pg_wal/;
ok( defined $tail_to
	  && $primary->safe_psql('postgres',
		"SELECT '$tail_to'::pg_lsn > '$tail_from'") eq 't',
	'primary wrote the ring\'s tail to pg_wal at start-up');
SKIP:
{
	skip 'the synchronous commits did not return', 1 if $timed_out;
	is( $primary->safe_psql(
			'postgres',
			q{SELECT count(*) FROM ledger WHERE note = 'ring-only'}),
		'20',
		'primary kept the commits that were only in its ring');
}

# More work after the crash: transfers, updates and deletes of published
# rows, and a table that is not published.
$primary->pgbench(
	'--no-vacuum --client=3 --jobs=3 --transactions=100',
	0,
	[qr{processed: 300/300}],
	[qr{^$}],
	'transfers after the crash, with a synchronous standby',
	{ '074_transfer_after' => $transfer });
$primary->safe_psql(
	'postgres', q{
UPDATE ledger SET note = 'updated' WHERE id % 7 = 0;
DELETE FROM ledger WHERE id % 10 = 0 AND amount = 0;
CREATE TABLE extra AS SELECT g AS v FROM generate_series(1, 1000) g;
});

my $ledger = $primary->safe_psql('postgres', $query_ledger);
my $accounts = $primary->safe_psql('postgres', $query_accounts);
is( (split /\|/, $ledger)[1],
	(split /\|/, $accounts)[0],
	'primary: account balances match the ledger');

# Sequences are WAL-logged ahead of use; give them the value they have in
# WAL, so that dumps of the primary and of its copies can be compared.
$primary->safe_psql('postgres',
	'SELECT setval(seqrelid, nextval(seqrelid)) FROM pg_sequence');

my $outputdir = $PostgreSQL::Test::Utils::tmp_check;

sub dump_node
{
	my ($node, $file) = @_;
	command_ok(
		[
			'pg_dumpall',
			'--file' => "$outputdir/$file",
			'--no-sync', '--no-statistics',
			'--restrict-key=test',
			'--port' => $node->port,
		],
		'dump ' . $node->name);
	return "$outputdir/$file";
}

# The standby.
$primary->wait_for_replay_catchup($standby);
is($standby->safe_psql('postgres', $query_ledger),
	$ledger, 'standby: ledger equals the primary\'s');
is($standby->safe_psql('postgres', $query_accounts),
	$accounts, 'standby: accounts equal the primary\'s');
my $primary_dump = dump_node($primary, 'primary.dump');
compare_files(
	$primary_dump,
	dump_node($standby, 'standby.dump'),
	'standby: dump equals the primary\'s');

# The subscriber.
$primary->wait_for_catchup('sub');
is($subscriber->safe_psql('postgres', $query_ledger),
	$ledger, 'subscriber: ledger equals the primary\'s');
is($subscriber->safe_psql('postgres', $query_accounts),
	$accounts, 'subscriber: accounts equal the primary\'s');

# The archive: switch to a new segment, wait until the last one with data is
# archived, and recover the backup taken before the crash from it.
my $last_segment = archive_current_segment($primary);
is( $primary->safe_psql(
		'postgres', 'SELECT failed_count FROM pg_stat_archiver'),
	'0',
	'archiver never failed');

my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init_from_backup(
	$primary, 'before',
	has_restoring => 1,
	standby => 0);
$restored->append_conf('postgresql.conf',
	"nvwal_path = ''\narchive_mode = off\n");
$restored->start;
$restored->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'archive recovery did not finish';
ok( $restored->log_contains(
		qr/restored log file "\Q$last_segment\E" from archive/),
	'restored node replayed the last archived segment');
is($restored->safe_psql('postgres', $query_ledger),
	$ledger, 'restored from archive: ledger equals the primary\'s');
is($restored->safe_psql('postgres', $query_accounts),
	$accounts, 'restored from archive: accounts equal the primary\'s');
compare_files(
	$primary_dump,
	dump_node($restored, 'restored.dump'),
	'restored from archive: dump equals the primary\'s');

# Nodes made from a backup of the NVWAL primary never used its file: they
# must restart on their own.  The restored node runs without NVWAL.
$restored->safe_psql('postgres', q{INSERT INTO extra VALUES (-1)});
$restored->stop('immediate');
if (ok( $restored->start(fail_ok => 1),
		'restored node without NVWAL restarts after a crash'))
{
	is($restored->safe_psql('postgres', 'SELECT count(*) FROM extra'),
		'1001', 'restored node kept its commit across its crash');
	$restored->stop;
}

# The standby, with an NVWAL file of its own, after a crash and after a
# clean shutdown.
$standby->stop('immediate');
if (ok($standby->start(fail_ok => 1), 'standby restarts after a crash'))
{
	$primary->safe_psql('postgres', 'INSERT INTO extra VALUES (-2)');
	$primary->wait_for_replay_catchup($standby);
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM extra'),
		'1001', 'standby streams again after its crash');

	$standby->restart;
	$primary->safe_psql('postgres', 'INSERT INTO extra VALUES (-3)');
	$primary->wait_for_replay_catchup($standby);
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM extra'),
		'1002', 'standby streams again after a clean restart');
}
else
{
	# Let the primary commit without its synchronous standby.
	$primary->adjust_conf('postgresql.conf', 'synchronous_standby_names',
		"''");
	$primary->reload;
}

$standby->stop;
$subscriber->stop;
$primary->stop;

# No server hit an assertion failure or a PANIC along the way.
foreach my $node ($primary, $standby, $subscriber, $restored)
{
	unlike(slurp_file($node->logfile),
		qr/TRAP:|PANIC:/,
		$node->name . ': no assertion failure or PANIC in the server log');
}

done_testing();
