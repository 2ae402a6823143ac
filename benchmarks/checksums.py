"""What verifying a result's checksums costs: xxh3 (`sgt_core.artifacts.checksum`) over files of given sizes.

A cache hit on a result that a run reads or reports is verified by reading every file of it once. This
writes files of the sizes asked for (random bytes: xxh3's speed does not depend on them), then times the
checksum of all of them twice: cold, after asking the kernel to drop the files from its page cache
(posix_fadvise DONTNEED on these files only, so other processes' cached files are left alone), and warm.

    python -m benchmarks.checksums --sizes-mb 1800 1800 4 --folder /tmp/checksums   # then delete the folder
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from sgt_core.artifacts import checksum

CHUNK = 64 << 20


def write_file(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(CHUNK, left))
            handle.write(block)
            left -= len(block)
        handle.flush()
        os.fsync(handle.fileno())  # written back, so that dropping it from the page cache takes


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def time_checksums(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        checksum(path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=float, nargs="+", required=True, help="one file of each size, MB")
    parser.add_argument("--folder", type=Path, required=True, help="where the files are written (kept)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, size_mb in enumerate(args.sizes_mb):
        path = args.folder / f"file_{index}.bin"
        if not path.is_file() or path.stat().st_size != int(size_mb * 1e6):
            write_file(path, int(size_mb * 1e6))
        paths.append(path)
    total_gb = sum(path.stat().st_size for path in paths) / 1e9
    for run in range(args.repeats):
        for path in paths:
            drop_from_page_cache(path)
        cold = time_checksums(paths)
        warm = time_checksums(paths)
        print(f"run {run}: {total_gb:.2f} GB in {len(paths)} files: cold {cold:.2f} s ({total_gb / cold:.2f} GB/s), "
              f"warm {warm:.2f} s ({total_gb / warm:.2f} GB/s)", flush=True)


if __name__ == "__main__":
    main()
