"""A third-party CUDA client, unmodified in what it loads: NVIDIA's cuda-bindings
(PyPI), the driver API alone through `cuda.bindings.driver`, which loads libcuda.so.1
itself and asks the driver for each entry point by the CUDA version it was built for
(12.x: 12000-ish, 13.x: 13000). Run under `tessera run` by tests/cuda_bindings.rs, with
12.9.x and with 13.x. Uses only calls whose Python signature is the same in both: the
primary context (cuDevicePrimaryCtxRetain, cuCtxSetCurrent), not cuCtxCreate, whose
arguments changed in 13.0.

usage: cuda_bindings_client.py FITS_MIB TOO_BIG_MIB

One line per fact the test checks:

  version V               cuda.bindings.__version__
  devices N               cuDeviceGetCount
  meminfo FREE TOTAL      cuMemGetInfo in the primary context of device 0
  allocated MIB           cuMemAlloc of FITS_MIB MiB, kept
  refused MIB ERROR       cuMemAlloc of TOO_BIG_MIB MiB beside it, and the driver's
                          error (or "allocated MIB" where it was not refused)
  retried MIB RESULT      the same allocation once the kept one is freed
  loaded                  a PTX module loaded and its tessera_axpy found
  result OK|WRONG ...     tessera_axpy (y = a*x + y) launched, its y copied back and
                          compared with what the fake driver computes
  context13 device D synchronized
                          13.x only: cuCtxGetDevice_v2 and cuCtxSynchronize_v2 of
                          the primary context while no context is current

Any error the checks do not expect is printed as "error CALL NAME"; the exit status is
1 when a check failed.
"""
import ctypes
import sys

import cuda.bindings
from cuda.bindings import driver as cu

PTX = b"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry tessera_axpy(.param .f32 a, .param .u64 x, .param .u64 y, .param .u32 n)
{
    ret;
}
\0"""


class Failed(Exception):
    pass


def name(err):
    return err.name if hasattr(err, "name") else str(err)


def check(call, *args):
    """cuda-bindings answers (CUresult, outputs...): the outputs, or stop naming the
    call and the driver's error."""
    out = call(*args)
    err, rest = (out[0], out[1:]) if isinstance(out, tuple) else (out, ())
    if err != cu.CUresult.CUDA_SUCCESS:
        raise Failed(f"error {call.__name__} {name(err)}")
    return rest[0] if len(rest) == 1 else rest


def main():
    fits, too_big = int(sys.argv[1]), int(sys.argv[2])
    ok = True
    print("version", cuda.bindings.__version__, flush=True)
    check(cu.cuInit, 0)
    print("devices", check(cu.cuDeviceGetCount), flush=True)
    dev = check(cu.cuDeviceGet, 0)
    ctx = check(cu.cuDevicePrimaryCtxRetain, dev)
    check(cu.cuCtxSetCurrent, ctx)
    free, total = check(cu.cuMemGetInfo)
    print("meminfo", free, total, flush=True)

    kept = check(cu.cuMemAlloc, fits << 20)
    print("allocated", fits, flush=True)
    err, big = cu.cuMemAlloc(too_big << 20)
    if err == cu.CUresult.CUDA_SUCCESS:
        # over the tenant's share beside the kept allocation: should have been refused
        print("allocated", too_big, flush=True)
        check(cu.cuMemFree, big)
        ok = False
    else:
        print("refused", too_big, name(err), flush=True)
    check(cu.cuMemFree, kept)
    err, big = cu.cuMemAlloc(too_big << 20)
    print("retried", too_big, name(err), flush=True)
    if err == cu.CUresult.CUDA_SUCCESS:
        check(cu.cuMemFree, big)
    else:
        ok = False

    module = check(cu.cuModuleLoadData, PTX)
    axpy = check(cu.cuModuleGetFunction, module, b"tessera_axpy")
    print("loaded", flush=True)
    n, a = 256, 2.0
    x = (ctypes.c_float * n)(*range(n))
    y = (ctypes.c_float * n)(*([1.0] * n))
    size = ctypes.sizeof(x)
    dx, dy = check(cu.cuMemAlloc, size), check(cu.cuMemAlloc, size)
    check(cu.cuMemcpyHtoD, dx, ctypes.addressof(x), size)
    check(cu.cuMemcpyHtoD, dy, ctypes.addressof(y), size)
    # the kernel's parameters as the driver takes them: an array of pointers to each
    # (an address, which both 12.x and 13.x pass through unchanged)
    values = [
        ctypes.c_float(a),
        ctypes.c_uint64(int(dx)),
        ctypes.c_uint64(int(dy)),
        ctypes.c_uint32(n),
    ]
    params = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
    threads = 128
    check(cu.cuLaunchKernel, axpy, (n + threads - 1) // threads, 1, 1, threads, 1, 1, 0, 0,
          ctypes.addressof(params), 0)
    check(cu.cuCtxSynchronize)
    out = (ctypes.c_float * n)()
    check(cu.cuMemcpyDtoH, ctypes.addressof(out), dy, size)
    wrong = [i for i in range(n) if out[i] != a * i + 1.0]
    if wrong:
        i = wrong[0]
        print("result WRONG", len(wrong), f"y[{i}]={out[i]}", flush=True)
        ok = False
    else:
        print("result OK", flush=True)
    check(cu.cuMemFree, dx)
    check(cu.cuMemFree, dy)

    if hasattr(cu, "cuCtxGetDevice_v2"):
        # 13.x's forms that name their context, found by cuGetProcAddress at 13000:
        # with no context current they work only if that look-up answered CUDA 13's
        # variant (the CUDA 12 ones it replaces use the current context)
        check(cu.cuCtxSetCurrent, cu.CUcontext(0))
        device = check(cu.cuCtxGetDevice_v2, ctx)
        check(cu.cuCtxSynchronize_v2, ctx)
        print("context13 device", int(device), "synchronized", flush=True)
        check(cu.cuCtxSetCurrent, ctx)
    check(cu.cuDevicePrimaryCtxRelease, dev)
    return ok


try:
    sys.exit(0 if main() else 1)
except Failed as e:
    print(e, flush=True)
    sys.exit(1)
