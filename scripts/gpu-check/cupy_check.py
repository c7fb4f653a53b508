"""CuPy (cupy-cuda13x) under tessera (issue 52, item 3): a kernel with a checked result,
and the memory limit respected. Run directly and under `tessera run --memory ...`.

usage: cupy_check.py

Steps: meminfo (cupy.cuda.runtime.memGetInfo: the limit under tessera), kernel (a
RawKernel axpy compiled by NVRTC, and a reduction of CuPy's own, both checked on the
host), past_limit (an array past the limit raises cupy's OutOfMemoryError at once),
retry (the memory pool's cached blocks freed, a quarter of the limit allocated and
filled). Prints one JSON object per line (common.Report); the last is the result.
"""

from common import MIB, PAST_LIMIT, Report, import_or_skip, oom_probe

AXPY = r"""
extern "C" __global__ void axpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def main():
    report = Report("cupy_check", "all")
    cp = import_or_skip(report, "cupy")
    np = import_or_skip(report, "numpy")
    report.set(cupy=cp.__version__)
    total = None
    with report.step("meminfo") as entry:
        free, total = cp.cuda.runtime.memGetInfo()
        entry.update(free_bytes=free, total_bytes=total)
        entry["gpu"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode(errors="replace")
    with report.step("kernel") as entry:
        n = 1 << 22
        x_h = (np.arange(n) % 7).astype(np.float32)
        x = cp.asarray(x_h)
        y = cp.ones(n, dtype=cp.float32)
        k = cp.RawKernel(AXPY, "axpy")
        for _ in range(10):
            k(((n + 255) // 256,), (256,), (cp.float32(0.5), x, y, cp.uint32(n)))
        got = cp.asnumpy(y)
        want = 1.0 + 10 * 0.5 * x_h
        entry["max_error"] = float(np.abs(got - want).max())
        # CuPy's own elementwise and reduction kernels, in float64: an exact sum here
        dot = float((x.astype(cp.float64) * y.astype(cp.float64)).sum().get())
        exact = float(np.dot(x_h.astype(np.float64), want.astype(np.float64)))
        entry["reduction_error"] = abs(dot - exact) / max(1.0, abs(exact))
        entry["correct"] = bool(entry["max_error"] < 1e-3 and entry["reduction_error"] < 1e-9)
        del x, y
    if total is None:
        report.done()
        return
    with report.step("past_limit") as entry:
        entry["asked_bytes"] = total + PAST_LIMIT
        oom_probe(
            entry,
            lambda: cp.empty(total + PAST_LIMIT, dtype=cp.uint8),
            lambda e: isinstance(e, cp.cuda.memory.OutOfMemoryError),
        )
    with report.step("retry") as entry:
        cp.get_default_memory_pool().free_all_blocks()
        c = cp.ones(total // 4 // 4, dtype=cp.int32)
        entry["sum_ok"] = bool(int(c.sum(dtype=cp.int64).get()) == c.size)
        entry["allocated_mib"] = c.nbytes // MIB
        if not entry["sum_ok"]:
            raise RuntimeError("an array of ones did not sum to its size")
        del c
        cp.get_default_memory_pool().free_all_blocks()
    report.done()


if __name__ == "__main__":
    main()
