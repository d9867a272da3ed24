/*-------------------------------------------------------------------------
 *
 * nv_xlog_buffer.c
 *		Non-volatile WAL buffer: WAL buffers in a persistent-memory file.
 *
 * With nvwal_path set, xlog.c keeps its WAL buffer pages in a file mapped
 * with libpmem instead of in shared memory.  A commit is then durable once
 * its WAL has been written back from the CPU caches to the mapping, with no
 * write() or fsync() on the commit path.  The file is a write-back cache in
 * front of pg_wal, not a second home for WAL: the WAL writer copies
 * completed pages to the segment files and fsyncs them as usual, and a ring
 * page is reused only after that.  After a crash, the durable tail that is
 * in the ring but not yet in pg_wal is written to pg_wal before recovery
 * begins, so recovery, archiving and base backups keep reading segment
 * files.
 *
 * This file owns the file itself: creating and validating it at start-up
 * (refusing to start whenever doing so could lose committed WAL), its
 * header, the flush primitives, the salvage after a crash, and the
 * statistics.  How the ring is used as WAL buffers is in xlog.c; the design
 * is described in README.nvwal.
 *
 * The mapping is created by the postmaster (or a single-user backend) and
 * inherited by every child process at the same address, which is why
 * EXEC_BACKEND builds do not support it.
 *
 * Portions Copyright (c) 1996-2025, PostgreSQL Global Development Group
 * Portions Copyright (c) 1994, Regents of the University of California
 *
 * src/backend/access/transam/nv_xlog_buffer.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef USE_LIBPMEM
#include <libpmem.h>
#endif

#include "access/nv_xlog_buffer.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogarchive.h"
#include "catalog/pg_authid.h"
#include "common/file_perm.h"
#include "common/file_utils.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "portability/instr_time.h"
#include "storage/fd.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc_hooks.h"
#include "utils/pgstat_internal.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* GUCs */
char	   *nvwal_path = NULL;
int			nvwal_size = 256;

#ifdef USE_LIBPMEM
bool		NvwalActive = false;
#endif

#define NVWAL_MAGIC				0x4C41574E	/* "NWAL" */
#define NVWAL_FORMAT_VERSION	1

/* The header occupies the first WAL block; the ring follows, block-aligned */
#define NVWAL_HEADER_SIZE		XLOG_BLCKSZ

/*
 * The file header.  The fields are written when the file is created, except
 * file_id, which every run that writes WAL to the file renews, and the last
 * group, which changes while the server runs.  Every field that changes is
 * 8 bytes wide and aligned so that each store is atomic on persistent
 * memory, and they are persisted one at a time in an order that keeps the
 * file safe to salvage after a crash at any instant.
 */
typedef struct NvwalFileHeader
{
	uint32		magic;
	uint32		format_version;
	uint64		system_identifier;
	uint64		file_id;		/* random, per run; also kept in pg_control */
	uint32		xlog_blcksz;
	uint32		wal_segment_size;
	uint64		ring_size;		/* bytes of WAL pages after the header */

	uint64		timeline;		/* timeline of the WAL written to the ring */
	uint64		clean;			/* 1: the ring holds nothing pg_wal lacks */
	uint64		synced_upto;	/* WAL before this is fsynced in pg_wal */
	uint64		previous_file_id;	/* file_id before a renewal pg_control may
									 * not have recorded yet, else 0 */
} NvwalFileHeader;

/* Statistics and state other processes show in pg_stat_nvwal */
typedef struct NvwalShared
{
	pg_atomic_uint64 flushes;
	pg_atomic_uint64 flush_time;	/* nanoseconds, with track_wal_io_timing */
	pg_atomic_uint64 written;	/* bytes written back to segment files */
	pg_atomic_uint64 ring_full;
	pg_atomic_uint64 stats_reset;	/* TimestampTz of the last reset */
	bool		is_pmem;
} NvwalShared;

static NvwalShared *NvwalShmem = NULL;

/* The mapping; set in the postmaster and inherited by its children */
static char *nvwal_map = NULL;
static bool nvwal_is_pmem = false;
static NvwalFileHeader *nvwal_header = NULL;
static char *nvwal_ring = NULL;
static Size nvwal_ring_size = 0;

/* Path of the file relative to the data directory, if it lies inside it */
static char nvwal_datadir_relpath[MAXPGPATH];

/*
 * Flushes of the ring by this process, and their time in nanoseconds, not
 * yet added to NvwalShmem's counters.
 */
static uint64 nvwal_pending_flushes = 0;
static uint64 nvwal_pending_flush_time = 0;

#ifdef USE_LIBPMEM
static size_t nvwal_map_len = 0;
static int	nvwal_lock_fd = -1;

/* Message written by the SIGBUS handler, prepared while it is safe */
static char nvwal_sigbus_msg[MAXPGPATH + 256];
static char nvwal_sigbus_adrerr_msg[MAXPGPATH + 256];
static int	nvwal_sigbus_msg_len = 0;
static int	nvwal_sigbus_adrerr_msg_len = 0;
static struct sigaction nvwal_prev_sigbus;
#endif


/*
 * GUC check hook: refuse the setting where it cannot work.
 */
bool
check_nvwal_path(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
#if !defined(USE_LIBPMEM)
	GUC_check_errcode(ERRCODE_FEATURE_NOT_SUPPORTED);
	GUC_check_errmsg("non-volatile WAL buffer is not supported by this build");
	GUC_check_errhint("Build PostgreSQL with libpmem (meson -Dlibpmem=enabled or configure --with-libpmem), or leave \"nvwal_path\" empty.");
	return false;
#elif defined(EXEC_BACKEND)
	GUC_check_errcode(ERRCODE_FEATURE_NOT_SUPPORTED);
	GUC_check_errmsg("non-volatile WAL buffer is not supported on this platform");
	GUC_check_errhint("Leave \"nvwal_path\" empty.");
	return false;
#else
	return true;
#endif
}

/*
 * Is NVWAL configured for this process?  The bootstrap process writes its
 * WAL directly and never uses it.
 */
bool
NvwalWanted(void)
{
	return nvwal_path != NULL && nvwal_path[0] != '\0' &&
		!IsBootstrapProcessingMode();
}

/* The ring size asked for by nvwal_size, in bytes */
Size
NvwalRingSize(void)
{
	return (Size) nvwal_size * 1024 * 1024;
}

Size
NvwalShmemSize(void)
{
	return sizeof(NvwalShared);
}

void
NvwalShmemInit(void)
{
	bool		found;

	NvwalShmem = ShmemInitStruct("NVWAL statistics", sizeof(NvwalShared),
								 &found);
	if (!found)
	{
		pg_atomic_init_u64(&NvwalShmem->flushes, 0);
		pg_atomic_init_u64(&NvwalShmem->flush_time, 0);
		pg_atomic_init_u64(&NvwalShmem->written, 0);
		pg_atomic_init_u64(&NvwalShmem->ring_full, 0);
		pg_atomic_init_u64(&NvwalShmem->stats_reset, GetCurrentTimestamp());
		NvwalShmem->is_pmem = false;
	}
}

/*
 * pg_stat_reset_shared('nvwal'): zero the counters.  The positions, the size
 * and is_pmem describe the current state and are kept.  As for the recovery
 * prefetch counters, an increment racing with the reset may survive it.
 */
void
NvwalResetStats(void)
{
	pg_atomic_write_u64(&NvwalShmem->flushes, 0);
	pg_atomic_write_u64(&NvwalShmem->flush_time, 0);
	pg_atomic_write_u64(&NvwalShmem->written, 0);
	pg_atomic_write_u64(&NvwalShmem->ring_full, 0);
	pg_atomic_write_u64(&NvwalShmem->stats_reset, GetCurrentTimestamp());
}

#ifdef USE_LIBPMEM

/*
 * Write back the CPU cache lines of a range of the mapping, without
 * waiting.  Outside persistent memory, msync() is the only thing that
 * makes the range durable.
 */
