"""numba-cuda, unmodified, launching one kernel over more blocks than the interposer's
slicing threshold (run under `tessera run` by tests/numba_cuda.rs, kernel slicing on):
numba compiles its kernel to LTO-IR, links it with nvJitLink and loads the cubin as a CUDA 12 library
(`cuLibraryLoadData`), launching it by its `CUkernel`. Prints "launched BLOCKS" once
the launch returned and synchronised (the fake driver runs no numba kernel: the test
reads its log of launches).
"""
import sys

import numpy as np
from numba import cuda


def main():
    blocks = int(sys.argv[1])
    x = cuda.device_array(blocks * 32, dtype=np.float32)

    @cuda.jit
    def fill(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = cuda.blockIdx.x

    fill[blocks, 32](x)
    cuda.synchronize()
    print("launched", blocks, flush=True)


main()
