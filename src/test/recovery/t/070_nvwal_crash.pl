
# Copyright (c) 2026, PostgreSQL Global Development Group

# Non-volatile WAL buffer: acknowledged commits survive crashes.
#
# Several clients commit single-row inserts into a ledger, and record every
# insert whose completion the server acknowledged.  At a random moment the
# postmaster and all of its children are killed with SIGKILL at once, as a
# power loss would stop them, the WAL not yet synced in pg_wal is lost as in
# a power loss, and the server is started again.  Every
# acknowledged row must then be there, each client's rows must have no gaps,
# and nothing committed in earlier rounds may have been lost.  The ring is
# small, four 1MB segments, so that it wraps around many times during the
# test and the crashes find it in many states: the WAL writer behind or
# writing back, inserters writing back a full ring themselves, checkpoints
# in progress.  Finally, pg_amcheck must find the heap and its index
# consistent.
use strict;
use warnings FATAL => 'all';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use NVWAL::Utils;
use Time::HiRes qw(usleep);

if (!check_pg_config("#define USE_LIBPMEM 1"))
{
	plan skip_all => 'non-volatile WAL buffer not supported by this build';
}
if (!-d '/proc/self/fd')
{
	plan skip_all => 'test needs /proc to find the server processes';
}

# There is no persistent memory here: let libpmem treat the file as if it
# were, so that the commit path uses cache-line flushes as it would on pmem.
# The server inherits this from pg_ctl.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

my $rounds = 20;
my $nclients = 3;

# The delays before each crash are random; NVWAL_CRASH_SEED repeats a run's.
my $seed = $ENV{NVWAL_CRASH_SEED} // (time() ^ $$);
srand($seed);
note "random seed $seed (set NVWAL_CRASH_SEED to repeat)";
my $inserts_per_script = 50000;

# An LSN as a number, to compare.
sub lsn_value
{
	my ($lsn) = @_;
	my ($hi, $lo) = $lsn =~ m{^([0-9A-F]+)/([0-9A-F]+)$}i
	  or die "not an LSN: $lsn";
	return hex($hi) * 2**32 + hex($lo);
}

sub child_pids
{
	my ($parent) = @_;
	my @pids;
	opendir(my $dh, '/proc') or die "could not open /proc: $!";
	foreach my $pid (grep { /^\d+$/ } readdir($dh))
	{
		my ($state, $ppid) = proc_state($pid);
		push @pids, $pid if defined $ppid && $ppid == $parent;
	}
	closedir($dh);
	return @pids;
}

# Kill the postmaster and all of its children with SIGKILL, like a power
# loss: once one of them is gone, none may run on.  All are stopped first,
# the postmaster before the others so that it can start no new child.  Every
# acknowledgement a client received was sent before that, so the processes
# die in a state a power loss could have caught them in.  Returns the number
# of processes killed.
sub crash_node
{
	my ($node) = @_;
	my $pidfile = $node->data_dir . '/postmaster.pid';
	my ($pm) = split /\n/, slurp_file($pidfile);

	kill('STOP', $pm) or die "could not stop postmaster $pm: $!";
	wait_for_proc_state($pm, qr/^[Tt]$/, 0);
	my @children = child_pids($pm);
	kill('STOP', @children);
	wait_for_proc_state($_, qr/^[TtZ]$/, 1) foreach @children;
	kill('KILL', $pm, @children);
	# Only bookkeeping: the node is now known to be down.
	$node->kill9;

	# Wait until no process is left holding shared memory, the file lock or
	# anything else.  A zombie holds nothing.
	wait_for_proc_state($_, qr/^Z$/, 1) foreach ($pm, @children);

	# The postmaster's zombie may linger until init reaps it, and the next
	# postmaster would take it for a live one that still owns the data
	# directory and the socket.  After a power loss there is no such
	# process: remove the lock files, as a reboot makes the PID in them
	# meaningless.
	if (proc_state($pm))
	{
		unlink($pidfile);
		unlink($node->host . '/.s.PGSQL.' . $node->port . '.lock');
	}
	return 1 + scalar(@children);
}

my $node = PostgreSQL::Test::Cluster->new('nvwal_crash');
$node->init(extra => ['--wal-segsize=1']);
$node->append_conf(
	'postgresql.conf', q{
nvwal_path = 'nvwal'
nvwal_size = 4MB
min_wal_size = 4MB
max_wal_size = 32MB
# The clients' inserts would fill the log.
log_statement = none
});
$node->start;

is($node->safe_psql('postgres', 'SELECT is_pmem FROM pg_stat_nvwal'),
	't', 'the server uses a non-volatile WAL buffer, taken for pmem');
my $nvwal_file = nvwal_file($node);

# The rows are wide so that the ring wraps around often.
$node->safe_psql(
	'postgres', q{
CREATE TABLE ledger (
	round int,
	client int,
	seq int,
	pad text,
	PRIMARY KEY (round, client, seq));
});
my $lsn_start = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# Each client runs one script per round, with the round number as a psql
# variable.  An insert is acknowledged once psql has printed its RETURNING
# output, which it does only after the server reported the command complete,
# that is, after the commit.  The output includes the WAL insert position
# during the insert: the commit record lies beyond it.
my $tmp = PostgreSQL::Test::Utils::tempdir;
foreach my $client (1 .. $nclients)
{
	open(my $fh, '>', "$tmp/client$client.sql") or die $!;
	print $fh
	  "INSERT INTO ledger VALUES (:round, $client, $_, repeat('x', 300)) RETURNING seq, pg_current_wal_insert_lsn();\n"
	  foreach 1 .. $inserts_per_script;
	close($fh);
}

