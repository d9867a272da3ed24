/*-------------------------------------------------------------------------
 *
 * nvwal_file.c
 *		pg_basebackup's nvwal format: a prepared non-volatile WAL buffer
 *		file for the new cluster.
 *
 * With --format=nvwal, pg_basebackup writes a plain backup and, at
 * --nvwal-path, a new non-volatile WAL buffer file for the cluster the
 * backup becomes, then sets nvwal_path and nvwal_size in that cluster's
 * postgresql.auto.conf, so that it runs with NVWAL from its first start.
 *
 * The file is built the way the server builds one (see nvwal_create_file()
 * in nv_xlog_buffer.c): under a temporary name that is locked against other
 * builders, with all its space allocated, so that a full file system shows
 * here and not as a SIGBUS in the server, with a header that says the ring
 * holds nothing pg_wal lacks, and linked into place only where nothing
 * exists yet, so that no file a server may need is ever replaced.  It holds
 * no WAL: what -X stream or fetch receives goes to pg_wal as always, and a
 * start-up from the backup gets the rest from the source.  The server takes
 * the file for its own because the header carries the source's system
 * identifier, which the copy shares.
 *
 * A file inside the target data directory is not built here: the server
 * creates it at first start, and the backup stays what its manifest
 * describes.
 *
 * Portions Copyright (c) 1996-2025, PostgreSQL Global Development Group
 *
 * IDENTIFICATION
 *		  src/bin/pg_basebackup/nvwal_file.c
 *-------------------------------------------------------------------------
 */

#include "postgres_fe.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/nv_xlog_buffer.h"
#include "common/file_perm.h"
#include "common/file_utils.h"
#include "common/logging.h"
#include "nvwal_file.h"

/* Where the file goes (absolute), and what the setting says */
static char *target_path = NULL;
static char *setting_path = NULL;
static bool target_in_datadir = false;

/* What a failed backup must remove */
static char *tmp_path = NULL;
static bool file_created = false;

/*
 * Parse a size as nvwal_size takes it: a number of megabytes, with an
 * optional unit MB or GB.  Returns false if it is not one.
 */
bool
nvwal_parse_size(const char *value, int *size_mb)
{
	char	   *end;
	long		n;

	errno = 0;
	n = strtol(value, &end, 10);
	if (errno != 0 || end == value || n <= 0)
		return false;
	while (*end == ' ')
		end++;
	if (strcmp(end, "GB") == 0)
	{
		if (n > INT_MAX / 1024)
			return false;
		n *= 1024;
	}
	else if (*end != '\0' && strcmp(end, "MB") != 0)
		return false;
	if (n > INT_MAX)
		return false;
	*size_mb = (int) n;
	return true;
}

/*
 * A setting of the source, over a replication connection.  Returns the
 * value, or NULL if the server has no such setting or does not let this
 * role see it.
 *
 * SHOW of one name would do, but a server that does not know the name logs
 * an error for it, and a vanilla server would then log one at every backup.
 * SHOW ALL lists what this role may see and never fails for a missing name.
 * Replication connections take SHOW from version 10 on.
 */
static char *
show_setting(PGconn *conn, const char *name)
{
	PGresult   *res;
	char	   *value = NULL;

	if (PQserverVersion(conn) < 100000)
		return NULL;
	res = PQexec(conn, "SHOW ALL");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQnfields(res) >= 2)
	{
		for (int i = 0; i < PQntuples(res); i++)
		{
			if (strcmp(PQgetvalue(res, i, 0), name) == 0)
			{
				value = pg_strdup(PQgetvalue(res, i, 1));
				break;
			}
		}
	}
	PQclear(res);
	return value;
}

/*
 * The source's nvwal_size, or the default when the source has no such
 * setting (a server without this feature).
 */
int
nvwal_source_size(PGconn *conn)
{
	char	   *value = show_setting(conn, "nvwal_size");
	int			size_mb;

	if (value == NULL || !nvwal_parse_size(value, &size_mb))
		size_mb = NVWAL_SIZE_DEFAULT_MB;
	pg_free(value);
	return size_mb;
}

/*
 * Without the nvwal format, the copy keeps the source's settings.  A
 * relative nvwal_path then names a file of the copy's own; an absolute one
 * names the source's file, which the copy must not use.
 *
 * Roles that may not see nvwal_path are told nothing.
 */
void
nvwal_warn_inherited_path(PGconn *conn)
{
	char	   *value = show_setting(conn, "nvwal_path");

	if (value != NULL && is_absolute_path(value))
	{
		pg_log_warning("the new cluster will be set up to use the source server's non-volatile WAL buffer file \"%s\"",
					   value);
		pg_log_warning_detail("The source's \"nvwal_path\" is an absolute path, and the backup keeps the source's settings.");
		pg_log_warning_hint("Use --format=nvwal with --nvwal-path, or change \"nvwal_path\" of the new cluster before starting it.");
	}
	pg_free(value);
}

