#!/usr/bin/env python3
"""Read every file under a directory into the page cache in 8kB pieces, with
read-ahead disabled, so that the cache holds small folios as it would after
PostgreSQL's own random reads.  (Reading files sequentially, as cat does,
fills the cache with large folios, and on some kernels ext4 then spends most
of its time in every later 8kB write to them, which would make an "all
cached" run slower than a cold one.)

usage: warm_cache.py DIR
"""
import os
import sys

for root, _, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(root, name)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            while os.read(fd, 8192):
                pass
        finally:
            os.close(fd)