static void
nvwal_flush_bytes(const char *addr, Size len)
{
	int			rc;

	if (nvwal_is_pmem)
	{
		pmem_flush(addr, len);
		return;
	}

	pgstat_report_wait_start(WAIT_EVENT_WAL_SYNC);
	rc = pmem_msync(addr, len);
	pgstat_report_wait_end();
	if (rc != 0)
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not msync non-volatile WAL buffer file \"%s\": %m",
						nvwal_path)));
}

static void
nvwal_drain(void)
{
	if (nvwal_is_pmem)
		pmem_drain();
}

static void
nvwal_persist(const void *addr, Size len)
{
	nvwal_flush_bytes(addr, len);
	nvwal_drain();
}

/* Store one 8-byte field of the header and persist it */
static void
nvwal_header_set(uint64 *field, uint64 value)
{
	*field = value;
	nvwal_persist(field, sizeof(uint64));
}

/*
 * A media error on the mapping raises SIGBUS (BUS_MCEERR_*, or BUS_ADRERR on
 * kernels that report a bad block as an I/O error), and so does a page past
 * the end of a file truncated under us, or one the file system had no space
 * for (BUS_ADRERR).
 * Report it, naming the file, and abort; the postmaster then restarts, and if
 * the start-up process hits the same error while salvaging, the server stops
 * instead of looping.  Only async-signal-safe calls here: the messages were
 * formatted earlier.
 */
static void
nvwal_sigbus_handler(int signo, siginfo_t *info, void *context)
{
	char	   *addr = (char *) info->si_addr;

	if (nvwal_map != NULL && addr >= nvwal_map &&
		addr < nvwal_map + nvwal_map_len)
	{
		const char *msg = nvwal_sigbus_msg;
		int			len = nvwal_sigbus_msg_len;

#ifdef BUS_ADRERR
		if (info->si_code == BUS_ADRERR)
		{
			msg = nvwal_sigbus_adrerr_msg;
			len = nvwal_sigbus_adrerr_msg_len;
		}
#endif
		if (write(STDERR_FILENO, msg, len) < 0)
			 /* nothing more we can do */ ;
		abort();
	}

	/* Not ours: let the previous disposition deal with it on return */
	sigaction(SIGBUS, &nvwal_prev_sigbus, NULL);
}

/* Format a message for the SIGBUS handler into buf; returns its length */
static int
nvwal_format_sigbus_msg(char *buf, size_t size, const char *error,
						const char *cause, const char *hint)
{
	int			len;

	len = snprintf(buf, size,
				   "PANIC:  %s accessing non-volatile WAL buffer file \"%s\"%s\n"
				   "HINT:  %s  WAL that was committed but is not yet in pg_wal is only in that file.\n",
				   error, nvwal_path, cause, hint);
	return Min(len, (int) size - 1);
}

static void
nvwal_install_sigbus_handler(void)
{
	struct sigaction act;

	nvwal_sigbus_msg_len =
		nvwal_format_sigbus_msg(nvwal_sigbus_msg, sizeof(nvwal_sigbus_msg),
								"media error (SIGBUS)", "",
								"Check the persistent-memory device and its file system.");
	nvwal_sigbus_adrerr_msg_len =
		nvwal_format_sigbus_msg(nvwal_sigbus_adrerr_msg,
								sizeof(nvwal_sigbus_adrerr_msg),
								"SIGBUS", ": no storage backs the page (the file was truncated, its file system has no space for it, or a bad block)",
								"Check that the file has its full size and that its file system has free space, and check the device.");

	memset(&act, 0, sizeof(act));
	act.sa_sigaction = nvwal_sigbus_handler;
	act.sa_flags = SA_SIGINFO;
	sigemptyset(&act.sa_mask);
	if (sigaction(SIGBUS, &act, &nvwal_prev_sigbus) != 0)
		elog(FATAL, "could not install SIGBUS handler: %m");
}

/* A random identifier for the file's header and pg_control; never 0 */
static uint64
nvwal_random_id(void)
{
	uint64		id;

	do
	{
		if (!pg_strong_random(&id, sizeof(id)))
			ereport(FATAL,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate random file identifier for non-volatile WAL buffer")));
	} while (id == 0);
	return id;
}

/*
 * Open 'path' and lock it against other servers.  Whoever removes or
 * replaces the file does so while holding its lock, so the file we locked may
 * have been unlinked between our open() and flock(): then the path names
 * another file, or none, and we look again.  Once the path is seen to name
 * the locked file, it keeps naming it while we hold the lock, and a mapping
 * made through the path maps that file.
 *
 * A temporary file is created if absent.  One that is not a plain file of its
 * own (a symbolic link, or a hard link that a crash between installing a new
 * file and removing its temporary name left behind) is removed, not used.
 *
 * Returns -1 if the file does not exist and 'temporary' is false.
 */
static int
nvwal_open_locked(const char *path, bool temporary)
{
	for (;;)
	{
		int			fd;
		struct stat fst;
		struct stat pst;

		fd = open(path, O_RDWR | O_CLOEXEC | PG_BINARY |
				  (temporary ? O_CREAT | O_NOFOLLOW : 0),
				  pg_file_create_mode);
		if (fd < 0 && temporary && errno == ELOOP)
		{
			if (unlink(path) != 0 && errno != ENOENT)
				ereport(FATAL,
						(errcode_for_file_access(),
						 errmsg("could not remove file \"%s\": %m", path)));
			continue;
		}
		if (fd < 0)
		{
			if (errno == ENOENT && !temporary)
				return -1;
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not open non-volatile WAL buffer file \"%s\": %m",
							path),
					 errhint("\"nvwal_path\" must name a file the server's operating system user can read and write.")));
		}

		if (temporary)
		{
			if (fstat(fd, &fst) != 0)
				ereport(FATAL,
						(errcode_for_file_access(),
						 errmsg("could not stat file \"%s\": %m", path)));
			if (!S_ISREG(fst.st_mode) || fst.st_nlink > 1)
			{
				close(fd);
				if (unlink(path) != 0 && errno != ENOENT)
					ereport(FATAL,
							(errcode_for_file_access(),
							 errmsg("could not remove file \"%s\": %m", path)));
				continue;
			}
		}

		if (flock(fd, LOCK_EX | LOCK_NB) != 0)
		{
			if (errno == EWOULDBLOCK)
				ereport(FATAL,
						(errcode(ERRCODE_OBJECT_IN_USE),
						 errmsg("non-volatile WAL buffer file \"%s\" is in use by another server",
								path),
						 errhint("Give every server its own \"nvwal_path\"; a relative path is taken relative to the data directory.")));
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not lock file \"%s\": %m", path)));
		}

		if (fstat(fd, &fst) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not stat file \"%s\": %m", path)));
		if (stat(path, &pst) == 0)
		{
			if (pst.st_dev == fst.st_dev && pst.st_ino == fst.st_ino)
				return fd;
		}
		else if (errno != ENOENT)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not stat file \"%s\": %m", path)));
		close(fd);
	}
}

/* nvwal_path with symbolic links resolved, into dst[MAXPGPATH] */
static void
nvwal_resolve_path(char *dst)
{
	char	   *resolved = realpath(nvwal_path, NULL);

	if (resolved == NULL)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not resolve path \"%s\": %m", nvwal_path)));
	strlcpy(dst, resolved, MAXPGPATH);
	free(resolved);
}

/* Make a new or removed name in the directory of 'path' durable. */
static void
nvwal_fsync_parent(const char *path)
{
	char		parent[MAXPGPATH];

	strlcpy(parent, path, sizeof(parent));
	get_parent_directory(parent);
	fsync_fname(parent[0] != '\0' ? parent : ".", true);
}

/*
 * Create a new file of the configured size with a fresh header, built under
 * a temporary name and then moved into place, so that a crash never leaves
 * a file without a valid header at nvwal_path.  previous_file_id is what
 * start-up may find in pg_control for a clean file (see NvwalRenewFileId()).
 *
 * To replace the file, which the caller has locked, the new one is renamed
 * over it (over the file a symbolic link names, if nvwal_path is one), so
 * that there is always a file at nvwal_path.  Otherwise it is linked into
 * place only where no file exists: renaming it could replace a file another
 * server has just created and locked.  Returns false if such a file appeared
 * meanwhile; the caller looks at that one instead.
 */
