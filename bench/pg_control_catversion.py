#!/usr/bin/env python3
"""Rewrite the catalog version in a data directory's global/pg_control.

The patch series bumps CATALOG_VERSION_NO (its only catalog change is the
output columns of pg_stat_get_recovery_prefetch()), so a cluster made by
vanilla PostgreSQL is refused by the patched server.  Benchmarks that replay
one crashed cluster with both servers use this on their copy of it.  Recovery
does not read the catalogs, so the replay is the same.

usage: pg_control_catversion.py DATADIR CATVERSION
"""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def crc_offset(control):
    # The CRC is the last field of ControlFileData and covers what precedes
    # it; find it rather than hard-coding the struct layout.
    for offset in range(16, 1024, 4):
        stored, = struct.unpack_from("<I", control, offset)
        if stored == crc32c(control[:offset]):
            return offset
    sys.exit("no valid CRC found in pg_control")


def main():
    datadir, catversion = sys.argv[1], int(sys.argv[2])
    path = datadir + "/global/pg_control"
    with open(path, "rb") as f:
        control = bytearray(f.read())
    offset = crc_offset(control)
    # system_identifier (8 bytes), pg_control_version (4), catalog_version_no (4)
    struct.pack_into("<I", control, 12, catversion)
    struct.pack_into("<I", control, offset, crc32c(control[:offset]))
    with open(path, "wb") as f:
        f.write(control)


if __name__ == "__main__":
    main()
