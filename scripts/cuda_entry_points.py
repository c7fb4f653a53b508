#!/usr/bin/env python3
"""Every entry point of NVIDIA's cuda.h that allocates device memory, launches work on
a GPU or names a device, and what tessera's interposer (libtessera_cuda.so) does with
each: the table in docs/interposer-entry-points.md, which a test regenerates from the
header the tests fetch and compares (so that a new header adding such an entry point
fails the test until the table says what happens to it).

usage: scripts/cuda_entry_points.py --header CUDA_H [--header CUDA_H ...] --interposer LIBTESSERA_CUDA_SO
                                    [--markdown OUT] [--check]
  --check   exit 1 when an entry point's name looks like it takes resources or does
            work but no rule classifies it (unreviewed), when a classified entry
            point has no rule saying what the interposer does with it, or when the
            interposer exports some names of an entry point but not all (escapes: a
            per-thread-stream _ptsz/_ptds or legacy name left to the driver).

How names are found: the header is run through the C preprocessor (`$CC -E -P`) three
times — plainly (the _v2/_v3 names a program links), with
CUDA_API_PER_THREAD_DEFAULT_STREAM (the _ptsz/_ptds names) and with
__CUDA_API_VERSION_INTERNAL (the legacy un-suffixed ABI the driver still exports) —
and every `CUresult cuX(...)` declaration is collected. A name's family is the name
without _ptsz/_ptds and _vN, so that a future _v3 inherits its family's rules.
Categories come from NAME_RULES (names) and from parameter types (a CUdevice or
CUmemLocation, or a struct containing one, makes an entry point name a device). What
the interposer does comes from whether libtessera_cuda.so exports the symbol (`nm -D`)
and from HOOKED / PASSES below.
"""
import argparse
import os
import re
import subprocess
import sys
from collections import OrderedDict

DEFAULT_HEADER = os.path.join(
    os.environ.get("TESSERA_NVIDIA_DIR", "/root/.cache/tessera/nvidia-cu12.9"),
    "include/cuda.h")