my $logstart = -s $node->logfile;
my $rows_so_far = 0;
my $acked_total = 0;
my $killed_total = 0;
my $rounds_salvaged = 0;

foreach my $round (1 .. $rounds)
{
	my @clients;
	foreach my $client (1 .. $nclients)
	{
		my $out = "$tmp/round$round.client$client.out";
		push @clients,
		  {
			out => $out,
			h => IPC::Run::start(
				[
					'psql', '--no-psqlrc', '--quiet',
					'--no-align', '--tuples-only',
					'--set' => 'ON_ERROR_STOP=1',
					'--set' => "round=$round",
					'--file' => "$tmp/client$client.sql",
					'--dbname' => $node->connstr('postgres')
				],
				'<' => '/dev/null',
				'>' => $out,
				'2>' => "$out.err",
				IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default))
		  };
	}

	# Crash at a random moment once every client is committing, and once
	# the rounds so far have written enough WAL to go around the ring
	# several times by the end, however slow the machine.
	$node->poll_query_until('postgres',
		"SELECT count(DISTINCT client) = $nclients FROM ledger WHERE round = $round"
		  . " AND pg_current_wal_insert_lsn() - '$lsn_start' >= $round * 512 * 1024"
	) or die "clients did not commit, or not enough, in round $round";
	my $delay = 0.05 + rand(0.45);
	usleep(int($delay * 1_000_000));
	$killed_total += crash_node($node);
	my $synced = lose_unsynced_wal($node, $nvwal_file);

	# The clients lose their connection and stop.
	my %acked;
	my $last_acked_lsn = '0/0';
	foreach my $client (1 .. $nclients)
	{
		my $c = $clients[ $client - 1 ];
		$c->{h}->finish;
		my @acks = map { [ split /\|/ ] } split /\n/, slurp_file($c->{out});
		# psql runs the inserts one after the other.
		die "unexpected output from client $client in round $round"
		  if grep { $acks[ $_ - 1 ][0] ne $_ } 1 .. @acks;
		$acked{$client} = scalar(@acks);
		$acked_total += @acks;
		$last_acked_lsn = $acks[-1][1]
		  if @acks && lsn_value($acks[-1][1]) > lsn_value($last_acked_lsn);
	}
	note sprintf(
		"round %d: crash after %.0f ms, acknowledged: %s",
		$round,
		$delay * 1000,
		join(', ', map { "client $_: $acked{$_}" } sort keys %acked));

	my $logpos = -s $node->logfile;
	$node->start;

	my ($from, $to) = slurp_file($node->logfile, $logpos) =~
	  m{wrote WAL from (\S+) to (\S+) on timeline \d+ from non-volatile WAL buffer file "nvwal" to pg_wal};
	ok(defined $to,
		"round $round: start-up wrote the ring's durable tail to pg_wal");
	# Whether an acknowledged commit was beyond what pg_wal kept, and so
	# survived thanks to the ring only, depends on the moment.
	$rounds_salvaged++ if lsn_value($last_acked_lsn) >= lsn_value($synced);

	# Every acknowledged row is there.  So is at most the one insert each
	# client had in flight, and no row is missing in between.
	my %found =
	  map { my ($c, $n, $lo, $hi) = split /\|/; ($c => [ $n, $lo, $hi ]) }
	  split /\n/,
	  $node->safe_psql(
		'postgres',
		"SELECT client, count(*), min(seq), max(seq) FROM ledger WHERE round = $round GROUP BY client"
	  );
	my @problems;
	my $rows_this_round = 0;
	foreach my $client (1 .. $nclients)
	{
		my ($n, $lo, $hi) = @{ $found{$client} // [ 0, 0, 0 ] };
		$rows_this_round += $n;
		push @problems,
		  "client $client: acknowledged 1..$acked{$client}, found $n rows in $lo..$hi"
		  unless $n >= $acked{$client}
		  && $n <= $acked{$client} + 1
		  && ($n == 0 || ($lo == 1 && $hi == $n));
	}
	is(join('; ', @problems),
		'', "round $round: every acknowledged commit survived the crash");

	$rows_so_far += $rows_this_round;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM ledger'),
		$rows_so_far, "round $round: rows of earlier rounds are intact");
}

# The test is only meaningful if the crashes hit clients that had commits
# acknowledged; each had at least one committed row before every crash.
cmp_ok(
	$acked_total, '>=',
	$rounds * $nclients,
	'the clients had commits acknowledged before the crashes');
note "$acked_total acknowledged commits, $killed_total processes killed";

# And only if some crashes lost acknowledged commits that only the ring
# still held.
cmp_ok($rounds_salvaged, '>', 0,
	'some acknowledged commits were in the ring only when the server crashed'
);
note "$rounds_salvaged of $rounds crashes needed WAL from the ring";

$node->command_checks_all(
	[
		'pg_amcheck', '--all', '--install-missing',
		'--heapallindexed', '--parent-check',
		'--host' => $node->host,
		'--port' => $node->port
	],
	0,
	[qr/^$/],
	[qr/^$/],
	'pg_amcheck finds no corruption after the crashes');

unlike(slurp_file($node->logfile, $logstart),
	qr/PANIC|TRAP:/, 'no PANIC or assertion failure in the server log');

$node->stop;

done_testing();