static bool
nvwal_create_file(Size ring_size, uint64 system_identifier,
				  uint64 previous_file_id, bool replace)
{
	char		target[MAXPGPATH];
	char		tmppath[MAXPGPATH];
	int			fd;
	char	   *map;
	size_t		maplen;
	int			is_pmem;
	NvwalFileHeader *hdr;
	bool		installed = true;

	if (replace)
		nvwal_resolve_path(target);
	else
		strlcpy(target, nvwal_path, sizeof(target));

	/*
	 * The temporary file is locked too, so that servers creating the file at
	 * the same time do not build it together.  One left behind by a crash is
	 * rebuilt from nothing.
	 */
	snprintf(tmppath, sizeof(tmppath), "%s" NVWAL_TMP_SUFFIX, target);
	fd = nvwal_open_locked(tmppath, true);
	if (ftruncate(fd, 0) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not truncate file \"%s\": %m", tmppath)));

	map = pmem_map_file(tmppath, NVWAL_HEADER_SIZE + ring_size,
						PMEM_FILE_CREATE, pg_file_create_mode,
						&maplen, &is_pmem);
	if (map == NULL)
	{
		int			save_errno = errno;

		(void) unlink(tmppath);
		errno = save_errno;
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not create non-volatile WAL buffer file \"%s\": %s",
						tmppath, pmem_errormsg()),
				 errhint("Check that the file system has room for %zu bytes and supports memory mapping.",
						 (size_t) (NVWAL_HEADER_SIZE + ring_size))));
	}

	hdr = (NvwalFileHeader *) map;
	memset(hdr, 0, NVWAL_HEADER_SIZE);
	hdr->magic = NVWAL_MAGIC;
	hdr->format_version = NVWAL_FORMAT_VERSION;
	hdr->system_identifier = system_identifier;
	hdr->file_id = nvwal_random_id();
	hdr->previous_file_id = previous_file_id;
	hdr->xlog_blcksz = XLOG_BLCKSZ;
	hdr->wal_segment_size = wal_segment_size;
	hdr->ring_size = ring_size;
	hdr->clean = 1;
	if (is_pmem)
		pmem_persist(hdr, NVWAL_HEADER_SIZE);
	else if (pmem_msync(hdr, NVWAL_HEADER_SIZE) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not msync file \"%s\": %m", tmppath)));
	pmem_unmap(map, maplen);

	/* Its size must be durable before it can be found at nvwal_path. */
	if (pg_fsync(fd) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", tmppath)));

	if (replace)
	{
		if (rename(tmppath, target) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not rename file \"%s\" to \"%s\": %m",
							tmppath, target)));
	}
	else if (link(tmppath, target) != 0)
	{
		int			save_errno = errno;
		struct stat st;
		bool		dangling;

		dangling = save_errno == EEXIST &&
			stat(target, &st) != 0 && errno == ENOENT &&
			lstat(target, &st) == 0 && S_ISLNK(st.st_mode);
		(void) unlink(tmppath);
		errno = save_errno;
		if (save_errno != EEXIST)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not link file \"%s\" to \"%s\": %m",
							tmppath, target),
					 errhint("The file system of \"nvwal_path\" must support hard links.")));
		if (dangling)
			ereport(FATAL,
					(errcode(ERRCODE_UNDEFINED_FILE),
					 errmsg("non-volatile WAL buffer file \"%s\" is a symbolic link to a file that does not exist",
							nvwal_path),
					 errhint("Set \"nvwal_path\" to the path the link points to, or remove the link.")));
		installed = false;
	}
	else if (unlink(tmppath) != 0 && errno != ENOENT)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", tmppath)));
	close(fd);
	nvwal_fsync_parent(target);

	if (installed)
		ereport(LOG,
				(errmsg("created non-volatile WAL buffer file \"%s\" with a ring of %dMB",
						nvwal_path, nvwal_size)));
	return installed;
}

/*
 * Open the file, lock it against other servers and read its header.
 * Returns false if it does not exist.
 */
static bool
nvwal_open_file(NvwalFileHeader *hdr, off_t *filesize)
{
	struct stat st;
	ssize_t		nread;

	nvwal_lock_fd = nvwal_open_locked(nvwal_path, false);
	if (nvwal_lock_fd < 0)
		return false;

	if (fstat(nvwal_lock_fd, &st) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", nvwal_path)));
	*filesize = st.st_size;

	memset(hdr, 0, sizeof(NvwalFileHeader));
	nread = pg_pread(nvwal_lock_fd, hdr, sizeof(NvwalFileHeader), 0);
	if (nread < 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": %m", nvwal_path)));
	if (nread != sizeof(NvwalFileHeader) || hdr->magic != NVWAL_MAGIC)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("file \"%s\" is not a non-volatile WAL buffer file",
						nvwal_path),
				 errhint("Set \"nvwal_path\" to a path where no file exists, so that the server creates one, or remove the file if it is not needed.")));
	if (hdr->format_version != NVWAL_FORMAT_VERSION)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("non-volatile WAL buffer file \"%s\" has format version %u, but the server expects %u",
						nvwal_path, hdr->format_version, NVWAL_FORMAT_VERSION),
				 errhint("Start the server version that wrote the file and shut it down cleanly, then set \"nvwal_path\" to a path where no file exists.")));
	return true;
}

static void
nvwal_close_file(void)
{
	if (nvwal_lock_fd >= 0)
		close(nvwal_lock_fd);
	nvwal_lock_fd = -1;
}

/*
 * Remember where the file is relative to the data directory, so that base
 * backups can leave it out.
 */
static void
nvwal_remember_datadir_path(void)
{
	char		path[MAXPGPATH];
	size_t		dlen = strlen(DataDir);

	strlcpy(path, nvwal_path, sizeof(path));
	canonicalize_path(path);
	nvwal_datadir_relpath[0] = '\0';
	if (!is_absolute_path(path))
	{
		/* "../nvwal" is relative to the data directory, but not inside it */
		if (!path_contains_parent_reference(path))
			strlcpy(nvwal_datadir_relpath, path, MAXPGPATH);
	}
	else if (strncmp(path, DataDir, dlen) == 0 && path[dlen] == '/')
		strlcpy(nvwal_datadir_relpath, path + dlen + 1, MAXPGPATH);
}

/*
 * Is the file inside the data directory once symbolic links are resolved?
 * A file reached through a symbolic link that a copy of the data directory
 * kept is the original server's file, not a copy of it.
 */
static bool
nvwal_file_really_in_datadir(void)
{
	char	   *file = realpath(nvwal_path, NULL);
	char	   *dir = realpath(DataDir, NULL);
	bool		inside = false;

	if (file != NULL && dir != NULL)
	{
		size_t		dlen = strlen(dir);

		inside = strncmp(file, dir, dlen) == 0 && file[dlen] == '/';
	}
	free(file);
	free(dir);
	return inside;
}

/*
 * The file may have been installed by a server that crashed before it made
 * that durable; make sure before WAL is committed in it.  It may also have
 * holes, if it was copied back with a tool that skips zeros (cp, tar -S or
 * rsync -S): allocate them now, so that a full file system is an error here
 * rather than a SIGBUS when an inserter first writes a page there.
 */
static void
nvwal_make_durable(off_t filesize)
{
	char		resolved[MAXPGPATH];

#ifdef HAVE_POSIX_FALLOCATE
	int			rc;

	/* tmpfs gives up with EINTR when a signal arrives; try again */
	do
	{
		rc = posix_fallocate(nvwal_lock_fd, 0, filesize);
	} while (rc == EINTR);

	/* Where the file system cannot allocate, holes stay (README.nvwal) */
	if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
	{
		errno = rc;
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not allocate space for non-volatile WAL buffer file \"%s\": %m",
						nvwal_path),
				 errhint("Free space on the file system of the file; do not remove the file.")));
	}
#endif

	if (pg_fsync(nvwal_lock_fd) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", nvwal_path)));
	nvwal_resolve_path(resolved);
	nvwal_fsync_parent(resolved);
}