CONFIGS = OrderedDict([
    ("default", []),
    ("ptds", ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"]),
    ("internal", ["-D__CUDA_API_VERSION_INTERNAL"]),
])

# ---------------------------------------------------------------- rules ----
# (category, base-name regex, reason). First match per category wins; a
# symbol can collect several categories (e.g. cuCtxCreate: alloc + device).
NAME_RULES = [
    # device memory
    ("alloc", r"cuMemAlloc(?!Host)\w*", "allocates device/managed memory (returns a CUdeviceptr)"),
    ("alloc", r"cuMemCreate", "creates a physical allocation (VMM) on a location"),
    ("alloc", r"cu(Mipmapped)?Array(3D)?Create", "allocates a CUDA array in device memory"),
    ("alloc", r"cuMemPoolCreate", "creates a memory pool that reserves/holds device memory"),
    ("alloc", r"cuMemPoolImportPointer", "imports another process's pool allocation (new CUdeviceptr)"),
    ("alloc", r"cuMemPoolImportFromShareableHandle", "imports a memory pool from another process"),
    ("alloc", r"cuMemImportFromShareableHandle", "imports a physical allocation handle (released by cuMemRelease)"),
    ("alloc", r"cuMemRetainAllocationHandle", "takes a reference on an allocation handle (needs cuMemRelease)"),
    ("alloc", r"cuMemMap(ArrayAsync)?", "maps physical memory into a VA range / sparse array (memory itself counted at create/import)"),
    ("alloc", r"cuIpcOpenMemHandle", "maps another process's device allocation (new CUdeviceptr)"),
    ("alloc", r"cuImportExternalMemory", "imports an external (Vulkan/D3D/fd) memory object"),
    ("alloc", r"cuExternalMemoryGetMapped(Buffer|MipmappedArray)", "maps imported external memory as device pointer / mipmapped array"),
    ("alloc", r"cuMulticastCreate", "creates a multicast object (handle released by cuMemRelease)"),
    ("alloc", r"cuGraphAddMemAllocNode", "graph memory-allocation node"),
    ("alloc", r"cuGraphAddNode", "generic node add: CU_GRAPH_NODE_TYPE_MEM_ALLOC allocates"),
    ("alloc", r"cu(Green)?CtxCreate", "creates a context (context state takes device memory)"),
    ("alloc", r"cuCtxAttach", "legacy: increments context refcount (pairs with cuCtxDetach)"),
    ("alloc", r"cuDevicePrimaryCtxRetain", "retains/creates the primary context (takes device memory)"),
    ("alloc", r"cuCtxSetLimit", "stack/malloc-heap/printf-FIFO limits are backed by device memory"),
    ("alloc", r"cuModuleLoad\w*", "loads module code+globals into device memory"),
    ("alloc", r"cuLibraryLoad\w*", "loads library code+globals into device memory"),
    ("alloc", r"cuFuncLoad", "loads a lazily-loaded function's code into device memory"),
    ("alloc", r"cu(Tex|Surf)ObjectCreate", "creates a texture/surface object (descriptor in device memory)"),
    # releases
    ("free", r"cuMemFree(?!Host)\w*", "frees device/managed/pool memory"),
    ("free", r"cuMemRelease", "releases a physical allocation / multicast / imported handle"),
    ("free", r"cuMemUnmap", "unmaps a VA range (pairs with cuMemMap)"),
    ("free", r"cuMemMapArrayAsync", "sparse array unmap via CUarrayMapInfo (same call maps)"),
    ("free", r"cu(Mipmapped)?ArrayDestroy", "frees a CUDA array"),
    ("free", r"cuMemPoolDestroy", "destroys a memory pool and its reserved memory"),
    ("free", r"cuMemPoolTrimTo", "returns pool-held memory to the OS"),
    ("free", r"cuIpcCloseMemHandle", "unmaps another process's allocation"),
    ("free", r"cuDestroyExternalMemory", "releases an imported external memory object"),
    ("free", r"cuGraphAddMemFreeNode", "graph memory-free node"),
    ("free", r"cuGraphAddNode", "generic node add: CU_GRAPH_NODE_TYPE_MEM_FREE frees"),
    ("free", r"cuDeviceGraphMemTrim", "returns unused graph memory to the OS"),
    ("free", r"cu(Green)?CtxDestroy", "destroys a context"),
    ("free", r"cuCtxDetach", "legacy: decrements context refcount"),
    ("free", r"cuDevicePrimaryCtx(Release|Reset)", "releases/resets the primary context"),
    ("free", r"cuModuleUnload", "unloads a module"),
    ("free", r"cuLibraryUnload", "unloads a library"),
    ("free", r"cu(Tex|Surf)ObjectDestroy", "destroys a texture/surface object"),
    # host (pinned) memory
    ("host-alloc", r"cuMemAllocHost|cuMemHostAlloc", "allocates page-locked, device-mapped host memory"),
    ("host-alloc", r"cuMemHostRegister", "page-locks and maps existing host memory for the device"),
    ("host-free", r"cuMemFreeHost", "frees page-locked host memory"),
    ("host-free", r"cuMemHostUnregister", "unpins host memory registered by cuMemHostRegister"),
    # work on the GPU
    ("launch", r"cuLaunchCooperativeKernelMultiDevice", "launches a cooperative kernel on several devices' streams"),
    ("launch", r"cuLaunch|cuLaunchGrid(Async)?", "legacy launch (parameters set by cuParamSet*/cuFuncSetBlockShape)"),
    ("launch", r"cuLaunch(?!HostFunc)\w*", "launches a kernel"),
    ("launch", r"cuGraphLaunch", "launches an executable graph"),
    ("launch", r"cuGraphUpload", "enqueues an exec graph's upload to the device (no kernels run)"),
    ("host-launch", r"cuLaunchHostFunc", "enqueues a host function on a stream"),
    ("host-launch", r"cuStreamAddCallback", "enqueues a host callback on a stream"),
    ("copy", r"cuMemcpy\w*", "memory copy"),
    ("copy", r"cuMemset\w*", "memory set"),
    ("copy", r"cuMemPrefetchAsync", "migrates managed memory to a location"),
    ("copy", r"cuMemBatchDecompressAsync", "decompression engine writes device memory"),
    # what the launch gate must know of streams: a launch into a capturing stream is
    # recorded into a graph, not run, and a synchronisation invalidates the capture
    ("capture", r"cuStreamBeginCapture(ToGraph)?|cuStreamEndCapture", "begins or ends a stream capture (launches into the stream are recorded into a graph, not run)"),
    ("capture", r"cuStreamIsCapturing|cuStreamGetCaptureInfo", "a stream's capture status"),
    ("sync", r"cuStreamSynchronize|cuStreamQuery", "waits for, or asks after, a stream's work (not allowed on a capturing stream)"),
    ("sync", r"cuCtxSynchronize", "waits for the context's work (invalidates a global or thread-local capture)"),
]

# Base names in the device category although no parameter is a CUdevice /
# CUmemLocation (they report or act on a device implicitly).
DEVICE_EXTRA = {
    "cuDeviceGetCount": "enumerates devices",
    "cuMemGetInfo": "free/total memory of the current context's device",
    "cuCtxEnablePeerAccess": "peer device access via the peer's context",
    "cuCtxDisablePeerAccess": "peer device access via the peer's context",
    "cuPointerGetAttribute": "CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL returns a device ordinal",
    "cuPointerGetAttributes": "CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL returns a device ordinal",
    "cuMemRangeGetAttribute": "PREFERRED/LAST_PREFETCH_LOCATION return device ids",
    "cuMemRangeGetAttributes": "PREFERRED/LAST_PREFETCH_LOCATION return device ids",
}

# Matched SUSPECT_RE, reviewed, deliberately in no category.
NOT_IN_CATEGORY = {
    "cuMemAddressReserve": "reserves virtual address space only",
    "cuMemAddressFree": "frees virtual address space only",
    "cuMemGetAddressRange": "query",
    "cuMemHostGetDevicePointer": "query (device alias of pinned host memory)",
    "cuMemHostGetFlags": "query",
    "cuMemGetAllocationPropertiesFromHandle": "query",
    "cuMemExportToShareableHandle": "exports a handle; no new memory",
    "cuMemPoolExportToShareableHandle": "exports a handle; no new memory",
    "cuMemPoolExportPointer": "exports a handle; no new memory",
    "cuMemGetHandleForAddressRange": "exports a dma-buf fd; no new memory",
    "cuMulticastBindMem": "binds existing memory to a multicast object",
    "cuMulticastBindAddr": "binds existing memory to a multicast object",
    "cuMulticastUnbind": "unbinds (no memory freed)",
    "cuMulticastGetGranularity": "query",
    "cuEventCreate": "host/driver object",
    "cuEventDestroy": "host/driver object",
    "cuStreamCreate": "stream object, negligible device memory",
    "cuStreamCreateWithPriority": "stream object, negligible device memory",
    "cuGreenCtxStreamCreate": "stream object, negligible device memory",
    "cuStreamDestroy": "stream object",
    "cuGraphCreate": "host-side graph",
    "cuGraphDestroy": "host-side graph",
    "cuGraphDestroyNode": "host-side graph",
    "cuGraphClone": "host-side graph",
    "cuGraphExecDestroy": "destroys exec graph (graph allocations outlive it)",
    "cuGraphInstantiate": "instantiation reserves VA for mem-alloc nodes; physical memory at launch",
    "cuGraphInstantiateWithFlags": "as cuGraphInstantiate",
    "cuGraphInstantiateWithParams": "as cuGraphInstantiate (FLAG_UPLOAD also uploads)",
    "cuGraphMemAllocNodeGetParams": "query",
    "cuGraphMemFreeNodeGetParams": "query",
    "cuGraphAddMemcpyNode": "graph construction only",
    "cuGraphAddMemsetNode": "graph construction only",
    "cuGraphMemcpyNodeGetParams": "graph construction only",
    "cuGraphMemcpyNodeSetParams": "graph construction only",
    "cuGraphMemsetNodeGetParams": "graph construction only",
    "cuGraphMemsetNodeSetParams": "graph construction only",
    "cuGraphExecMemcpyNodeSetParams": "graph update only",
    "cuGraphExecMemsetNodeSetParams": "graph update only",
    "cuGraphRetainUserObject": "host refcount",
    "cuGraphReleaseUserObject": "host refcount",
    "cuUserObjectCreate": "host object",
    "cuUserObjectRetain": "host refcount",
    "cuUserObjectRelease": "host refcount",
    "cuLinkCreate": "host-side JIT linker",
    "cuLinkDestroy": "host-side JIT linker",
    "cuTexRefCreate": "legacy texture reference (host object)",
    "cuTexRefDestroy": "legacy texture reference (host object)",
    "cuImportExternalSemaphore": "semaphore, no memory",
    "cuDestroyExternalSemaphore": "semaphore, no memory",
    "cuIpcOpenEventHandle": "event, no memory",
    "cuGraphicsMapResources": "maps GL/VDPAU/EGL-owned memory (allocated by the graphics API)",
    "cuGraphicsUnmapResources": "unmaps graphics-API memory",
    "cuGraphicsUnregisterResource": "graphics interop bookkeeping",
    "cuGraphicsResourceSetMapFlags": "graphics interop bookkeeping",
    "cuModuleGetLoadingMode": "query",
    "cuFuncIsLoaded": "query",
    "cuCtxResetPersistingL2Cache": "cache control",
    "cuLogsRegisterCallback": "logging",
    "cuLogsUnregisterCallback": "logging",
    "cuStreamAttachMemAsync": "changes managed-memory visibility only",
    "cuCheckpointProcessCheckpoint": "acts on another process (pid): moves its GPU memory to host",
    "cuCheckpointProcessRestore": "acts on another process (pid): restores its GPU memory",
    "cuCheckpointProcessLock": "acts on another process (pid)",
    "cuCheckpointProcessUnlock": "acts on another process (pid)",
    "cuCheckpointProcessGetState": "query",
    "cuCheckpointProcessGetRestoreThreadId": "query",
    "cuGraphConditionalHandleCreate": "graph conditional handle (graph construction)",
    "cuGraphicsResourceGetMappedPointer": "query of mapped graphics-API memory",
    "cuGraphicsResourceGetMappedMipmappedArray": "query of mapped graphics-API memory",
    "cuGraphicsSubResourceGetMappedArray": "query of mapped graphics-API memory",
    "cuTensorMapEncodeTiled": "host-side TMA descriptor encoding",
    "cuTensorMapEncodeIm2col": "host-side TMA descriptor encoding",
    "cuTensorMapEncodeIm2colWide": "host-side TMA descriptor encoding",
    "cuTensorMapReplaceAddress": "host-side TMA descriptor encoding",
}

SUSPECT_RE = re.compile(
    r"Alloc|Create|Load|Import|Open|Map|Retain|Attach|Register|Bind|"
    r"Free|Destroy|Release|Unload|Unmap|Close|Trim|Reset|Detach|"
    r"Launch|Memcpy|Memset|Prefetch|Upload|Decompress|Checkpoint|Device|Peer")

DEVICE_BASE_TYPES = {"CUdevice", "CUdevice_v1", "CUmemLocation", "CUmemLocation_v1", "CUmemLocation_st"}


def base_name(sym):
    b = re.sub(r"_(ptsz|ptds)$", "", sym)
    return re.sub(r"_v\d+$", "", b)


def preprocess(header, defines):
    cc = os.environ.get("CC", "cc")
    return subprocess.run([cc, "-E", "-P", "-x", "c", *defines, header],
                          capture_output=True, text=True, check=True).stdout


def matching(text, i, open_c, close_c):
    """Index just past the bracket that closes the one opened before text[i]."""
    depth = 1
    while depth:
        c = text[i]
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
        i += 1
    return i


def prototypes(text):
    """{name: params} for `CUresult name(...);` declarations (not definitions)."""
    out = {}
    for m in re.finditer(r"\bCUresult\s+(cu\w+)\s*\(", text):
        end = matching(text, m.end(), "(", ")")
        params = text[m.end():end - 1].strip()
        if text[end:].lstrip().startswith("{"):
            continue  # inline definition, not an exported symbol
        out[m.group(1)] = params
    return out


def device_types(text):
    """Type names that are, or (transitively) contain, CUdevice/CUmemLocation."""
    records = []  # (names, body tokens)
    for m in re.finditer(r"\btypedef\s+(?:struct|union)\s*(\w+)?\s*\{", text):
        end = matching(text, m.end(), "{", "}")
        body = text[m.end():end - 1]
        decl = text[end:text.index(";", end)]
        names = set(re.findall(r"\w+", decl))
        if m.group(1):
            names.add(m.group(1))
        records.append((names, set(re.findall(r"\w+", body))))
    aliases = re.findall(r"\btypedef\s+(?:const\s+)?(?:struct\s+|union\s+)?(\w+)\s*\**\s*(\w+)\s*;", text)
    found = set(DEVICE_BASE_TYPES)
    changed = True
    while changed:
        changed = False
        for names, toks in records:
            if toks & found and not names <= found:
                found |= names
                changed = True
        for src, dst in aliases:
            if src in found and dst not in found:
                found.add(dst)
                changed = True
    return found


def extract(header):
    syms = OrderedDict()
    dev_types = None
    for cfg, defs in CONFIGS.items():
        text = preprocess(header, defs)
        if cfg == "internal":
            dev_types = device_types(text)
        for name, params in prototypes(text).items():
            e = syms.setdefault(name, {"params": params, "configs": []})
            e["configs"].append(cfg)
    return syms, dev_types


def classify(sym, params, dev_types):
    base = base_name(sym)
    cats = OrderedDict()
    for cat, rx, reason in NAME_RULES:
        if cat not in cats and re.fullmatch(rx, base):
            cats[cat] = reason
    # device
    dev_reason = None
    for p in [p.strip() for p in params.split(",")]:
        toks = re.findall(r"\w+", p)
        hit = [t for t in toks[:-1] if t in dev_types] if len(toks) > 1 else []
        if hit:
            dev_reason = "param `%s` (%s)" % (toks[-1], hit[0])
            break
    if dev_reason is None and base.startswith("cuDevice"):
        dev_reason = "cuDevice* family"
    if dev_reason is None and base in DEVICE_EXTRA:
        dev_reason = DEVICE_EXTRA[base]
    if dev_reason:
        cats["device"] = dev_reason
    return base, cats



# What the interposer does, for symbols it exports (hooks): (family regex, text).
HOOKED = [
    (r"cuMemAllocPitch|cuArrayCreate|cuArray3DCreate", "legacy", "refused for a tenant (the 32-bit legacy ABI): CUDA_ERROR_NOT_SUPPORTED and one line"),
    (r"cuMemAlloc\w*|cuMemCreate|cu(Mipmapped)?Array(3D)?Create", None, "governed: reserved through the daemon (the node's ledger) before the driver allocates; CUDA_ERROR_OUT_OF_MEMORY when refused"),
    (r"cuMemFree\w*|cuMemRelease|cu(Mipmapped)?ArrayDestroy", None, "governed: the reservation is returned"),
    (r"cuGraphAddMemAllocNode|cuGraphAddNode", None, "memory allocation nodes refused for a tenant (CUDA_ERROR_NOT_SUPPORTED and one line); other nodes pass"),
    (r"cuGraphLaunch|cuLaunch\w*", None, "governed: behind the launch gate (recorded without it into a capturing stream)"),
    (r"cuMemPoolCreate|cuMemPoolDestroy|cuDeviceGetDefaultMemPool|cuDeviceGetMemPool|cuMemGetDefaultMemPool|cuMemGetMemPool", None, "governed: the pool's GPU is noted; an allocation from the pool is reserved there"),
    (r"cuCtxSetLimit", None, "governed: a stack, printf-FIFO or malloc-heap limit beyond its default is reserved through the daemon (CUDA_ERROR_OUT_OF_MEMORY when refused); raising the device runtime's limits is refused (CUDA_ERROR_NOT_SUPPORTED and one line)"),
    (r"cuDeviceGetCount|cuDeviceGet|cuDeviceGetByPCIBusId", None, "governed: the driver shows only the GPUs the daemon placed the program on (CUDA_VISIBLE_DEVICES, set by UUID before cuInit), numbered from 0"),
    (r"cuDeviceTotalMem|cuMemGetInfo", None, "governed: the tenant's limit (or the GPU's memory the ledger has not granted)"),
    (r"cuDevicePrimaryCtxRetain", None, "governed: the context's memory (the daemon's context_mib) reserved on that GPU"),
    (r"cuMulticastCreate", None, "refused for a tenant: multicast objects take memory outside the ledger (CUDA_ERROR_NOT_SUPPORTED and one line)"),
    (r"cuLibraryGetKernel", None, "passes to the driver; the CUkernel is noted, so that a launch of it (standing for its function in the current context) is described to the daemon with cuKernelGetAttribute"),
    (r"cuModuleLoadData", None, "passes to the driver (the image kept for migration); code and globals are not counted; with kernel slicing, PTX (or a fat binary's PTX for the GPU) is loaded with its kernels' twins"),
    (r"cuModuleLoadFatBinary", None, "passes to the driver; with kernel slicing, the fat binary's PTX for the GPU is loaded as cuModuleLoadData loads PTX (its kernels' twins beside them)"),
    (r"cuModuleLoad", None, "passes to the driver; with kernel slicing, a PTX file (or a fat binary's PTX for the GPU) is read and loaded as cuModuleLoadData loads its text (its kernels' twins beside them)"),
    (r"cuLibraryLoadFromFile", None, "passes to the driver; with kernel slicing, a PTX file (or a fat binary's PTX for the GPU) is read and loaded as cuLibraryLoadData loads its text (its kernels' twins beside them)"),
    (r"cuLibraryLoadData", None, "passes to the driver (code and globals are not counted); with kernel slicing, a PTX library (or a fat binary's PTX for the GPU) is loaded with its kernels' twins (cuLibraryGetKernel notes each kernel's twin)"),
    (r"cuStreamBeginCapture(ToGraph)?|cuStreamEndCapture", None, "governed: the capture is noted (the per-thread default stream as the calling thread's), so that launches into the stream are recorded without the launch gate, which never synchronises while a capture is open"),
    (r"cuStreamSynchronize", None, "governed: of the program's stream on the current device (its own before any migration); a synchronous call, noted for the daemon's classification of interactive tenants (coscheduling)"),
    (r"cuStreamIsCapturing|cuStreamGetCaptureInfo|cuStreamQuery", None, "governed: of the program's stream on the current device (its own before any migration)"),
    (r"cuCtxSynchronize", None, "passes to the driver (while a capture is open, the launch gate makes no synchronisation of its own); a synchronous call, noted for the daemon's classification of interactive tenants (coscheduling)"),
    (r"cuEventSynchronize|cuMemcpyDtoH|cuMemcpyHtoD", None, "passes to the driver; a synchronous call, noted for the daemon's classification of interactive tenants (coscheduling)"),
]

# What the interposer does, for symbols it does not export: (family regex, text). The
# first match wins; "device" is the fallback for entry points that name a device.
PASSES = [
    (r"cu(Green)?CtxCreate|cuCtxAttach", "passes through; the context's memory is reserved (context_mib) at the program's first allocation on that GPU"),
    (r"cu(Green)?CtxDestroy|cuCtxDetach|cuDevicePrimaryCtx(Release|Reset)", "passes through; the context's reservation stays until the program exits"),
    (r"cuModuleLoad\w*|cuLibraryLoad\w*|cuFuncLoad|cuModuleUnload|cuLibraryUnload", "passes through: code and globals are not counted (small beside context_mib)"),
    (r"cuIpcOpenMemHandle|cuIpcCloseMemHandle|cuMemPoolImportPointer|cuMemImportFromShareableHandle|cuMemPoolImportFromShareableHandle|cuImportExternalMemory|cuExternalMemoryGetMapped\w*|cuDestroyExternalMemory", "passes through: the memory is allocated, and counted, by the process that exported it"),
    (r"cuMemMap\w*|cuMemUnmap|cuMemRetainAllocationHandle", "passes through: maps or references memory counted when it was created (cuMemCreate)"),
    (r"cuMemPoolCreate|cuMemPoolDestroy|cuMemPoolTrimTo|cuDeviceGraphMemTrim", "passes through: a pool holds what allocations from it reserved"),
    (r"cuGraphAddMemFreeNode", "passes through: frees what a memory node (refused) would have allocated"),
    (r"cuGraphUpload", "passes through: uploads a graph; the graph's launch is gated"),
    (r"cu(Tex|Surf)Object(Create|Destroy)", "passes through: a descriptor, no allocation of its own"),
    (r"cuCtxSynchronize", "passes through (while a capture is open, the launch gate makes no synchronisation of its own)"),
]
DEVICE_FALLBACK = ("passes through: the driver shows the program only the GPUs it was placed on "
                   "(CUDA_VISIBLE_DEVICES, set by UUID before cuInit), numbered from 0, so any "
                   "device it names is one of them (a migratable program sees the node's GPUs)")

def exported(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()}


def disposition(sym, base, cats, legacy, exports):
    if sym in exports:
        for rx, only, text in HOOKED:
            if only == "legacy" and not legacy:
                continue
            if re.fullmatch(rx, base):
                return text
        return None
    for rx, text in PASSES:
        if re.fullmatch(rx, base):
            return text
    if "device" in cats:
        return DEVICE_FALLBACK
    return None


def main():
    ap = argparse.ArgumentParser()
    # given more than once (CUDA 12.9's and 13.0's): the list covers every header, and a
    # name only some declare says which
    ap.add_argument("--header", required=True, action="append")
    ap.add_argument("--interposer", required=True)
    ap.add_argument("--markdown")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    versions = [cuda_version(h) for h in a.header]
    syms, dev_types, declared = OrderedDict(), set(), {}
    for header, version in zip(a.header, versions):
        found, types = extract(header)
        dev_types |= types
        for sym, e in found.items():
            declared.setdefault(sym, []).append(version)
            if sym in syms:
                # the newer header's parameters; configurations as any header has them
                syms[sym]["params"] = e["params"]
                syms[sym]["configs"] = sorted(set(syms[sym]["configs"]) | set(e["configs"]))
            else:
                syms[sym] = e
    exports = exported(a.interposer)
    rows, unreviewed, uncovered = [], [], []
    for sym in sorted(syms):
        e = syms[sym]
        base, every = classify(sym, e["params"], dev_types)
        if not every:
            if SUSPECT_RE.search(base) and base not in NOT_IN_CATEGORY:
                unreviewed.append(sym)
            continue
        # host memory, copies and host callbacks are classified but outside this list
        cats = OrderedDict((c, r) for c, r in every.items()
                           if c in ("alloc", "free", "launch", "device", "capture", "sync"))
        if not cats:
            continue
        legacy = e["configs"] == ["internal"] and not re.search(r"_(ptsz|ptds)$", sym)
        what = disposition(sym, base, cats, legacy, exports)
        if what is None:
            uncovered.append(sym)
            what = "NOT COVERED"
        kind = "; ".join("%s (%s)" % (c, r) for c, r in cats.items())
        if legacy:
            kind += " [legacy ABI]"
        if len(declared[sym]) < len(versions):
            kind += " [CUDA %s only]" % ", ".join(declared[sym])
        rows.append((sym, kind, what))
    # a family the interposer governs is governed under every name the header gives it:
    # a program built for the per-thread default stream calls the _ptsz/_ptds names, an
    # old one the legacy ABI's, cuGetProcAddress hands out any of them
    governed = {base_name(sym) for sym in syms if sym in exports}
    escapes = [sym for sym in sorted(syms) if base_name(sym) in governed and sym not in exports]

    out = open(a.markdown, "w") if a.markdown else sys.stdout
    out.write("# The CUDA driver entry points that allocate, launch or name a device\n\n")
    out.write("Generated by `scripts/cuda_entry_points.py` from NVIDIA's `cuda.h` (CUDA %s, the headers "
              "the tests fetch; a name one of them lacks says which declares it) and the symbols "
              "`libtessera_cuda.so` exports; a test regenerates it and "
              "fails when it differs (rerun it with `TESSERA_BLESS=1` after a change), and when the "
              "interposer governs an entry point under some of its names only (its `_vN`, per-thread "
              "default stream `_ptsz`/`_ptds` and legacy names are one entry point). One row per "
              "exported name; %d rows.\n\n" % (" and ".join(versions), len(rows)))
    out.write("| entry point | what it does | what tessera's interposer does |\n|---|---|---|\n")
    for r in rows:
        out.write("| `%s` | %s | %s |\n" % (r[0], r[1].replace("|", "\\|"), r[2]))
    if a.markdown:
        out.close()
    if unreviewed:
        print("UNREVIEWED (a name that looks like it takes resources or does work, in no category): %s"
              % ", ".join(unreviewed), file=sys.stderr)
    if uncovered:
        print("NOT COVERED (classified, but nothing says what the interposer does): %s"
              % ", ".join(uncovered), file=sys.stderr)
    if escapes:
        print("ESCAPES (a name of an entry point the interposer governs that it does not export): %s"
              % ", ".join(escapes), file=sys.stderr)
    if a.check and (unreviewed or uncovered or escapes):
        sys.exit(1)


def cuda_version(header):
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", open(header).read())
    if not m:
        return "?"
    v = int(m.group(1))
    return "%d.%d" % (v // 1000, v % 1000 // 10)



if __name__ == "__main__":
    main()
