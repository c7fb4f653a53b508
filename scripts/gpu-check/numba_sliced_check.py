"""numba-cuda's own kernel under kernel slicing (issue 58), run under `tessera run` by
scripts/gpu-slicing-check.sh, once with TESSERA_KERNEL_SLICING=1 and once without.

numba-cuda compiles a kernel to LTO-IR and links it with nvJitLink into a cubin, so no
PTX reaches the driver; the interposer's nvJitLink hooks link it again to PTX and load
that with the kernel's twin. The kernel writes, for every thread of a 2-D grid, a value
made of its block's coordinates, the grid's size and its thread index, so that a
sub-kernel that read a wrong block index or grid size would write a wrong value.

usage: numba_sliced_check.py BLOCKS_X BLOCKS_Y
Prints one JSON line: the output's SHA-256, whether it equals what numpy computes for
the unsliced launch, the blocks launched, and numba-cuda's version.
"""
import hashlib
import json
import sys

THREADS = 128


def main():
    nx, ny = int(sys.argv[1]), int(sys.argv[2])
    report = {"blocks": nx * ny}
    try:
        import numpy as np

        if not hasattr(np, "row_stack"):
            # numba-cuda 0.30 registers an overload of np.row_stack, which numpy 2.5
            # removed: without the alias back its CUDA target fails to compile a kernel
            # (seen on the H200, 2026-12-04, in both modes; numba_check.py does the same)
            np.row_stack = np.vstack
            report["numpy_shim"] = f"np.row_stack = np.vstack (numpy {np.__version__} has none)"
        import numba_cuda
        from numba import cuda
    except Exception as e:  # noqa: BLE001 - reported, not raised
        report["skipped"] = f"numba-cuda not importable: {type(e).__name__}: {e}"
        print(json.dumps(report), flush=True)
        return

    @cuda.jit
    def stamp(out):
        x = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        y = cuda.blockIdx.y
        if x < out.shape[0] and y < out.shape[1]:
            block = cuda.blockIdx.x * 7919 + cuda.blockIdx.y * 104729
            grid = cuda.gridDim.x * 31 + cuda.gridDim.y
            out[x, y] = (block + grid) * 1000003 + cuda.threadIdx.x

    out = cuda.to_device(np.full((nx * THREADS, ny), -1, dtype=np.int64))
    stamp[(nx, ny), THREADS](out)
    cuda.synchronize()
    host = out.copy_to_host()
    xs = np.arange(nx * THREADS, dtype=np.int64)
    bx, t = xs // THREADS, xs % THREADS
    by = np.arange(ny, dtype=np.int64)
    expected = ((bx[:, None] * 7919 + by[None, :] * 104729) + (nx * 31 + ny)) * 1000003 + t[:, None]
    report.update(
        digest=hashlib.sha256(host.tobytes()).hexdigest(),
        matches_expected=bool((host == expected).all()),
        differing=int((host != expected).sum()),
        numba_cuda=getattr(numba_cuda, "__version__", "?"),
    )
    print(json.dumps(report), flush=True)


main()