/* Refuse a size the server would refuse, before anything is written */
void
nvwal_check_size(int size_mb, int wal_segment_size)
{
	int			segment_mb = wal_segment_size / (1024 * 1024);

	if (segment_mb == 0 || 2 * segment_mb > NVWAL_SIZE_MAX_MB)
		pg_fatal("the nvwal format cannot be used with a WAL segment size of %d bytes",
				 wal_segment_size);
	if (size_mb % segment_mb != 0 || size_mb < 2 * segment_mb ||
		size_mb > NVWAL_SIZE_MAX_MB)
	{
		pg_log_error("invalid non-volatile WAL buffer size: %dMB", size_mb);
		pg_log_error_detail("The size must be a multiple of the WAL segment size (%dMB), at least %dMB and at most %dMB.",
							segment_mb, 2 * segment_mb, NVWAL_SIZE_MAX_MB);
		exit(1);
	}
}

/*
 * Remember where the file goes.  A relative path is taken relative to the
 * target data directory, as the server takes nvwal_path.  A path outside
 * the data directory must be free: checked here, before the backup starts,
 * and again when the file is linked into place.
 */
void
nvwal_set_target(const char *path, const char *basedir)
{
	char	   *datadir = make_absolute_path(basedir);
	struct stat st;

	setting_path = pg_strdup(path);
	canonicalize_path(setting_path);
	if (is_absolute_path(setting_path))
		target_path = pg_strdup(setting_path);
	else
		target_path = psprintf("%s/%s", datadir, setting_path);
	canonicalize_path(target_path);
	canonicalize_path(datadir);

	if (strcmp(target_path, datadir) == 0)
		pg_fatal("non-volatile WAL buffer file \"%s\" cannot be the data directory",
				 path);
	target_in_datadir = path_is_prefix_of_path(datadir, target_path);
	pg_free(datadir);
	if (target_in_datadir)
		return;

	if (lstat(target_path, &st) == 0)
	{
		pg_log_error("non-volatile WAL buffer file \"%s\" already exists",
					 target_path);
		pg_log_error_hint("pg_basebackup never replaces such a file, which a server may need.  Choose another --nvwal-path, or remove the file if no server uses it.");
		exit(1);
	}
	if (errno != ENOENT)
		pg_fatal("could not stat file \"%s\": %m", target_path);
}

/*
 * Refuse a file inside a tablespace directory or the WAL directory of the
 * new cluster: those hold only what the server puts there.
 */
void
nvwal_refuse_inside(const char *dir, bool is_waldir)
{
	char	   *absdir = make_absolute_path(dir);

	canonicalize_path(absdir);
	if (path_is_prefix_of_path(absdir, target_path))
	{
		if (is_waldir)
			pg_log_error("non-volatile WAL buffer file \"%s\" cannot be inside the WAL directory \"%s\"",
						 target_path, absdir);
		else
			pg_log_error("non-volatile WAL buffer file \"%s\" cannot be inside tablespace directory \"%s\"",
						 target_path, absdir);
		pg_log_error_hint("Choose a --nvwal-path outside the new cluster's tablespace and WAL directories.");
		exit(1);
	}
	pg_free(absdir);
}

#ifdef USE_LIBPMEM

/*
 * Open and lock the temporary file, creating it if absent.  One that a
 * crashed pg_basebackup or server left behind is rebuilt from nothing, as
 * the server does; one that is locked is being built by someone else.
 */
static int
open_locked_tmp(const char *path)
{
	int			fd;
	struct stat st;

	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | PG_BINARY,
			  pg_file_create_mode);
	if (fd < 0)
		pg_fatal("could not create file \"%s\": %m", path);
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
	{
		if (errno == EWOULDBLOCK)
		{
			pg_log_error("non-volatile WAL buffer file \"%s\" is being created by another process",
						 target_path);
			pg_log_error_hint("Wait for that server or pg_basebackup to finish, or choose another --nvwal-path.");
			exit(1);
		}
		pg_fatal("could not lock file \"%s\": %m", path);
	}
	tmp_path = pg_strdup(path);
	if (fstat(fd, &st) != 0)
		pg_fatal("could not stat file \"%s\": %m", path);
	if (!S_ISREG(st.st_mode) || st.st_nlink > 1)
	{
		tmp_path = NULL;		/* not ours to remove */
		pg_log_error("file \"%s\" is not a plain file of its own", path);
		pg_log_error_hint("Remove it if no server uses it.");
		exit(1);
	}
	return fd;
}

