
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
  stop_walwriter crash_with_walwriter_stopped);

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
must write back WAL (walsenders, checkpoints, pg_current_wal_flush_lsn(),
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
by stop_walwriter(), so that no WAL is written to pg_wal on the way down.
The postmaster is told to quit first, and then the WAL writer, which could
act on that only when continued, is killed, so that it never runs again
(the postmaster would kill it only after seconds).  Returns once the server
is down.

=cut

sub crash_with_walwriter_stopped
{
	my ($node, $walwriter) = @_;
	my ($pm_pid) = split /\n/,
	  slurp_file($node->data_dir . '/postmaster.pid');

	kill('QUIT', $pm_pid) or die "could not signal the postmaster: $!";
	kill('KILL', $walwriter) or die "could not kill the WAL writer: $!";
	$node->stop('immediate', fail_ok => 1);
	return;
}

=pod

=back

=cut

1;
