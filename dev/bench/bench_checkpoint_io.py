"""Sequential-I/O baseline for dev/bench/bench_checkpoint.sh, and page-cache eviction.

    bench_checkpoint_io.py write FILE BYTES   write BYTES (16 MiB blocks of non-zero data) and fsync;
                                              prints "seconds GB/s"
    bench_checkpoint_io.py read FILE...       evict the files from the page cache, read them one after
                                              the other, sequentially; prints "seconds GB/s" (all files)
    bench_checkpoint_io.py read-direct FILE...
                                              the same with O_DIRECT (no page cache: the device's speed,
                                              what the checkpoint reader does where it can)
    bench_checkpoint_io.py evict PATH...      drop the files (recursively) from the page cache

Eviction uses posix_fadvise(POSIX_FADV_DONTNEED) after fsync, which drops the clean pages of
one file without needing root (unlike /proc/sys/vm/drop_caches), so reads come from the disk.
GB = 1e9 bytes.
"""
import os
import sys
import time

BLOCK = 16 << 20


def files_under(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                for n in names:
                    yield os.path.join(root, n)
        elif os.path.isfile(p):
            yield p


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        path, nbytes = sys.argv[2], int(sys.argv[3])
        block = bytearray(os.urandom(1 << 20)) * (BLOCK >> 20)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        t0 = time.perf_counter()
        left = nbytes
        view = memoryview(block)
        while left > 0:
            n = min(left, BLOCK)
            done = 0
            while done < n:
                done += os.write(fd, view[done:n])
            left -= n
        os.fsync(fd)
        dt = time.perf_counter() - t0
        os.close(fd)
        print(f"{dt:.3f} {nbytes / dt / 1e9:.3f}")
    elif cmd in ("read", "read-direct"):
        import mmap
        paths = sys.argv[2:]
        for path in paths:
            evict(path)
        flags = os.O_RDONLY | (os.O_DIRECT if cmd == "read-direct" else 0)
        buf = mmap.mmap(-1, BLOCK)   # page-aligned, as O_DIRECT needs
        nbytes = 0
        t0 = time.perf_counter()
        for path in paths:
            fd = os.open(path, flags)
            while True:
                n = os.readv(fd, [buf])
                if n <= 0:
                    break
                nbytes += n
                if n < BLOCK:   # end of file (O_DIRECT cannot read on from an unaligned offset)
                    break
            os.close(fd)
        dt = time.perf_counter() - t0
        print(f"{dt:.3f} {nbytes / dt / 1e9:.3f}")
    elif cmd == "evict":
        for f in files_under(sys.argv[2:]):
            evict(f)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
