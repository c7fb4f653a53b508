"""A Python program that reads NVML through NVIDIA's pynvml (PyPI's nvidia-ml-py, which
dlopens libnvidia-ml.so.1) and uses a GPU through the CUDA driver (ctypes, libcuda.so.1).
It knows nothing of tessera.

usage: pynvml_client.py tenant MIB     nvmlInit, allocate MIB on device 0, print what
                                       NVML shows, "done", wait for stdin to close
       pynvml_client.py neighbour MIB  allocate MIB on device 0, "allocated", wait
       pynvml_client.py outside        print what NVML shows (no CUDA)
What NVML shows: "count N"; per device I "device I UUID", "memory I TOTAL USED FREE"
(v1), "memory2 I TOTAL USED FREE" (v2), "processes I PID,..." (compute processes);
"uuid G found|error CODE" for the machine's GPUs G 0 and 1 looked up by UUID.
"pid PID" first; "error STEP CODE" on a CUDA failure, exiting 2.
"""
import ctypes
import os
import sys

import pynvml


def cuda_alloc(mib):
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(step, r):
        if r != 0:
            print("error", step, r, flush=True)
            sys.exit(2)

    check("init", cuda.cuInit(0))
    dev = ctypes.c_int()
    check("device", cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check("context", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("current", cuda.cuCtxSetCurrent(ctx))
    ptr = ctypes.c_uint64()
    check("alloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20)))


def show():
    n = pynvml.nvmlDeviceGetCount()
    print("count", n)
    for i in range(n):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        print("device", i, uuid.decode() if isinstance(uuid, bytes) else uuid)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        print("memory", i, m.total, m.used, m.free)
        m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        print("memory2", i, m2.total, m2.used, m2.free)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        print("processes", i, ",".join(str(p.pid) for p in procs))
    for g in range(2):
        try:
            pynvml.nvmlDeviceGetHandleByUUID("GPU-fa000000-0000-0000-0000-0000000000%02x" % g)
            print("uuid", g, "found")
        except pynvml.NVMLError as e:
            print("uuid", g, "error", e.value)


mode = sys.argv[1]
print("pid", os.getpid(), flush=True)
if mode == "neighbour":
    cuda_alloc(int(sys.argv[2]))
    print("allocated", flush=True)
    sys.stdin.read()
elif mode == "tenant":
    pynvml.nvmlInit()
    cuda_alloc(int(sys.argv[2]))
    show()
    print("done", flush=True)
    sys.stdin.read()
else:
    pynvml.nvmlInit()
    show()
    print("done", flush=True)
