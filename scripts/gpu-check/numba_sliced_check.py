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
import pathlib
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
    report["corpus"] = corpus(np, cuda)
    print(json.dumps(report), flush=True)


def corpus(np, cuda):
    """The numba kernels of the PTX corpus (crates/tessera-ptx/tests/data/corpus.py)
    launched with more than 1,000 blocks each, so that under the check's settings they
    run as sub-kernels: numba passes each array as seven parameters, the layout a twin's
    four added ones must extend. Per kernel: its output's SHA-256 (compared between the
    sliced and the whole run) and whether it equals numpy's."""
    rng = np.random.default_rng(58)
    out = {}
    # the corpus's own kernels, compiled for the signatures the corpus gives them
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "crates/tessera-ptx/tests/data"))
    from corpus import numba_kernels

    kernels = {name: cuda.jit(sig)(fn) for name, fn, sig in numba_kernels()}
    saxpy, grid_stride, grid3d, block_sum = (
        kernels[k] for k in ("saxpy", "grid_stride", "grid3d", "block_sum")
    )

    def record(name, host, expected, exact=True):
        same = (host == expected) if exact else np.isclose(host, expected, rtol=1e-5, atol=1e-4)
        out[name] = {
            "digest": hashlib.sha256(host.tobytes()).hexdigest(),
            "matches_expected": bool(same.all()),
        }

    n = 1500 * 128
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    res = cuda.to_device(np.zeros(n, dtype=np.float32))
    saxpy[1500, 128](np.float32(2.5), cuda.to_device(x), cuda.to_device(y), res)
    record("saxpy", res.copy_to_host(), np.float32(2.5) * x + y)
    big = rng.standard_normal(4 * n, dtype=np.float32)
    res = cuda.to_device(np.zeros(4 * n, dtype=np.float32))
    grid_stride[1500, 128](cuda.to_device(big), res)
    record("grid_stride", res.copy_to_host(), big * np.float32(2.0))
    shape, block = (64, 64, 32), (4, 4, 4)
    grid = tuple(s // b for s, b in zip(shape, block))  # 16 x 16 x 8 = 2,048 blocks
    res = cuda.to_device(np.full(shape, -1, dtype=np.int32))
    grid3d[grid, block](res)
    gx, gy, gz = np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")
    record("grid3d", res.copy_to_host(), (gx + shape[0] * (gy + shape[1] * gz)).astype(np.int32))
    blocks = 1200
    v = rng.standard_normal(blocks * 256, dtype=np.float32)
    res = cuda.to_device(np.zeros(blocks, dtype=np.float32))
    block_sum[blocks, 256](cuda.to_device(v), res)
    # the tree's order differs from numpy's sum: equal within float32's rounding; the
    # sliced and whole runs are compared bit for bit by their digests
    record("block_sum", res.copy_to_host(), v.reshape(blocks, 256).sum(axis=1), exact=False)
    cuda.synchronize()
    return out


main()
