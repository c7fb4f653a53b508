"""numba-cuda under tessera (issue 52, item 3): a kernel with a checked result, and the
memory limit respected. Run directly and under `tessera run --memory ...`.

usage: numba_check.py

Steps: meminfo (the context's get_memory_info: the limit under tessera), kernel (an
@cuda.jit axpy, compiled through NVVM, checked on the host), past_limit (a device array
past the limit is refused at once with CUDA_ERROR_OUT_OF_MEMORY), retry (a quarter of
the limit allocated, its last byte written by a kernel and read back). numba reaches
the driver through NVIDIA's cuda-bindings. Prints one JSON object per line
(common.Report); the last is the result.
"""

from common import MIB, PAST_LIMIT, Report, import_or_skip, oom_probe


def main():
    report = Report("numba_check", "all")
    np = import_or_skip(report, "numpy")
    numba = import_or_skip(report, "numba")
    if not hasattr(np, "row_stack"):
        # numba-cuda 0.30 registers an overload of np.row_stack, which numpy 2.5
        # removed (an alias of vstack since numpy 2.0): without the alias back, its CUDA
        # target fails to import, with or without tessera (seen on the H200,
        # 2026-11-28: numba-cuda 0.30.4, numpy 2.5.2). Set in both modes alike.
        np.row_stack = np.vstack
        report.set(numpy_shim=f"np.row_stack = np.vstack (numpy {np.__version__} has none)")
    try:
        from numba import cuda
    except Exception as e:  # noqa: BLE001 - numba without its CUDA target
        report.skip(f"from numba import cuda failed: {type(e).__name__}: {e}")
    report.set(numba=numba.__version__)
    try:
        import importlib.metadata as md

        report.set(numba_cuda=md.version("numba-cuda"))
    except Exception:  # noqa: BLE001 - an older numba with CUDA built in
        report.set(numba_cuda=None)

    @cuda.jit
    def axpy(a, x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = a * x[i] + y[i]

    @cuda.jit
    def poke(buf):
        if cuda.grid(1) == 0:
            buf[buf.size - 1] = 42

    total = None
    with report.step("meminfo") as entry:
        info = cuda.current_context().get_memory_info()
        free, total = int(info[0]), int(info[1])
        entry.update(free_bytes=free, total_bytes=total)
        name = cuda.get_current_device().name
        entry["gpu"] = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    with report.step("kernel") as entry:
        n = 1 << 22
        x_h = (np.arange(n) % 7).astype(np.float32)
        x = cuda.to_device(x_h)
        y = cuda.to_device(np.ones(n, dtype=np.float32))
        for _ in range(10):
            axpy[(n + 255) // 256, 256](np.float32(0.5), x, y)
        got = y.copy_to_host()
        entry["max_error"] = float(np.abs(got - (1.0 + 10 * 0.5 * x_h)).max())
        entry["correct"] = bool(entry["max_error"] < 1e-3)
        del x, y
    if total is None:
        report.done()
        return
    with report.step("past_limit") as entry:
        entry["asked_bytes"] = total + PAST_LIMIT
        oom_probe(
            entry,
            lambda: cuda.device_array(total + PAST_LIMIT, dtype=np.uint8),
            lambda e: "OUT_OF_MEMORY" in str(e) or getattr(e, "code", None) == 2,
        )
    with report.step("retry") as entry:
        buf = cuda.device_array(total // 4, dtype=np.uint8)
        poke[1, 32](buf)
        last = buf[buf.size - 1 :].copy_to_host()
        entry["allocated_mib"] = buf.size // MIB
        entry["written_ok"] = bool(int(last[0]) == 42)
        if not entry["written_ok"]:
            raise RuntimeError("the kernel's write to the last byte did not come back")
        del buf
    report.done()


if __name__ == "__main__":
    main()
