"""A third-party CUDA client, unmodified: numba-cuda (its driver API through NVIDIA's
cuda-bindings, which load libcuda.so.1 themselves). Run under `tessera run` by
tests/numba_cuda.rs. One line per fact the test checks:

  devices N           the devices numba sees
  meminfo FREE TOTAL  cuMemGetInfo of its context
  allocated MIB       a device array of MIB MiB (argv[1])
  refused MIB KIND    a device array of MIB MiB (argv[2]) refused: numba's own error
  compiled            the kernel compiled, loaded and launched once; it then waits
                      for a line on stdin
  launched            its second launch returned and synchronised
  result OK           the kernel's effect is not checked (the fake driver runs no
                      numba kernels); OK says the launches and copy-back succeeded
"""
import sys

import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import CudaAPIError


def main():
    fits, too_big = int(sys.argv[1]), int(sys.argv[2])
    print("devices", len(cuda.gpus), flush=True)
    free, total = cuda.current_context().get_memory_info()
    print("meminfo", free, total, flush=True)
    kept = cuda.device_array(fits << 20, dtype=np.uint8)
    print("allocated", fits, flush=True)
    try:
        cuda.device_array(too_big << 20, dtype=np.uint8)
        print("allocated", too_big, flush=True)
    except CudaAPIError as e:
        # numba's out-of-memory: CUDA_ERROR_OUT_OF_MEMORY (2) from cuMemAlloc
        print("refused", too_big, "out_of_memory" if e.code == 2 else f"code_{e.code}", flush=True)

    @cuda.jit
    def fill(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = 1

    fill[1, 32](kept[:32])
    cuda.synchronize()
    print("compiled", flush=True)
    sys.stdin.readline()
    fill[1, 32](kept[:32])
    cuda.synchronize()
    print("launched", flush=True)
    kept[:32].copy_to_host()
    print("result OK", flush=True)


main()
