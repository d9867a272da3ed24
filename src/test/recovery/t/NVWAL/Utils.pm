
# Copyright (c) 2026, PostgreSQL Global Development Group

=pod

=head1 NAME

NVWAL::Utils - helpers for the tests of the non-volatile WAL buffer

=head1 SYNOPSIS

  use FindBin;
  use lib $FindBin::RealBin;
  use NVWAL::Utils;

  my $walwriter = stop_walwriter($node);
  ...
  kill('CONT', $walwriter);

=head1 DESCRIPTION

The tests of the non-volatile WAL buffer hold the WAL writer back, so that
commits are durable in the ring only, and crash servers process by process.
These helpers do it without leaving a stopped process in the middle of its
work.

=cut

package NVWAL::Utils;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep);

our @EXPORT = qw(ring_only_settings proc_state wait_for_proc_state
  stop_walwriter crash_with_walwriter_stopped nvwal_file lose_unsynced_wal);

=pod

=over

=item proc_state(pid)

The state letter and the parent pid of a process, from /proc; an empty list
if it is gone.

=cut

sub proc_state
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return ();
	my $line = <$fh>;
	close($fh);
	return () unless defined $line && $line =~ /^\d+ \(.*\) (\S) (\d+) /s;
	return ($1, $2);
}

=pod

=item ring_only_settings()

Settings for a node whose tests leave committed WAL in the ring only: a
32MB ring in the data directory, and nothing that writes the ring back to
pg_wal on its own while a test holds the WAL writer (no checkpoint by time,
no autovacuum, the WAL writer idle for 10 s between rounds).

=cut

sub ring_only_settings
{
	return q{
nvwal_path = 'nvwal'
nvwal_size = 32MB
checkpoint_timeout = 1h
wal_writer_delay = 10s
autovacuum = off
};
}

=pod

=item wait_for_proc_state(pid, states, gone_ok)

Wait until a process is in a state matching the regular expression, or
gone if gone_ok; die after the default timeout.

=cut

sub wait_for_proc_state
{
	my ($pid, $states, $gone_ok) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (1)
	{
		my ($state) = proc_state($pid);
		return if !defined $state && $gone_ok;
		return if defined $state && $state =~ $states;
		die "process $pid did not reach state $states"
		  if time() > $deadline;
		usleep(5_000);
	}
}

=pod

=item stop_walwriter(node)

Stop the node's WAL writer with SIGSTOP while it waits in its main loop,
and return its pid.  Stopped at any other moment, it may hold WALWriteLock
in the middle of writing the ring back to pg_wal, and then whatever else
must write back WAL (walsenders, checkpoints, pg_switch_wal(),
an inserter that finds the ring full) waits for it until the test times
out.  In its main wait it holds no lock.

=cut

sub stop_walwriter
{
	my ($node) = @_;
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
	die "no WAL writer is running" unless $pid =~ /^\d+$/;

	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (1)
	{
		kill('STOP', $pid) or die "could not stop the WAL writer: $!";
		# The signal takes effect when the process next runs.
		wait_for_proc_state($pid, qr/^[Tt]$/, 0);
		return $pid
		  if $node->safe_psql('postgres',
			"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid") eq
		  'WalWriterMain';
		kill('CONT', $pid) or die "could not resume the WAL writer: $!";
		die "the WAL writer was never found waiting in its main loop"
		  if time() > $deadline;
		usleep(10_000);
	}
}

=pod

=item crash_with_walwriter_stopped(node, walwriter)

Crash the node with an immediate shutdown while its WAL writer is stopped
by stop_walwriter(), so that no WAL is written to pg_wal on the way down,
and then lose what a power failure would lose (lose_unsynced_wal()).
The postmaster is told to quit first, and then the WAL writer, which could
act on that only when continued, is killed, so that it never runs again
(the postmaster would kill it only after seconds).  Returns once the server
is down.

=cut

sub crash_with_walwriter_stopped
{
	my ($node, $walwriter) = @_;
	my $file = nvwal_file($node);
	my ($pm_pid) = split /\n/,
	  slurp_file($node->data_dir . '/postmaster.pid');

	kill('QUIT', $pm_pid) or die "could not signal the postmaster: $!";
	kill('KILL', $walwriter) or die "could not kill the WAL writer: $!";
	$node->stop('immediate', fail_ok => 1);
	die "the server did not stop after the crash"
	  if -e $node->data_dir . '/postmaster.pid';
	lose_unsynced_wal($node, $file);
	return;
}

=pod

=item nvwal_file(node)

The absolute path of the NVWAL file of a running node.

=cut

sub nvwal_file
{
	my ($node) = @_;
	my $path = $node->safe_psql('postgres', 'SHOW nvwal_path');
	die "the node uses no NVWAL file" if $path eq '';
	return $path =~ m{^/} ? $path : $node->data_dir . "/$path";
}

=pod

=item lose_unsynced_wal(node, file)

Lose, as a power failure would, the WAL that a crashed node had written to
the segment files in pg_wal but not yet synced.  Killing the server leaves
it in the operating system's page cache (and test clusters run with fsync
off), so that without this, WAL durable only in the NVWAL file would often
survive a crash even if start-up never wrote the file's tail to pg_wal.
The file's header says where the WAL synced to pg_wal ends; from there on,
the segment files of its timeline are overwritten with zeros.  Returns that
position as an LSN.

The header is read at the offsets of NvwalFileHeader in nv_xlog_buffer.c.

=cut

sub lose_unsynced_wal
{
	my ($node, $file) = @_;
	open(my $fh, '<', $file) or die "could not open $file: $!";
	binmode $fh;
	my $header;
	sysread($fh, $header, 64) == 64 or die "could not read $file: $!";
	close($fh);
	my ($magic, $version, $segsize, $timeline, $synced_upto) =
	  unpack('L< L< x[Q] x[Q] x[L] L< x[Q] Q< x[Q] Q<', $header);
	die "$file is not an NVWAL file of format 1"
	  unless $magic == 0x4C41574E && $version == 1;
	die "$file records no synced position" if $synced_upto == 0;

	my $segs_per_id = int(2**32 / $segsize);
	my $segno = int($synced_upto / $segsize);
	my $first = sprintf('%08X%08X%08X',
		$timeline,
		int($segno / $segs_per_id),
		$segno % $segs_per_id);
	my $pg_wal = $node->data_dir . '/pg_wal';
	opendir(my $dh, $pg_wal) or die "could not open $pg_wal: $!";
	my @segments =
	  grep { /^[0-9A-F]{24}$/ && substr($_, 0, 8) eq substr($first, 0, 8) }
	  readdir($dh);
	closedir($dh);

	foreach my $segment (sort @segments)
	{
		next if $segment lt $first;
		my $from = $segment eq $first ? $synced_upto % $segsize : 0;
		open(my $seg, '+<', "$pg_wal/$segment")
		  or die "could not open $pg_wal/$segment: $!";
		binmode $seg;
		my $size = -s $seg;
		sysseek($seg, $from, 0) or die "could not seek in $segment: $!";
		while ($from < $size)
		{
			my $n = $size - $from < 65536 ? $size - $from : 65536;
			syswrite($seg, "\0" x $n) == $n
			  or die "could not write $segment: $!";
			$from += $n;
		}
		close($seg) or die "could not close $segment: $!";
	}
	return sprintf('%X/%X', $synced_upto >> 32, $synced_upto & 0xFFFFFFFF);
}

=pod

=back

=cut

1;
