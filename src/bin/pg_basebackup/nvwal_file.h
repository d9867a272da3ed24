/*-------------------------------------------------------------------------
 *
 * nvwal_file.h
 *		pg_basebackup's nvwal format: a prepared non-volatile WAL buffer
 *		file for the new cluster.
 *
 * Portions Copyright (c) 1996-2025, PostgreSQL Global Development Group
 *
 * IDENTIFICATION
 *		  src/bin/pg_basebackup/nvwal_file.h
 *-------------------------------------------------------------------------
 */

#ifndef NVWAL_FILE_H
#define NVWAL_FILE_H

#include "libpq-fe.h"

extern bool nvwal_parse_size(const char *value, int *size_mb);
extern int	nvwal_source_size(PGconn *conn);
extern void nvwal_warn_inherited_path(PGconn *conn);
extern void nvwal_check_size(int size_mb, int wal_segment_size);
extern void nvwal_set_target(const char *path, const char *basedir);
extern void nvwal_refuse_inside(const char *dir, bool is_waldir);
extern void nvwal_prepare_file(uint64 system_identifier, int size_mb,
							   int wal_segment_size, bool do_sync);
extern void nvwal_write_settings(const char *basedir, int size_mb);
extern void nvwal_cleanup(bool noclean);

#endif							/* NVWAL_FILE_H */
