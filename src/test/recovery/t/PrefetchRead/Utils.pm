
# Copyright (c) 2026, PostgreSQL Global Development Group

=pod

=head1 NAME

PrefetchRead::Utils - helpers for the tests of recovery prefetch with reads

=head1 SYNOPSIS

  use FindBin;
  use lib $FindBin::RealBin;
  use PrefetchRead::Utils;

  my $primary = primary_with_table('primary', 50000, archiving => 1);
  my $standby = read_mode_standby($primary, 'standby', has_restoring => 1);
  ...
  my $segment = archive_current_segment($primary);

=head1 DESCRIPTION

Most tests of recovery_prefetch_method = read replay updates spread over
one table, on a standby or a restored backup whose buffer pool is far
smaller than the table, so that redo needs blocks the look-ahead has to
read.  These helpers set that up, and wait for WAL to reach the archive.

=cut

package PrefetchRead::Utils;

use strict;
use warnings FATAL => 'all';

use Exporter 'import';
use Fcntl;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(primary_with_table read_mode_standby archive_current_segment
  direct_io_supported poll_session die_with_failures $log_failures);

=pod

=over

=item $log_failures

A pattern for log_contains() that matches what an assertion failure, a
PANIC, a leaked buffer pin or I/O handle, a child process that crashed or
exited with an error code above 1, a startup process that failed, or an
immediate shutdown leaves in a server log.

=cut

our $log_failures =
  'TRAP:|PANIC:|buffer refcount leak|leaked AIO handle|resource was not closed|'
  . '\(PID \d+\) (?:was terminated by|exited with exit code (?:[2-9]|\d\d))|'
  . 'due to startup process failure|abnormal database system shutdown';

=pod

=item die_with_failures(node, message)

Die with the message, followed by the lines of the node's server log that
match $log_failures: a wait for replay that times out because the startup
process failed or crashed then says so.

=cut

sub die_with_failures
{
	my ($node, $message) = @_;
	my @lines =
	  grep { /$log_failures/ } split /\n/, slurp_file($node->logfile);
	die $message
	  . (
		@lines
		? "\nfailures in the log of node \""
		  . $node->name . "\":\n"
		  . join("\n", @lines)
		: '');
}

=pod

=item poll_session(session, sql)

Run a query in a background_psql session until it returns true, or time
out (returns false).  Tests use it where a new connection could need a
block that a held read keeps from it.

=cut

sub poll_session
{
	my ($session, $sql) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if $session->query_safe($sql) eq 't';
		usleep(100_000);
	}
	return 0;
}

=pod

=item direct_io_supported()

True if a file in the test's temporary directory can be opened with
O_DIRECT, as debug_io_direct = data needs (tmpfs before Linux 6.6 cannot).
Tests skip what needs direct I/O otherwise, as upstream's 004_io_direct does.

=cut

sub direct_io_supported
{
	return 0 unless defined &O_DIRECT;
	my $probe = "$PostgreSQL::Test::Utils::tmp_check/direct_io_probe";
	my $ok = sysopen(my $fh, $probe, O_RDWR | O_DIRECT | O_CREAT);
	if ($ok)
	{
		close($fh);
		unlink($probe);
	}
	return $ok ? 1 : 0;
}

=pod

=item primary_with_table(name, rows, %params)

Start a primary that allows streaming, with a table t (id int primary key,
val int, pad text) of the given number of rows, and take a base backup of
it named 'backup'.  Full-page writes are off, so that redo reads the blocks
it changes rather than restoring them from images, and autovacuum is off,
so that only the test writes WAL for the table.

Parameters: archiving => 1 archives the primary's WAL; extra_conf adds
lines to its postgresql.conf; setup_sql runs after the table is filled,
before the backup.

=cut

sub primary_with_table
{
	my ($name, $rows, %params) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(
		allows_streaming => 1,
		has_archiving => $params{archiving} // 0);
	$node->append_conf('postgresql.conf',
		"full_page_writes = off\nautovacuum = off\n"
		  . ($params{extra_conf} // ''));
	$node->start;
	$node->safe_psql('postgres',
			"CREATE TABLE t (id int PRIMARY KEY, val int, pad text);\n"
		  . "INSERT INTO t SELECT g, 0, repeat('x', 100) "
		  . "FROM generate_series(1, $rows) g;");
	$node->safe_psql('postgres', $params{setup_sql})
	  if defined $params{setup_sql};
	$node->backup('backup');
	return $node;
}

=pod

=item read_mode_standby(primary, name, %params)

Create, but do not start, a node from the primary's backup 'backup' (or
the one named by the parameter backup) that replays with
recovery_prefetch_method = read in a 1MB buffer pool.  The other
parameters are passed to init_from_backup (has_streaming, has_restoring,
...), except extra_conf, which adds lines to its postgresql.conf.

=cut

sub read_mode_standby
{
	my ($primary, $name, %params) = @_;
	my $extra_conf = delete $params{extra_conf} // '';
	my $backup = delete $params{backup} // 'backup';
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary, $backup, %params);
	$node->append_conf('postgresql.conf',
			"shared_buffers = 1MB\nrecovery_prefetch = on\n"
		  . "recovery_prefetch_method = read\n"
		  . $extra_conf);
	return $node;
}

=pod

=item archive_current_segment(node)

Switch the node to a new WAL segment and wait until the one it was writing
has been archived; return that segment's name.

=cut

sub archive_current_segment
{
	my ($node) = @_;
	my $segment = $node->safe_psql('postgres',
		'SELECT pg_walfile_name(pg_current_wal_lsn())');
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	$node->poll_query_until('postgres',
		"SELECT last_archived_wal >= '$segment' FROM pg_stat_archiver")
	  or die "timed out waiting for $segment to be archived";
	return $segment;
}

=pod

=back

=cut

1;