/*
 * Refuse a file that belongs to another database system.  Even a clean one
 * is left alone, unless it lies inside this server's data directory: two
 * servers set up with one absolute path would otherwise take the file from
 * each other, and only after one of them crashed would the other refuse.
 * (A server whose nvwal_path points into another's data directory can lose
 * its clean file to that one, and then refuses to start.)  What to do
 * depends on whether this server needs its own file back ('expected') and
 * whether the other one needs this one.
 */
static void
nvwal_refuse_foreign_file(const NvwalFileHeader *hdr,
						  const ControlFileData *controlFile, bool expected)
{
	ereport(FATAL,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("non-volatile WAL buffer file \"%s\" belongs to another database system",
					nvwal_path),
			 expected ?
			 errdetail("The file's system identifier is %" PRIu64 ", but pg_control's is %" PRIu64 ".  This server did not shut down cleanly, and WAL it committed may exist only in the non-volatile WAL buffer file it used.",
					   hdr->system_identifier,
					   controlFile->system_identifier) :
			 hdr->clean != 0 ?
			 errdetail("The file's system identifier is %" PRIu64 ", but pg_control's is %" PRIu64 ".  The other system shut down cleanly, and the file holds no WAL it needs.",
					   hdr->system_identifier,
					   controlFile->system_identifier) :
			 errdetail("The file's system identifier is %" PRIu64 ", but pg_control's is %" PRIu64 ".  The other system did not shut down cleanly, and the file may hold WAL it needs.",
					   hdr->system_identifier,
					   controlFile->system_identifier),
			 expected ?
			 errhint("Restore the file this server used, or point \"nvwal_path\" to it, and start the server again.") :
			 hdr->clean != 0 ?
			 errhint("Give every server its own \"nvwal_path\" (a relative path is taken relative to the data directory), or remove the file if no other server is set up to use it.") :
			 errhint("Give every server its own \"nvwal_path\"; a relative path is taken relative to the data directory.")));
}

/*
 * Decide whether the file may be used, creating it when that is safe.
 * Every refusal happens here, in the postmaster, before anything has been
 * written, and leaves the file untouched.
 */
static void
nvwal_validate_or_create(const ControlFileData *controlFile,
						 bool expected, bool from_backup, Size ring_size)
{
	NvwalFileHeader hdr;
	off_t		filesize;
	bool		replace = false;

	/*
	 * A file we create, or one another server created first, is checked like
	 * any other.
	 */
	while (!nvwal_open_file(&hdr, &filesize))
	{
		if (expected)
			ereport(FATAL,
					(errcode(ERRCODE_UNDEFINED_FILE),
					 errmsg("non-volatile WAL buffer file \"%s\" does not exist",
							nvwal_path),
					 errdetail("The server did not shut down cleanly, and WAL it committed may exist only in the non-volatile WAL buffer file it used."),
					 errhint("Restore that file, or point \"nvwal_path\" to it, and start the server again.")));
		(void) nvwal_create_file(ring_size, controlFile->system_identifier,
								 0, false);
	}

	/*
	 * A clean file inside the data directory with another system identifier
	 * is this server's own from before pg_createsubscriber gave it a new
	 * identifier (after a clean shutdown); it holds nothing.
	 */
	if (hdr.system_identifier != controlFile->system_identifier)
	{
		if (expected || hdr.clean == 0 || !nvwal_file_really_in_datadir())
			nvwal_refuse_foreign_file(&hdr, controlFile, expected);
		else
		{
			ereport(LOG,
					(errmsg("replacing non-volatile WAL buffer file \"%s\" of database system %" PRIu64 ", which holds no WAL",
							nvwal_path, hdr.system_identifier)));
			replace = true;
		}
	}

	/*
	 * pg_control names the run that last wrote WAL to the file.  The file's
	 * identifier changes before pg_control's record of it does, when a run
	 * starts writing WAL and when a salvage takes the file's WAL; a crash in
	 * between leaves the previous identifier in pg_control, and the file
	 * keeps it as its previous one until pg_control has caught up.
	 */
	if (expected && hdr.file_id != controlFile->nvwalFileId &&
		hdr.previous_file_id != controlFile->nvwalFileId)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("non-volatile WAL buffer file \"%s\" is not the file this server used before it stopped",
						nvwal_path),
				 errdetail("The server did not shut down cleanly, and WAL it committed may exist only in the non-volatile WAL buffer file it used."),
				 errhint("Restore that file, or point \"nvwal_path\" to it, and start the server again.  If a copy of this data directory has been started with the file since, that copy's pg_wal holds the WAL instead.")));

	/*
	 * A file inside the data directory of a server starting from a base
	 * backup came with the files of the backup (a low-level backup copies
	 * everything): it holds the source server's WAL, which this server gets
	 * from the archive or by streaming.
	 */
	if (!expected && hdr.clean == 0 && from_backup &&
		nvwal_file_really_in_datadir())
	{
		ereport(LOG,
				(errmsg("discarding non-volatile WAL buffer file \"%s\" that was copied with a base backup",
						nvwal_path)));
		replace = true;
	}
	else if (!expected && hdr.clean == 0)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("non-volatile WAL buffer file \"%s\" holds WAL of a server that did not shut down cleanly",
						nvwal_path),
				 errdetail("pg_control of this server does not name the file: it may belong to the server this one was copied from, or pg_resetwal discarded its WAL."),
				 errhint("Set \"nvwal_path\" to another file.  Remove the file only if no server needs it.")));

	if (hdr.clean == 0 && !replace &&
		(filesize != (off_t) (NVWAL_HEADER_SIZE + hdr.ring_size) ||
		 hdr.xlog_blcksz != XLOG_BLCKSZ ||
		 hdr.wal_segment_size != wal_segment_size))
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("non-volatile WAL buffer file \"%s\" does not match its header",
						nvwal_path),
				 errdetail("The header describes a ring of %" PRIu64 " bytes with %u-byte WAL blocks and %u-byte WAL segments in a file of %lld bytes; the file has %lld bytes, and the server uses %d-byte WAL blocks and %d-byte WAL segments.",
						   hdr.ring_size, hdr.xlog_blcksz,
						   hdr.wal_segment_size,
						   (long long) (NVWAL_HEADER_SIZE + hdr.ring_size),
						   (long long) filesize, XLOG_BLCKSZ,
						   wal_segment_size),
				 errhint("The server did not shut down cleanly, and WAL it committed may exist only in the file it used: restore that file unchanged and start the server again.")));

	if (hdr.clean == 0 && !replace && hdr.ring_size != ring_size)
		ereport(FATAL,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"nvwal_size\" does not match the ring size of non-volatile WAL buffer file \"%s\"",
						nvwal_path),
				 errdetail("The file has a ring of %" PRIu64 " bytes and a size of %lld bytes, but \"nvwal_size\" asks for %zu bytes.  The server did not shut down cleanly, and the file holds WAL that is not yet in pg_wal.",
						   hdr.ring_size, (long long) filesize, ring_size),
				 errhint("Set \"nvwal_size\" to %" PRIu64 "MB until the server has started and shut down cleanly once.",
						 hdr.ring_size / (1024 * 1024))));

	if (hdr.clean != 0 &&
		(hdr.ring_size != ring_size ||
		 filesize != (off_t) (NVWAL_HEADER_SIZE + ring_size) ||
		 hdr.xlog_blcksz != XLOG_BLCKSZ ||
		 hdr.wal_segment_size != wal_segment_size))
	{
		/* Nothing in it is needed: replace it with one of the new size */
		ereport(LOG,
				(errmsg("replacing non-volatile WAL buffer file \"%s\", which does not match the current settings",
						nvwal_path),
				 errdetail("The new file has a ring of %dMB.", nvwal_size)));
		replace = true;
	}

	if (!replace)
	{
		nvwal_make_durable(filesize);
		return;
	}

	/*
	 * The new file replaces this one while we hold its lock, so that no other
	 * server can lock this one and take it for the file at nvwal_path.  A
	 * clean file replaced while pg_control still names it (a crash between
	 * marking it clean and clearing pg_control, or before pg_control recorded
	 * its renewed identifier) must not make its replacement look like another
	 * file: it too holds nothing.
	 */
	(void) nvwal_create_file(ring_size, controlFile->system_identifier,
							 expected ? controlFile->nvwalFileId : 0, true);
	nvwal_close_file();

	/* Check the replacement, or whatever another server put there first. */
	nvwal_validate_or_create(controlFile, expected, false, ring_size);
}

