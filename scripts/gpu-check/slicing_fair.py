"""One program of the slicing fairness case (issue 58, item 3): spin kernels of one
length, launched one after another, as an unmodified driver-API program (its module
loaded with cuModuleLoadData, so that under `tessera run` with
TESSERA_KERNEL_SLICING=1 the interposer loads the kernel's twin and slices long
launches). A PTX path ending in .fatbin is a fat binary, given to the driver as is (as
the CUDA runtime gives nvcc's), whose PTX the interposer takes out.

usage: slicing_fair.py calibrate PTX KERNEL_MS BLOCKS
         prints the nanoseconds each block must spin for a launch of BLOCKS blocks
         (1,024 threads each) to take about KERNEL_MS, from a short launch timed alone
       slicing_fair.py run PTX NS BLOCKS SECONDS
         launches BLOCKS blocks spinning NS each, synchronising after each launch,
         until SECONDS have passed; prints one JSON line: launches, seconds, and the
         wall-clock time (time.time(), seconds) of its start and of each launch's end,
         from which scripts/gpu-slicing-check.sh computes each tenant's share of the GPU
         window by window
"""

import ctypes
import json
import sys
import time

from slicing_check import checked

THREADS = 1024


def main():
    from cuda.bindings import driver

    mode, ptx_path = sys.argv[1], sys.argv[2]
    checked(driver.cuInit(0))
    dev = checked(driver.cuDeviceGet(0))
    ctx = checked(driver.cuDevicePrimaryCtxRetain(dev))
    checked(driver.cuCtxSetCurrent(ctx))
    image = open(ptx_path, "rb").read()
    if not ptx_path.endswith(".fatbin"):
        image += b"\0"
    module = checked(driver.cuModuleLoadData(image))
    spin = checked(driver.cuModuleGetFunction(module, b"tessera_spin"))

    def launch(ns, blocks):
        value = ctypes.c_uint64(ns)
        args = (ctypes.c_void_p * 1)(ctypes.addressof(value))
        checked(driver.cuLaunchKernel(spin, blocks, 1, 1, THREADS, 1, 1, 0, 0, ctypes.addressof(args), 0))
        checked(driver.cuCtxSynchronize())

    if mode == "calibrate":
        kernel_ms, blocks = float(sys.argv[3]), int(sys.argv[4])
        probe_ns = 200_000
        launch(probe_ns, blocks)  # warm-up (the module's JIT)
        start = time.perf_counter()
        launch(probe_ns, blocks)
        took = max(time.perf_counter() - start, 1e-6)
        print(max(1, int(probe_ns * kernel_ms * 1e-3 / took)))
        return
    ns, blocks, seconds = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    wall_start = time.time()
    start = time.perf_counter()
    ends = []
    while time.perf_counter() - start < seconds:
        launch(ns, blocks)
        ends.append(round(time.time(), 6))
    print(json.dumps({"launches": len(ends), "seconds": time.perf_counter() - start,
                      "start": wall_start, "ends": ends}), flush=True)


if __name__ == "__main__":
    main()
