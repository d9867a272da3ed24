/*-------------------------------------------------------------------------
 *
 * nv_xlog_buffer.h
 *		Non-volatile WAL buffer: WAL buffers in a persistent-memory file.
 *
 * See src/backend/access/transam/README.nvwal.
 *
 * Portions Copyright (c) 1996-2025, PostgreSQL Global Development Group
 * Portions Copyright (c) 1994, Regents of the University of California
 *
 * src/include/access/nv_xlog_buffer.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NV_XLOG_BUFFER_H
#define NV_XLOG_BUFFER_H

#include "access/xlogdefs.h"
#include "catalog/pg_control.h"

/* GUCs */
extern PGDLLIMPORT char *nvwal_path;
extern PGDLLIMPORT int nvwal_size;

/*
 * Largest nvwal_size, in MB (2047 for any XLOG_BLCKSZ): the ring's pages are
 * counted in an int, as wal_buffers' are.  Two segments must fit, so WAL
 * segments of 1GB cannot be used with a non-volatile WAL buffer.
 */
#define NVWAL_SIZE_MAX_MB \
	((INT_MAX / XLOG_BLCKSZ) / ((1024 * 1024) / XLOG_BLCKSZ))

/*
 * Appended to the file's path for the name under which a new file is built
 * before it is moved into place.  A crash can leave it behind; like the file,
 * it is left out of base backups and pg_rewind's copies.
 */
#define NVWAL_TMP_SUFFIX ".tmp"

/*
 * Is 'path' the NVWAL file at 'file', or its temporary file?  Both are
 * canonical and relative to the same directory.
 */
static inline bool
NvwalPathIsFile(const char *path, const char *file)
{
	size_t		len = strlen(file);

	return strncmp(path, file, len) == 0 &&
		(path[len] == '\0' || strcmp(path + len, NVWAL_TMP_SUFFIX) == 0);
}

/*
 * True once the WAL buffers of this server live in the NVWAL file.  Set
 * while the postmaster (or a single-user backend) creates shared memory and
 * inherited by every child process.  A build without libpmem never uses the
 * file, and its compiler drops the code for it from the WAL paths.
 */
#ifdef USE_LIBPMEM
extern PGDLLIMPORT bool NvwalActive;
#else
#define NvwalActive false
#endif

/* Shared memory for the statistics */
extern Size NvwalShmemSize(void);
extern void NvwalShmemInit(void);
extern void NvwalResetStats(void);

/* Start-up: validate and map the file, or refuse to start */
extern bool NvwalWanted(void);
extern Size NvwalRingSize(void);
extern char *NvwalAttach(const ControlFileData *controlFile);
extern bool NvwalSalvageNeeded(void);
extern XLogRecPtr NvwalSalvage(TimeLineID *tli);
extern void NvwalSalvageDone(XLogRecPtr end);
extern void NvwalClearSalvagedTail(XLogRecPtr endOfLog, XLogRecPtr salvageEnd,
								   TimeLineID tli);
extern void NvwalArchiveCompletedSegments(XLogRecPtr redo,
										  XLogRecPtr endOfLog,
										  TimeLineID endOfLogTLI);
extern uint64 NvwalRenewFileId(uint64 recorded_id);
extern void NvwalStartWriting(XLogRecPtr endOfLog, TimeLineID tli);

/* Durability of ring contents */
extern void NvwalPersistRange(XLogRecPtr from, XLogRecPtr to);
extern void NvwalPersistPage(const char *page);
extern void NvwalSetSyncedUpTo(XLogRecPtr upto, uint64 written);
extern void NvwalMarkClean(void);
extern void NvwalCountRingFull(void);
extern void NvwalFlushPendingStats(void);
extern bool NvwalPageIsEmpty(const char *page);

/* Base backups leave the file out */
extern bool NvwalIsDataDirFile(const char *relpath);

#endif							/* NV_XLOG_BUFFER_H */