#endif							/* USE_LIBPMEM */

/*
 * The hint of the refusal to start without nvwal_path when pg_control says
 * the file may hold committed WAL.  A build without libpmem refuses the
 * setting itself, so its users need another build first.
 */
static int
errhint_nvwal_needed(uint64 ring_size)
{
#ifdef USE_LIBPMEM
	return errhint("Set \"nvwal_path\" to the file used before, and \"nvwal_size\" to %" PRIu64 "MB, then start the server.  After a clean shutdown, the non-volatile WAL buffer can be turned off.",
				   ring_size / (1024 * 1024));
#else
	return errhint("This server was built without libpmem.  Start the cluster with a server built with libpmem, with \"nvwal_path\" set to the file used before and \"nvwal_size\" to %" PRIu64 "MB.  After a clean shutdown, the non-volatile WAL buffer can be turned off.",
				   ring_size / (1024 * 1024));
#endif
}

/*
 * Set up the WAL buffer pages of this server.  Returns the ring (to be used
 * as XLogCtl->pages), or NULL when NVWAL is not configured and the server
 * should use shared memory.  Refuses to start, with FATAL, whenever the
 * configuration could lose WAL that an earlier run committed.
 *
 * Runs in the postmaster, or in a single-user backend.  After a crash
 * restart the postmaster keeps the mapping and its lock.
 */
char *
NvwalAttach(const ControlFileData *controlFile)
{
	bool		expected;
	bool		from_backup;

	if (IsBootstrapProcessingMode())
		return NULL;

	/* After a crash restart, only shared memory is new */
	if (nvwal_map != NULL)
	{
		NvwalShmem->is_pmem = nvwal_is_pmem;
		return nvwal_ring;
	}

	/*
	 * pg_control of a base backup, or of a pg_rewind target, describes the
	 * file of the server it was copied from.
	 */
	from_backup = access(BACKUP_LABEL_FILE, F_OK) == 0;
	expected = controlFile->nvwalFileId != 0 && !from_backup;

	if (!NvwalWanted())
	{
		if (expected)
			ereport(FATAL,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the server did not shut down cleanly while using a non-volatile WAL buffer, but \"nvwal_path\" is not set"),
					 errdetail("WAL it committed may exist only in that file (its ring was %" PRIu64 " bytes).",
							   controlFile->nvwalSize),
					 errhint_nvwal_needed(controlFile->nvwalSize)));
		return NULL;
	}

#ifdef USE_LIBPMEM
	{
		Size		ring_size = NvwalRingSize();
		size_t		maplen;
		int			is_pmem;

		if (2 * (wal_segment_size / (1024 * 1024)) > NVWAL_SIZE_MAX_MB)
			ereport(FATAL,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a non-volatile WAL buffer cannot be used with a WAL segment size of %dMB",
							wal_segment_size / (1024 * 1024)),
					 errdetail("\"nvwal_size\" must be at least two segments, and can be at most %dMB.",
							   NVWAL_SIZE_MAX_MB),
					 errhint("Set \"nvwal_path\" to an empty string, or use a cluster initialized with a smaller WAL segment size (initdb --wal-segsize).")));
		if (ring_size % wal_segment_size != 0 ||
			ring_size < 2 * (Size) wal_segment_size)
			ereport(FATAL,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"nvwal_size\" must be a multiple of the WAL segment size and at least two segments"),
					 errdetail("\"nvwal_size\" is %dMB, and the WAL segment size is %dMB.",
							   nvwal_size, wal_segment_size / (1024 * 1024)),
					 errhint("Set \"nvwal_size\" to a multiple of %dMB, at least %dMB.",
							 wal_segment_size / (1024 * 1024),
							 2 * wal_segment_size / (1024 * 1024))));

		nvwal_remember_datadir_path();
		nvwal_validate_or_create(controlFile, expected, from_backup,
								 ring_size);
		nvwal_install_sigbus_handler();

		nvwal_map = pmem_map_file(nvwal_path, 0, 0, 0, &maplen, &is_pmem);
		if (nvwal_map == NULL)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not map non-volatile WAL buffer file \"%s\": %s",
							nvwal_path, pmem_errormsg()),
					 errhint("The file must be on a file system that supports memory mapping with enough space for it, such as a DAX file system or tmpfs.")));
		nvwal_map_len = maplen;
		nvwal_is_pmem = (is_pmem != 0);
		nvwal_header = (NvwalFileHeader *) nvwal_map;
		nvwal_ring = nvwal_map + NVWAL_HEADER_SIZE;
		nvwal_ring_size = nvwal_header->ring_size;
		Assert(nvwal_ring_size == ring_size);
		Assert(maplen == NVWAL_HEADER_SIZE + ring_size);

		if (!nvwal_is_pmem)
			ereport(LOG,
					(errmsg("non-volatile WAL buffer file \"%s\" is not on persistent memory",
							nvwal_path),
					 errdetail("Commits will be made durable with msync(), which is much slower."),
					 errhint("Put the file on a file system mounted with DAX.")));
		NvwalShmem->is_pmem = nvwal_is_pmem;
		NvwalActive = true;
	}
#endif

	return nvwal_ring;
}

/*
 * Give the file a new identifier, and return it for pg_control, before a
 * run writes WAL to the file or a salvage takes WAL from it.
 *
 * Before a run: a copy of the file made before then carries an older
 * identifier, and after a crash start-up refuses such a copy instead of
 * missing the WAL only the file in use holds.  Before a salvage: a copy of
 * the crashed data directory has the same pg_control, and with an absolute
 * nvwal_path the same file; once our pg_control has the new identifier,
 * that copy is refused instead of finding the file salvaged, and clean,
 * without the WAL now in our pg_wal.
 *
 * Until pg_control records the new identifier, start-up accepts the
 * previous one; NvwalStartWriting() and NvwalSalvage() forget it.  It must
 * be the one pg_control holds now ('recorded_id', when it names a file):
 * start-up may have accepted this file by its previous identifier, and a
 * crash in the same window again must not make it unacceptable.
 */
uint64
NvwalRenewFileId(uint64 recorded_id)
{
#ifdef USE_LIBPMEM
	Assert(NvwalActive);
	nvwal_header_set(&nvwal_header->previous_file_id,
					 recorded_id != 0 ? recorded_id : nvwal_header->file_id);
	nvwal_header_set(&nvwal_header->file_id, nvwal_random_id());
	return nvwal_header->file_id;
#else
	return 0;
#endif
}

/*
 * Does the ring hold WAL that pg_wal may lack?  That is the case after any
 * crash while WAL was being written to it.
 */
bool
NvwalSalvageNeeded(void)
{
	return NvwalActive && nvwal_header->clean == 0;
}

/*
 * Does this complete WAL page hold no WAL?  A page that does either
 * continues a record or begins one right after its header.  In the ring, an
 * empty page was initialized ahead of insertion or, if WAL follows it, is
 * padding after a WAL switch, which keeps its page header with NVWAL (see
 * CopyXLogRecordToWAL()).
 */
bool
NvwalPageIsEmpty(const char *page)
{
	XLogPageHeader hdr = (XLogPageHeader) page;
	uint32		first_len;

	if (hdr->xlp_info & XLP_FIRST_IS_CONTRECORD)
		return false;
	memcpy(&first_len, page + XLogPageHeaderSize(hdr), sizeof(first_len));
	return first_len == 0;
}

#ifdef USE_LIBPMEM
/*
 * Is the ring page that should start at 'pageptr' the page of that address?
 * A slot can hold the page one lap earlier, a page whose initialization was
 * interrupted, or zeroes.
 */
