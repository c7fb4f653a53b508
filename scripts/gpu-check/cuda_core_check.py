"""cuda-core (NVIDIA's cuda.core, over cuda-bindings) under tessera (issue 52, item 3): a
kernel with a checked result, and the memory limit respected. Run directly and under
`tessera run --memory ...`.

usage: cuda_core_check.py

Steps: meminfo (cuda.bindings' cuMemGetInfo: the limit under tessera), kernel (CUDA C++
compiled by cuda.core's Program through NVRTC, buffers from the device's memory
resource — stream-ordered pool allocations on CUDA 13 — launched with cuda.core's
launch, checked on the host), past_limit (a buffer past the limit is refused at once
with CUDA_ERROR_OUT_OF_MEMORY), retry (a quarter of the limit allocated and written).
Works with cuda.core's current API and with the older cuda.core.experimental one.
Prints one JSON object per line (common.Report); the last is the result.
"""

from common import MIB, PAST_LIMIT, Report, import_or_skip, oom_probe

AXPY = r"""
extern "C" __global__ void axpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def checked(result):
    """A cuda.bindings call's result tuple without its status, or an error."""
    status, rest = result[0], result[1:]
    if int(status) != 0:
        raise RuntimeError(f"cuda.bindings call failed: {status!r}")
    return rest


def main():
    report = Report("cuda_core_check", "all")
    np = import_or_skip(report, "numpy")
    core = import_or_skip(report, "cuda.core")
    if not hasattr(core, "Device"):
        core = import_or_skip(report, "cuda.core.experimental")
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python before cuda-bindings split out
        except ImportError as e:
            report.skip(f"import cuda.bindings failed: {type(e).__name__}: {e}")
    try:
        import importlib.metadata as md

        report.set(cuda_core=md.version("cuda-core"), cuda_bindings=md.version("cuda-bindings"))
    except Exception:  # noqa: BLE001 - versions are informative only
        pass
    dev = stream = None
    with report.step("init") as entry:
        dev = core.Device(0)
        dev.set_current()
        cc = dev.compute_capability
        entry["arch"] = f"sm_{cc[0]}{cc[1]}"
        entry["gpu"] = dev.name
        stream = dev.create_stream()
    if not report.data["steps"]["init"]["ok"]:
        report.done()
        return
    total = None
    with report.step("meminfo") as entry:
        free, total = (int(v) for v in checked(driver.cuMemGetInfo()))
        entry.update(free_bytes=free, total_bytes=total)
    with report.step("kernel") as entry:
        arch = report.data["steps"]["init"]["arch"]
        try:
            prog = core.Program(AXPY, code_type="c++", options=core.ProgramOptions(arch=arch))
        except (AttributeError, TypeError):
            prog = core.Program(AXPY, "c++")
        kernel = prog.compile("cubin").get_kernel("axpy")
        n = 1 << 22
        nbytes = n * 4
        x_h = (np.arange(n) % 7).astype(np.float32)
        y_h = np.ones(n, dtype=np.float32)
        bx = dev.allocate(nbytes, stream=stream)
        by = dev.allocate(nbytes, stream=stream)
        stream.sync()
        checked(driver.cuMemcpyHtoD(int(bx.handle), x_h.ctypes.data, nbytes))
        checked(driver.cuMemcpyHtoD(int(by.handle), y_h.ctypes.data, nbytes))
        config = core.LaunchConfig(grid=(n + 255) // 256, block=256)
        for _ in range(10):
            core.launch(stream, config, kernel, np.float32(0.5), bx, by, np.uint32(n))
        stream.sync()
        got = np.empty(n, dtype=np.float32)
        checked(driver.cuMemcpyDtoH(got.ctypes.data, int(by.handle), nbytes))
        entry["max_error"] = float(np.abs(got - (1.0 + 10 * 0.5 * x_h)).max())
        entry["correct"] = bool(entry["max_error"] < 1e-3)
        bx.close(stream)
        by.close(stream)
        stream.sync()
    if total is None:
        report.done()
        return
    with report.step("past_limit") as entry:
        entry["asked_bytes"] = total + PAST_LIMIT

        def allocate():
            buf = dev.allocate(total + PAST_LIMIT, stream=stream)
            stream.sync()
            return buf

        oom_probe(entry, allocate, lambda e: "OUT_OF_MEMORY" in str(e))
    with report.step("retry") as entry:
        size = total // 4
        buf = dev.allocate(size, stream=stream)
        stream.sync()
        checked(driver.cuMemsetD8(int(buf.handle), 42, size))
        last = np.zeros(1, dtype=np.uint8)
        checked(driver.cuMemcpyDtoH(last.ctypes.data, int(buf.handle) + size - 1, 1))
        entry["allocated_mib"] = size // MIB
        entry["written_ok"] = bool(int(last[0]) == 42)
        if not entry["written_ok"]:
            raise RuntimeError("a byte written to the buffer's end did not come back")
        buf.close(stream)
        stream.sync()
    report.done()


if __name__ == "__main__":
    main()
