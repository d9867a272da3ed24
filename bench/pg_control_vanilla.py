#!/usr/bin/env python3
"""Rewrite a data directory's global/pg_control, made by the patched server,
in vanilla PostgreSQL's layout.

The patch series changes pg_control: a catalog version bump (the output
columns of pg_stat_get_recovery_prefetch() and the new pg_stat_nvwal) and
four fields for the non-volatile WAL buffer (PG_CONTROL_VERSION 1801).
Benchmarks that replay one crashed cluster with both servers use this on
their copy of it for vanilla.  Recovery reads neither the catalogs nor the
NVWAL fields, which must be zero (the cluster did not use NVWAL), so the
replay is the same.

The field offsets are not hard-coded: a small C program is compiled against
each tree's headers and prints offset and size of every field of
ControlFileData, which are then copied field by field.

usage: pg_control_vanilla.py DATADIR PATCHED_SRC PATCHED_BUILD VANILLA_SRC VANILLA_BUILD
"""
import os
import struct
import subprocess
import sys
import tempfile

# The fields of upstream's ControlFileData, in order, CRC last.
FIELDS = """system_identifier pg_control_version catalog_version_no state time
checkPoint checkPointCopy unloggedLSN minRecoveryPoint minRecoveryPointTLI
backupStartPoint backupEndPoint backupEndRequired wal_level wal_log_hints
MaxConnections max_worker_processes max_wal_senders max_prepared_xacts
max_locks_per_xact track_commit_timestamp maxAlign floatFormat blcksz
relseg_size xlog_blcksz xlog_seg_size nameDataLen indexMaxKeys
toast_max_chunk_size loblksize float8ByVal data_checksum_version
default_char_signedness mock_authentication_nonce crc""".split()
PATCHED_ONLY = ["nvwalFileId", "nvwalSize", "nvwalSalvageEnd", "nvwalSalvageTLI"]
PG_CONTROL_FILE_SIZE = 8192


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def layout(src, build, fields):
    """{field: (offset, size)} and the tree's PG_CONTROL_VERSION and
    CATALOG_VERSION_NO, from a program compiled against its headers."""
    lines = ['#include "postgres.h"', '#include "catalog/catversion.h"',
             '#include "catalog/pg_control.h"', "#include <stdio.h>",
             "#undef fprintf", "int main(void) {"]
    for f in fields:
        lines.append(f'fprintf(stdout, "{f} %zu %zu\\n", offsetof(ControlFileData, {f}),'
                     f' sizeof(((ControlFileData *) 0)->{f}));')
    lines.append('fprintf(stdout, "PG_CONTROL_VERSION %d 0\\n", (int) PG_CONTROL_VERSION);')
    lines.append('fprintf(stdout, "CATALOG_VERSION_NO %d 0\\n", (int) CATALOG_VERSION_NO);')
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as tmp:
        c = os.path.join(tmp, "layout.c")
        exe = os.path.join(tmp, "layout")
        with open(c, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run(["cc", "-I", os.path.join(build, "src/include"),
                        "-I", os.path.join(src, "src/include"), c, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    result = {}
    for line in out.splitlines():
        name, a, b = line.split()
        result[name] = (int(a), int(b))
    return result


def main():
    datadir, psrc, pbuild, vsrc, vbuild = sys.argv[1:6]
    patched = layout(psrc, pbuild, FIELDS + PATCHED_ONLY)
    vanilla = layout(vsrc, vbuild, FIELDS)
    path = os.path.join(datadir, "global", "pg_control")
    with open(path, "rb") as f:
        old = f.read()

    pcrc = patched["crc"][0]
    if struct.unpack_from("<I", old, pcrc)[0] != crc32c(old[:pcrc]):
        sys.exit(f"{path}: CRC does not match the patched layout; not made by the patched server?")
    if struct.unpack_from("<I", old, patched["pg_control_version"][0])[0] != patched["PG_CONTROL_VERSION"][0]:
        sys.exit(f"{path}: pg_control_version is not the patched server's")
    for f in PATCHED_ONLY:
        off, size = patched[f]
        if any(old[off:off + size]):
            sys.exit(f"{path}: {f} is set: the cluster used NVWAL and cannot be given to vanilla")

    new = bytearray(PG_CONTROL_FILE_SIZE)
    for f in FIELDS:
        (poff, psize), (voff, vsize) = patched[f], vanilla[f]
        if psize != vsize:
            sys.exit(f"field {f} has size {psize} in the patched tree, {vsize} in vanilla")
        new[voff:voff + vsize] = old[poff:poff + psize]
    struct.pack_into("<I", new, vanilla["pg_control_version"][0], vanilla["PG_CONTROL_VERSION"][0])
    struct.pack_into("<I", new, vanilla["catalog_version_no"][0], vanilla["CATALOG_VERSION_NO"][0])
    vcrc = vanilla["crc"][0]
    struct.pack_into("<I", new, vcrc, crc32c(bytes(new[:vcrc])))
    with open(path, "wb") as f:
        f.write(new)


if __name__ == "__main__":
    main()