static bool
nvwal_page_is_valid(XLogRecPtr pageptr)
{
	XLogPageHeader page = (XLogPageHeader) (nvwal_ring + pageptr % nvwal_ring_size);

	if (page->xlp_magic != XLOG_PAGE_MAGIC || page->xlp_pageaddr != pageptr)
		return false;
	if ((page->xlp_info & ~XLP_ALL_FLAGS) != 0)
		return false;
	if (XLogSegmentOffset(pageptr, wal_segment_size) == 0)
	{
		XLogLongPageHeader longpage = (XLogLongPageHeader) page;

		if (!(page->xlp_info & XLP_LONG_HEADER) ||
			longpage->xlp_sysid != nvwal_header->system_identifier)
			return false;
	}
	return true;
}

/* The timeline of the (valid) ring page at 'pageptr' */
static TimeLineID
nvwal_page_tli(XLogRecPtr pageptr)
{
	XLogPageHeader page = (XLogPageHeader) (nvwal_ring + pageptr % nvwal_ring_size);

	return page->xlp_tli;
}

/*
 * Does the (valid) ring page at 'pageptr' hold any WAL?  Pages are
 * initialized ahead of insertion, so the ring can hold empty pages beyond
 * the end of WAL; so can the rest of a segment after a WAL switch (whose
 * pages keep their headers with NVWAL, see CopyXLogRecordToWAL()).
 */
static bool
nvwal_page_has_data(XLogRecPtr pageptr)
{
	return !NvwalPageIsEmpty(nvwal_ring + pageptr % nvwal_ring_size);
}

/*
 * Error context for the salvage.  Creating a segment can fail in
 * XLogFileInit(), whose message does not say that the WAL it was to receive
 * is still safe in the ring.
 */
static void
nvwal_salvage_error_callback(void *arg)
{
	XLogRecPtr *range = (XLogRecPtr *) arg;

	errcontext("writing WAL from %X/%X to %X/%X, still kept in non-volatile WAL buffer file \"%s\", to pg_wal",
			   LSN_FORMAT_ARGS(range[0]), LSN_FORMAT_ARGS(range[1]),
			   nvwal_path);
}

/* Report a failed write of the salvage to 'segname' */
static void
nvwal_salvage_write_failed(const char *segname)
{
	bool		no_space;

	if (errno == 0)
		errno = ENOSPC;
	no_space = (errno == ENOSPC);
	ereport(FATAL,
			(errcode_for_file_access(),
			 errmsg("could not write WAL from non-volatile WAL buffer file \"%s\" to file \"%s\": %m",
					nvwal_path, segname),
			 no_space ?
			 errhint("Free space on the file system of pg_wal and start the server again; the WAL is kept in the non-volatile WAL buffer file until then.  Do not remove files from pg_wal, nor that file.") :
			 errhint("Check the storage of pg_wal, and the persistent memory holding the non-volatile WAL buffer file, for errors; the WAL is kept in the file until the server has started.")));
}

/* Write ring pages [from, to) to the segment files of 'tli' and fsync them */
static void
nvwal_write_to_segments(XLogRecPtr from, XLogRecPtr to, TimeLineID tli)
{
	XLogRecPtr	ptr = from;

	while (ptr < to)
	{
		XLogSegNo	segno;
		XLogRecPtr	segend;
		char		segname[MAXFNAMELEN];
		int			fd;

		XLByteToSeg(ptr, segno, wal_segment_size);
		XLogFileName(segname, tli, segno, wal_segment_size);
		XLogSegNoOffsetToRecPtr(segno + 1, 0, wal_segment_size, segend);
		fd = XLogFileInit(segno, tli);
		while (ptr < Min(to, segend))
		{
			Size		off = ptr % nvwal_ring_size;
			Size		len = Min(Min(to, segend) - ptr, nvwal_ring_size - off);
			ssize_t		written;

			/*
			 * Nothing is marked as written before the segments are fsynced,
			 * so a failure needs no PANIC: the next start writes it all
			 * again.
			 */
			errno = 0;
			pgstat_report_wait_start(WAIT_EVENT_WAL_WRITE);
			written = pg_pwrite(fd, nvwal_ring + off, len,
								XLogSegmentOffset(ptr, wal_segment_size));
			pgstat_report_wait_end();
			if (written < 0 && errno == EINTR)
				continue;
			if (written <= 0)
				nvwal_salvage_write_failed(segname);
			ptr += written;
		}
		issue_xlog_fsync(fd, segno, tli);
		if (close(fd) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not close file \"%s\": %m", segname)));
	}
}
#endif

/*
 * After a crash, write the WAL that is durable in the ring but may be
 * missing from pg_wal to the segment files, and fsync them.  Recovery then
 * reads pg_wal as usual and finds the end of WAL as usual.
 *
 * The ring pages after the header's synced_upto are scanned in LSN order up
 * to the first page that is not the page of its address on the crashed
 * run's timeline, and written up to the last one that holds WAL.  Every page
 * before the durable end is valid, because WAL is made durable in LSN order;
 * pages after it may or may not be, just like unflushed writes to pg_wal,
 * and recovery stops at the first record that fails validation.  Only page
 * headers are read beyond the WAL, and only what the WAL writer had not
 * written yet is written, so start-up time does not grow with the ring size.
 *
 * The caller has renewed the file's identifier with NvwalRenewFileId() and
 * recorded it in pg_control; from now on only that identifier is accepted,
 * so that a copy of this data directory that shares the file is refused
 * before any of its WAL has left the ring.  Returns where the WAL written
 * ends, and its timeline in *tli, or InvalidXLogRecPtr if there was none;
 * the caller records that in pg_control (see NvwalClearSalvagedTail()) and
 * then calls NvwalSalvageDone().
 *
 * Runs in the start-up process (or a single-user backend) before recovery.
 */
XLogRecPtr
NvwalSalvage(TimeLineID *tli_p)
{
#ifdef USE_LIBPMEM
	XLogRecPtr	synced = nvwal_header->synced_upto;
	XLogRecPtr	start = synced - synced % XLOG_BLCKSZ;
	XLogRecPtr	end = start;
	XLogRecPtr	ptr;
	TimeLineID	tli = (TimeLineID) nvwal_header->timeline;

	Assert(NvwalSalvageNeeded());

	nvwal_header_set(&nvwal_header->previous_file_id, 0);

	/*
	 * Up to the last page with WAL, empty pages in between included.  A run
	 * writes on one timeline, the header's, so a page on another timeline was
	 * left by an earlier run: after a point-in-time recovery that reused this
	 * file, a page of the abandoned history, past the recovery target, which
	 * this run had not overwritten yet.  Only the partial page that start-up
	 * copied into the ring from the history it recovered may be older, and
	 * only while synced_upto still points into it.
	 */
	for (ptr = start;
		 ptr < start + nvwal_ring_size && nvwal_page_is_valid(ptr) &&
		 (nvwal_page_tli(ptr) == tli ||
		  (ptr == start && synced % XLOG_BLCKSZ != 0));
		 ptr += XLOG_BLCKSZ)
	{
		if (nvwal_page_has_data(ptr))
			end = ptr + XLOG_BLCKSZ;
	}

	if (end > start)
	{
		ErrorContextCallback errcallback;
		XLogRecPtr	range[2] = {start, end};

		errcallback.callback = nvwal_salvage_error_callback;
		errcallback.arg = range;
		errcallback.previous = error_context_stack;
		error_context_stack = &errcallback;

		SetInstallXLogFileSegmentActive();
		nvwal_write_to_segments(start, end, tli);
		ResetInstallXLogFileSegmentActive();

		error_context_stack = errcallback.previous;
	}

	ereport(LOG,
			(errmsg("wrote WAL from %X/%X to %X/%X on timeline %u from non-volatile WAL buffer file \"%s\" to pg_wal",
					LSN_FORMAT_ARGS(start), LSN_FORMAT_ARGS(end), tli,
					nvwal_path)));

	*tli_p = tli;
	return end > start ? end : InvalidXLogRecPtr;
#else
	return InvalidXLogRecPtr;
#endif
}

/*
 * The salvage has written the ring's tail, up to 'end', to pg_wal and
 * pg_control records it: from now on the ring holds nothing pg_wal lacks.
 */