/* Allocate the file's space and write its header */
static void
build_file(int fd, const char *path, uint64 system_identifier,
		   int size_mb, int wal_segment_size)
{
	off_t		filesize = NVWAL_HEADER_SIZE + (off_t) size_mb * 1024 * 1024;
	PGAlignedXLogBlock block;
	NvwalFileHeader *hdr = (NvwalFileHeader *) block.data;
	int			rc;

	StaticAssertStmt(sizeof(NvwalFileHeader) <= NVWAL_HEADER_SIZE,
					 "NvwalFileHeader must fit in its block");

	if (ftruncate(fd, 0) != 0)
		pg_fatal("could not truncate file \"%s\": %m", path);
	rc = posix_fallocate(fd, 0, filesize);
	if (rc != 0)
	{
		errno = rc;
		pg_log_error("could not allocate %lld bytes for file \"%s\": %m",
					 (long long) filesize, path);
		pg_log_error_hint("The file system of --nvwal-path needs room for the whole file: the header and a ring of --nvwal-size.");
		exit(1);
	}

	memset(block.data, 0, sizeof(block.data));
	hdr->magic = NVWAL_MAGIC;
	hdr->format_version = NVWAL_FORMAT_VERSION;
	hdr->system_identifier = system_identifier;
	do
	{
		if (!pg_strong_random(&hdr->file_id, sizeof(hdr->file_id)))
			pg_fatal("could not generate random file identifier");
	} while (hdr->file_id == 0);
	hdr->xlog_blcksz = XLOG_BLCKSZ;
	hdr->wal_segment_size = wal_segment_size;
	hdr->ring_size = (uint64) size_mb * 1024 * 1024;
	hdr->clean = 1;

	errno = 0;
	if (pg_pwrite(fd, block.data, NVWAL_HEADER_SIZE, 0) != NVWAL_HEADER_SIZE)
	{
		if (errno == 0)
			errno = ENOSPC;
		pg_fatal("could not write file \"%s\": %m", path);
	}
}

#endif							/* USE_LIBPMEM */

/*
 * Build the file and link it into place.  Its contents and size are made
 * durable before it can be found at its path, and its name after that.
 */
void
nvwal_prepare_file(uint64 system_identifier, int size_mb,
				   int wal_segment_size, bool do_sync)
{
#ifdef USE_LIBPMEM
	char	   *tmp;
	char		parent[MAXPGPATH];
	struct stat st;
	int			fd;

	if (target_in_datadir)
		return;

	strlcpy(parent, target_path, sizeof(parent));
	get_parent_directory(parent);
	if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
	{
		pg_log_error("directory \"%s\" of non-volatile WAL buffer file \"%s\" does not exist",
					 parent, target_path);
		pg_log_error_hint("Create the directory on the persistent-memory file system first.");
		exit(1);
	}

	tmp = psprintf("%s" NVWAL_TMP_SUFFIX, target_path);
	fd = open_locked_tmp(tmp);
	build_file(fd, tmp, system_identifier, size_mb, wal_segment_size);
	if (do_sync && fsync(fd) != 0)
		pg_fatal("could not fsync file \"%s\": %m", tmp);

	if (link(tmp, target_path) != 0)
	{
		if (errno == EEXIST)
		{
			pg_log_error("non-volatile WAL buffer file \"%s\" already exists",
						 target_path);
			pg_log_error_detail("It was created while the backup started.");
			pg_log_error_hint("pg_basebackup never replaces such a file, which a server may need.  Choose another --nvwal-path, or remove the file if no server uses it.");
			exit(1);
		}
		pg_log_error("could not link file \"%s\" to \"%s\": %m",
					 tmp, target_path);
		pg_log_error_hint("The file system of --nvwal-path must support hard links.");
		exit(1);
	}
	file_created = true;
	if (unlink(tmp) != 0)
		pg_fatal("could not remove file \"%s\": %m", tmp);
	tmp_path = NULL;
	close(fd);

	if (do_sync && fsync_fname(parent, true) != 0)
		exit(1);
	pg_free(tmp);
#else
	pg_fatal("the nvwal format is not supported by this build");
#endif
}

/*
 * Append the settings to postgresql.auto.conf of the new cluster, after the
 * source's own lines, so that they win over those.  The caller syncs the
 * data directory afterwards.
 */
void
nvwal_write_settings(const char *basedir, int size_mb)
{
	char	   *conf = psprintf("%s/postgresql.auto.conf", basedir);
	char	   *escaped = escape_single_quotes_ascii(setting_path);
	FILE	   *fp;

	if (escaped == NULL)
		pg_fatal("out of memory");
	fp = fopen(conf, "a");
	if (fp == NULL)
		pg_fatal("could not open file \"%s\": %m", conf);
	if (fprintf(fp, "nvwal_path = '%s'\nnvwal_size = '%dMB'\n",
				escaped, size_mb) < 0 || fclose(fp) != 0)
		pg_fatal("could not write file \"%s\": %m", conf);
	free(escaped);
	pg_free(conf);
}

/*
 * At exit after a failure: remove the temporary file we hold, and the file
 * we made unless told to keep what the backup wrote.
 */
void
nvwal_cleanup(bool noclean)
{
	if (tmp_path != NULL)
		(void) unlink(tmp_path);
	if (!file_created)
		return;
	if (noclean)
		pg_log_info("non-volatile WAL buffer file \"%s\" not removed at user's request",
					target_path);
	else
	{
		pg_log_info("removing non-volatile WAL buffer file \"%s\"",
					target_path);
		if (unlink(target_path) != 0)
			pg_log_error("could not remove file \"%s\": %m", target_path);
	}
}