void
NvwalSalvageDone(XLogRecPtr end)
{
#ifdef USE_LIBPMEM
	if (!XLogRecPtrIsInvalid(end))
		nvwal_header_set(&nvwal_header->synced_upto, end);
	nvwal_header_set(&nvwal_header->clean, 1);
#endif
}

/* Report a failure of NvwalClearSalvagedTail() on 'path' */
static void
nvwal_clear_tail_failed(const char *path)
{
	ereport(FATAL,
			(errcode_for_file_access(),
			 errmsg("could not clear WAL past the end of WAL in file \"%s\": %m",
					path),
			 errhint("Check the storage of pg_wal for errors, and start the server again.")));
}

/*
 * Recovery has ended at 'endOfLog', and new WAL will be written from there on
 * timeline 'tli'.  Zero the pages from the one after 'endOfLog' up to
 * 'salvageEnd' in the segment files of 'tli' in pg_wal: pages that the
 * salvage of a non-volatile WAL buffer wrote there past the end of WAL.
 *
 * The salvage writes every page up to the last one holding WAL, including
 * pages past a record whose insertion never finished: another inserter may
 * have completed a later record that follows it.  Recovery stops at the
 * unfinished record, and new WAL is written from there on the same
 * timeline.  If it ended exactly where that later record begins, and the
 * server crashed again before anything was written after it, recovery would
 * read the stale record as the next one, its xl_prev matching, and replay
 * WAL that was never durable: a transaction could commit without its
 * earlier changes.  pg_wal never holds such pages without NVWAL, since
 * XLogWrite() stops at insertions not finished.
 *
 * pg_control, not the file, says how far the salvage wrote, and this does
 * not use the file: a start after a failed recovery may run without
 * nvwal_path, or in a build without libpmem.  The ring's copy of those pages
 * is invalidated by NvwalStartWriting().
 */
void
NvwalClearSalvagedTail(XLogRecPtr endOfLog, XLogRecPtr salvageEnd,
					   TimeLineID tli)
{
	XLogRecPtr	end_page = endOfLog - endOfLog % XLOG_BLCKSZ;
	XLogRecPtr	from = endOfLog == end_page ? endOfLog : end_page + XLOG_BLCKSZ;
	XLogRecPtr	ptr;
	bool		cleared = false;

	for (ptr = from; ptr < salvageEnd;)
	{
		XLogSegNo	segno;
		XLogRecPtr	segend;
		Size		len;
		char		path[MAXPGPATH];
		int			fd;

		XLByteToSeg(ptr, segno, wal_segment_size);
		XLogSegNoOffsetToRecPtr(segno + 1, 0, wal_segment_size, segend);
		len = Min(salvageEnd, segend) - ptr;
		XLogFilePath(path, tli, segno, wal_segment_size);
		fd = BasicOpenFile(path, O_RDWR | PG_BINARY);
		if (fd < 0)
		{
			if (errno != ENOENT)
				nvwal_clear_tail_failed(path);
		}
		else
		{
			/*
			 * pg_fsync(), since issue_xlog_fsync() leaves the sync to the
			 * open flags with wal_sync_method = open_sync or open_datasync.
			 */
			pgstat_report_wait_start(WAIT_EVENT_WAL_WRITE);
			if (pg_pwrite_zeros(fd, len,
								XLogSegmentOffset(ptr, wal_segment_size)) < 0)
				nvwal_clear_tail_failed(path);
			pgstat_report_wait_end();
			pgstat_report_wait_start(WAIT_EVENT_WAL_SYNC);
			if (pg_fsync(fd) != 0)
				nvwal_clear_tail_failed(path);
			pgstat_report_wait_end();
			if (close(fd) != 0)
				nvwal_clear_tail_failed(path);
			cleared = true;
		}
		ptr += len;
	}

	if (cleared)
		ereport(LOG,
				(errmsg("cleared WAL from %X/%X to %X/%X on timeline %u past the end of WAL",
						LSN_FORMAT_ARGS(from), LSN_FORMAT_ARGS(salvageEnd), tli),
				 errdetail("Start-up had written it from a non-volatile WAL buffer file, but it does not continue the WAL that recovery replayed.")));
}

#ifdef USE_LIBPMEM
/*
 * Invalidate the ring's pages from the one after 'endOfLog' up to 'to' on
 * timeline 'tli': pages that the salvage wrote past the end of WAL that
 * recovery found (see NvwalClearSalvagedTail(), which zeroes them in
 * pg_wal).  A later salvage would otherwise write them to pg_wal again.
 */
static void
nvwal_forget_tail(XLogRecPtr endOfLog, XLogRecPtr to, TimeLineID tli)
{
	XLogRecPtr	end_page = endOfLog - endOfLog % XLOG_BLCKSZ;
	XLogRecPtr	from = endOfLog == end_page ? endOfLog : end_page + XLOG_BLCKSZ;
	XLogRecPtr	ptr;

	/*
	 * The salvage scans at most one ring from a page that recovery has
	 * reached, so it ends at most one ring after the page of the end of WAL,
	 * whose slot, holding the partial page new WAL continues, is not among
	 * those invalidated.  A position further on was not left by the salvage,
	 * but by a history that reused this timeline ID (see NvwalSalvage()); the
	 * ring's pages past the end of WAL are then of that history, which the
	 * salvage did not write.
	 */
	if (from >= to || to > end_page + nvwal_ring_size)
		return;

	for (ptr = from; ptr < to; ptr += XLOG_BLCKSZ)
	{
		XLogPageHeader page =
			(XLogPageHeader) (nvwal_ring + ptr % nvwal_ring_size);

		page->xlp_magic = 0;
		nvwal_flush_bytes((const char *) &page->xlp_magic,
						  sizeof(page->xlp_magic));
	}
	nvwal_drain();
}
#endif

/*
 * Recovery has ended, and new WAL will be written from 'endOfLog' on.  Mark
 * the segment files of timeline 'endOfLogTLI' in pg_wal that have no archive
 * status yet, from the one holding 'redo' (the redo pointer of the checkpoint
 * recovery started from) to the last that ends at or before 'endOfLog',
 * ready for archiving.
 *
 * Without NVWAL, XLogWrite() marks a segment once it has completed it in
 * pg_wal.  With NVWAL, a segment may have been complete only in the ring
 * when the server crashed; the salvage completed it in pg_wal, and nothing
 * else would mark it until a checkpoint removed or recycled it, which
 * wal_keep_size or a slot can put off for long.  This depends on nothing
 * the salvage remembers, so a second failure during recovery, after the
 * salvage has emptied the ring, leaves no segment unmarked either, as long
 * as the server starts again with NVWAL.  The checkpoint recovery started
 * from wrote back the ring up to its record, through XLogWrite(), which
 * marked the segments before it.  The segment holding 'endOfLog' is left
 * alone: the salvage may have written pages past the end of valid WAL there,
 * which new WAL overwrites, and XLogWrite() marks it when it completes it.
 * Segments restored from an archive or received from a primary carry a
 * status already.
 */
void
NvwalArchiveCompletedSegments(XLogRecPtr redo, XLogRecPtr endOfLog,
							  TimeLineID endOfLogTLI)
{
	XLogSegNo	firstsegno;
	XLogSegNo	endsegno;
	DIR		   *dir;
	struct dirent *de;

	if (!NvwalActive || !XLogArchivingActive())
		return;

	/*
	 * List pg_wal rather than try every segment number in the range: for a
	 * standby promoted long after its recovery began, that range can span far
	 * more segments than pg_wal keeps.
	 */
	XLByteToSeg(redo, firstsegno, wal_segment_size);
	XLByteToSeg(endOfLog, endsegno, wal_segment_size);
	dir = AllocateDir(XLOGDIR);
	while ((de = ReadDir(dir, XLOGDIR)) != NULL)
	{
		TimeLineID	tli;
		XLogSegNo	segno;

		if (!IsXLogFileName(de->d_name))
			continue;
		XLogFromFileName(de->d_name, &tli, &segno, wal_segment_size);
		if (tli == endOfLogTLI && segno >= firstsegno && segno < endsegno &&
			!XLogArchiveIsReadyOrDone(de->d_name))
			XLogArchiveNotifySeg(segno, tli);
	}
	FreeDir(dir);
}

/*
 * WAL is about to be written to the ring, starting at 'endOfLog' on 'tli'.
 * The caller has already recorded the file in pg_control.  The clean mark
 * goes last, so that a crash before it leaves nothing to salvage.
 */
void
NvwalStartWriting(XLogRecPtr endOfLog, TimeLineID tli)
{
#ifdef USE_LIBPMEM
	Assert(NvwalActive);

	/*
	 * A page-aligned end of WAL has no partial page here, and its slot may
	 * still hold the page of that address from an earlier history: after a
	 * point-in-time recovery, WAL past the recovery target, which continues
	 * the record chain.  A salvage after a crash before the first insertion
	 * would write it to pg_wal and recovery would replay it.  Invalidate the
	 * slot so that the scan stops there.  The scan also stops at a page of
	 * another timeline (see NvwalSalvage()), which covers this slot and the
	 * later ones, unless the abandoned history had the same timeline ID (one
	 * reused because its history file was lost); for this slot, where such a
	 * page would continue the record chain, one store settles it.
	 */
	if (endOfLog % XLOG_BLCKSZ == 0)
	{
		XLogPageHeader page =
			(XLogPageHeader) (nvwal_ring + endOfLog % nvwal_ring_size);

		page->xlp_magic = 0;
		nvwal_persist(&page->xlp_magic, sizeof(page->xlp_magic));
	}

	/*
	 * Until it is set below, synced_upto is where the salvage ended, if there
	 * was one.  Pages it wrote past the end of WAL on this timeline are
	 * forgotten before new WAL is written; see nvwal_forget_tail().
	 */
	if (tli == nvwal_header->timeline)
		nvwal_forget_tail(endOfLog, nvwal_header->synced_upto, tli);

	/* pg_control has the renewed identifier: accept only that one now */
	nvwal_header_set(&nvwal_header->previous_file_id, 0);
	nvwal_header_set(&nvwal_header->timeline, tli);
	nvwal_header_set(&nvwal_header->synced_upto, endOfLog);
	nvwal_header_set(&nvwal_header->clean, 0);
#endif
}

/*
 * Everything has been written to pg_wal and fsynced, and no more WAL will
 * be written: the ring is now only a cache.
 */
void
NvwalMarkClean(void)
{
#ifdef USE_LIBPMEM
	Assert(NvwalActive);
	nvwal_header_set(&nvwal_header->clean, 1);
#endif
}

/*
 * Make the ring bytes of WAL range [from, to) durable: write back their CPU
 * cache lines and wait for that to complete.  pmem_flush() writes back the
 * lines whichever process dirtied them, and pmem_drain() waits for this
 * process's write-backs, so a caller that flushed a range itself may declare
 * it durable.
 */
void
NvwalPersistRange(XLogRecPtr from, XLogRecPtr to)
{
#ifdef USE_LIBPMEM
	Size		len;
	Size		off;
	instr_time	start;

	if (to <= from)
		return;

	if (track_wal_io_timing)
		INSTR_TIME_SET_CURRENT(start);

	len = to - from;
	off = from % nvwal_ring_size;
	if (len >= nvwal_ring_size)
		nvwal_flush_bytes(nvwal_ring, nvwal_ring_size);
	else if (off + len > nvwal_ring_size)
	{
		nvwal_flush_bytes(nvwal_ring + off, nvwal_ring_size - off);
		nvwal_flush_bytes(nvwal_ring, off + len - nvwal_ring_size);
	}
	else
		nvwal_flush_bytes(nvwal_ring + off, len);
	nvwal_drain();

	/* Counted locally: every committer comes here */
	nvwal_pending_flushes++;
	if (track_wal_io_timing)
	{
		instr_time	end;

		INSTR_TIME_SET_CURRENT(end);
		INSTR_TIME_SUBTRACT(end, start);
		nvwal_pending_flush_time += INSTR_TIME_GET_NANOSEC(end);
	}
	pgstat_report_fixed = true;
#endif
}

/*
 * Add this process's pending flush counts to pg_stat_nvwal.  Called when the
 * process reports its WAL statistics (pgstat_wal_flush_cb()), so that a
 * commit writes no shared counter.
 */
void
NvwalFlushPendingStats(void)
{
	if (nvwal_pending_flushes == 0)
		return;
	pg_atomic_fetch_add_u64(&NvwalShmem->flushes, nvwal_pending_flushes);
	if (nvwal_pending_flush_time > 0)
		pg_atomic_fetch_add_u64(&NvwalShmem->flush_time,
								nvwal_pending_flush_time);
	nvwal_pending_flushes = 0;
	nvwal_pending_flush_time = 0;
}

/* Make one ring page durable (the partial page start-up copies in) */
void
NvwalPersistPage(const char *page)
{
#ifdef USE_LIBPMEM
	Assert(page >= nvwal_ring && page < nvwal_ring + nvwal_ring_size);
	nvwal_persist(page, XLOG_BLCKSZ);
#endif
}

/*
 * WAL before 'upto' has been written to pg_wal and fsynced; 'written' bytes
 * were written to get there.  Ring pages before it may now be reused, so
 * this must be durable first: the caller publishes the new position only
 * after this returns.
 */
void
NvwalSetSyncedUpTo(XLogRecPtr upto, uint64 written)
{
#ifdef USE_LIBPMEM
	Assert(NvwalActive);
	if (upto > nvwal_header->synced_upto)
		nvwal_header_set(&nvwal_header->synced_upto, upto);
	pg_atomic_fetch_add_u64(&NvwalShmem->written, written);
#endif
}

/* An inserter found the ring full and wrote back pages itself */
void
NvwalCountRingFull(void)
{
	pg_atomic_fetch_add_u64(&NvwalShmem->ring_full, 1);
}

/*
 * Is 'relpath' (relative to the data directory, as base backups name
 * files) the NVWAL file, or the temporary file it is built under?
 */
bool
NvwalIsDataDirFile(const char *relpath)
{
	char		path[MAXPGPATH];

	if (!NvwalActive || nvwal_datadir_relpath[0] == '\0')
		return false;
	strlcpy(path, relpath, sizeof(path));
	canonicalize_path(path);
	return NvwalPathIsFile(path, nvwal_datadir_relpath);
}

/*
 * SQL function behind the pg_stat_nvwal view: one row while the server uses
 * a non-volatile WAL buffer, none otherwise.
 */
Datum
pg_stat_get_nvwal(PG_FUNCTION_ARGS)
{
#define PG_STAT_GET_NVWAL_COLS	10
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[PG_STAT_GET_NVWAL_COLS] = {0};
	bool		nulls[PG_STAT_GET_NVWAL_COLS] = {0};

	InitMaterializedSRF(fcinfo, 0);

	if (!NvwalActive)
		return (Datum) 0;

	/* nvwal_path is GUC_SUPERUSER_ONLY */
	if (has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_SETTINGS))
		values[0] = CStringGetTextDatum(nvwal_path);
	else
		nulls[0] = true;
	values[1] = Int64GetDatum((int64) nvwal_ring_size);
	values[2] = BoolGetDatum(NvwalShmem->is_pmem);
	values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&NvwalShmem->flushes));
	values[4] = Float8GetDatum((double) pg_atomic_read_u64(&NvwalShmem->flush_time) / 1000000.0);
	values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&NvwalShmem->written));
	values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&NvwalShmem->ring_full));

	/*
	 * The ring holds no WAL until recovery has ended.  The synced position is
	 * read first, so that it never shows ahead of the durable one.
	 */
	if (RecoveryInProgress())
		nulls[7] = nulls[8] = true;
	else
	{
		values[8] = LSNGetDatum(nvwal_header->synced_upto);
		pg_read_barrier();
		values[7] = LSNGetDatum(GetFlushRecPtr(NULL));
	}
	values[9] = TimestampTzGetDatum((TimestampTz)
									pg_atomic_read_u64(&NvwalShmem->stats_reset));

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
