/*
 * A fake CUDA driver library for tessera's tests: the entry points tesserad's CUDA
 * executor uses and those the interposer governs, with the GPU replaced by host
 * memory and host loops. Compiled against NVIDIA's real cuda.h (CUDA 12.9, fetched by
 * scripts/fetch-nvidia-artifacts.sh) with __CUDA_API_VERSION_INTERNAL, as NVIDIA builds
 * its driver: every definition below must match the header's prototype, or it does not
 * compile. It checks what a real driver would reject (not initialised, no current
 * context, unknown kernel, grid too small for the output) but says nothing about
 * whether PTX runs on a real device.
 *
 * Books a real driver keeps and a test cannot see are written to
 * "<this library>.stats" after every change: primary-context retains per device, live
 * allocations and their peak (a reset frees a device's allocations), unless
 * FAKE_CUDA_STATS=0. Every call is
 * appended to "<this library>.log" when FAKE_CUDA_LOG=1.
 *
 * Knobs: FAKE_CUDA_DEVICES (default 2; physical device p has p+1 GiB, or
 * FAKE_CUDA_DEVICE_MIB each, PCI id 0000:(10+p):00.0 and UUID GPU-fa000000-...-0p);
 * CUDA_VISIBLE_DEVICES as the real driver reads it (indices or UUIDs, at cuInit);
 * FAKE_CUDA_TIMELINE (below: one GPU timeline shared by processes, and their books,
 * which the fake NVML, fake_libnvml.c, reads as the machine's state); FAKE_CUDA_FAIL=oom makes
 * every allocation fail with CUDA_ERROR_OUT_OF_MEMORY, =launch every launch with
 * CUDA_ERROR_LAUNCH_FAILED. A spin kernel asked to run exactly 777 ms faults
 * (CUDA_ERROR_LAUNCH_FAILED, sticky: every later call on that device fails until its
 * primary context is reset). Kernels: "tessera_spin" (busy for its u64 nanoseconds
 * parameter, asynchronously), "tessera_echo" (copies its input to its output),
 * "tessera_axpy" (y[i] = a * x[i] + y[i] for float a, float pointers x and y and a u32
 * n), "tessera_spin_stamped" (a spin of its u64 nanoseconds that writes its start and
 * end, in CLOCK_MONOTONIC nanoseconds, to its u64[2] output), and any other ".entry" of
 * a loaded module, which does nothing.
 *
 * Handles are per device, as on a real GPU: a module is loaded into the current
 * context's device and a function belongs to it; launching a function of another
 * device is CUDA_ERROR_INVALID_HANDLE. Memory from cuMemAlloc belongs to its device: a
 * kernel on another device touching it gets CUDA_ERROR_ILLEGAL_ADDRESS. Managed memory
 * (cuMemAllocManaged) has the same address everywhere and a resident device: a kernel
 * touching it elsewhere moves it on demand (counted as a fault), cuMemPrefetchAsync
 * moves it ahead (counted as prefetched bytes); both counts are in the stats file.
 *
 * Stream capture follows the rules the CUDA programming guide documents: a launch into
 * a capturing stream is recorded, not run; cuStreamSynchronize or cuStreamQuery of a
 * capturing stream, and "potentially unsafe" calls (cuCtxSynchronize here) made while
 * this thread has a capture not in relaxed mode or any thread one in global mode, fail
 * with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate those captures, whose
 * cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; so does
 * work on the legacy stream while a blocking stream captures, which fails with
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (the legacy stream cannot be captured itself). A
 * graph replays what its capture recorded (the spin kernels' time) when launched.
 *
 * Every entry point here that cuda.h also declares as a _ptsz/_ptds variant (what a
 * program built with CUDA_API_PER_THREAD_DEFAULT_STREAM, nvcc's --default-stream
 * per-thread, calls) has that variant too, where, as on the real driver, the NULL
 * stream is the calling thread's per-thread default stream (CU_STREAM_PER_THREAD, a
 * blocking stream of its own, which can be captured), not the legacy stream.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define FAKE_LOG_KNOB "FAKE_CUDA_LOG"
#include "fake_machine.h"

#define MAX_ALLOCS 4096

static int initialised;
static int ctx_token[MAX_DEVICES];
static __thread CUcontext current;
/* functions per device and kind, so that a handle says which device it belongs to */
/* AXPY_SLICE: tessera_axpy's twin from kernel slicing (tessera-ptx): axpy's four
 * parameters, then the first block of its range and the original grid's X, Y, Z; it
 * computes only the elements of its blocks; NOOP_SLICE: any other kernel's twin (does
 * nothing, as NOOP) */
enum kind { SPIN, ECHO, AXPY, NOOP, STAMPED, AXPY_SLICE, NOOP_SLICE, KINDS };
static struct fn { int dev; int kind; } fns[MAX_DEVICES][KINDS];
struct mod { int dev; const char *image; };
/* streams belong to a device too. Special handles: 0 is the legacy stream (NULL stream)
 * — or, given to a _ptsz/_ptds entry point, the calling thread's per-thread default
 * stream, as the real driver reads it — CU_STREAM_LEGACY the legacy stream and
 * CU_STREAM_PER_THREAD the calling thread's per-thread default stream, whatever entry
 * point they are given to; both belong to the current context's device. */
struct graph;
struct stream {
    int dev, live, flags;
    int per_thread; /* a thread's per-thread default stream (made on its first use) */
    /* stream capture: capturing (a CUstreamCaptureStatus), its mode, thread and id, the
     * graph it records into (a new one, or the one cuStreamBeginCaptureToGraph named),
     * and what it recorded (launches, spin time) */
    int capture, mode;
    pthread_t owner;
    unsigned long long id;
    struct graph *graph, *into;
    long launches;
    uint64_t spin_ns;
};
/* captures in progress: in global mode (any thread), and of this thread not relaxed */
static int global_captures;
static __thread int my_strict_captures;
struct graph { long launches; uint64_t spin_ns; };
/* the legacy stream: never captures */
static struct stream legacy_stream = {.live = 1};

static pthread_mutex_t books = PTHREAD_MUTEX_INITIALIZER;
static int retains[MAX_DEVICES];
static int broken[MAX_DEVICES];
static long live[MAX_DEVICES];
static uint64_t live_bytes[MAX_DEVICES], peak_bytes[MAX_DEVICES];
static struct { void *p; int dev; size_t n; int managed; int resident; } allocs[MAX_ALLOCS];
static uint64_t faults[MAX_DEVICES], prefetched[MAX_DEVICES]; /* managed memory moved in, per device */
static uint64_t busy_until[MAX_DEVICES]; /* the spin kernel "runs" until then (CLOCK_MONOTONIC ns) */



/* CUDA_VISIBLE_DEVICES, read once at cuInit as the real driver does: ordinal d is
 * physical device visible[d]. Entries are indices or UUIDs ("GPU-" and a unique
 * prefix of the rest); the first entry that names no device, or one already listed,
 * ends the list. */
static int visible[MAX_DEVICES], visible_n = -1;
static void read_visible(void) {
    int n = physical_devices();
    const char *e = getenv("CUDA_VISIBLE_DEVICES");
    visible_n = 0;
    if (!e) {
        for (int d = 0; d < n; d++) visible[visible_n++] = d;
        return;
    }
    char list[1024];
    snprintf(list, sizeof list, "%s", e);
    for (char *save = 0, *item = strtok_r(list, ",", &save); item; item = strtok_r(0, ",", &save)) {
        while (*item == ' ') item++;
        int found = -1;
        if (!strncmp(item, "GPU-", 4)) {
            for (int p = 0; p < n; p++) {
                char u[64];
                uuid_text(p, u, sizeof u);
                if (strlen(item) > 4 && !strncmp(u, item, strlen(item))) {
                    if (found >= 0) { found = -1; break; } /* ambiguous */
                    found = p;
                }
            }
        } else {
            char *end;
            long v = strtol(item, &end, 10);
            if (end != item && *end == 0 && v >= 0 && v < n) found = (int)v;
        }
        for (int d = 0; d < visible_n; d++)
            if (visible[d] == found) found = -1;
        if (found < 0) break;
        visible[visible_n++] = found;
    }
}
static int devices(void) { return visible_n < 0 ? physical_devices() : visible_n; }
/* The physical device behind ordinal d (its name, UUID, PCI id and memory). */
static int phys(int d) { return visible_n < 0 || d < 0 || d >= visible_n ? d : visible[d]; }
static uint64_t device_bytes(int d) { return physical_bytes(phys(d)); }
/* FAKE_CUDA_TIMELINE=PREFIX: the GPUs are shared by every process that sets it, as a
 * real GPU is — a spin kernel starts when the physical device's previous kernel, of
 * any process, ends (one u64 per device in the file PREFIX.gpuP, shared memory, moved
 * forward by compare-and-swap) — and each process writes the books of its kernels,
 * "DEVICE START END" (CLOCK_MONOTONIC ns) per line, to PREFIX.pidN: what each program
 * really received, as a test measures it. */
static uint64_t *shared_until[MAX_DEVICES];
static FILE *books_file;
static uint64_t *shared_word(int phys_dev) {
    if (!timeline() || phys_dev < 0 || phys_dev >= MAX_DEVICES) return 0;
    if (!shared_until[phys_dev]) {
        char path[4200];
        snprintf(path, sizeof path, "%s.gpu%d", timeline(), phys_dev);
        int fd = open(path, O_RDWR | O_CREAT, 0600);
        if (fd < 0) return 0;
        if (ftruncate(fd, 4096) == 0) {
            void *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) shared_until[phys_dev] = m;
        }
        close(fd);
    }
    return shared_until[phys_dev];
}
/* When a kernel of `ns` launched now on device d starts, with the device shared. */
static uint64_t schedule_kernel(int d, uint64_t ns) {
    uint64_t start = now_ns();
    if (busy_until[d] > start) start = busy_until[d];
    uint64_t *w = shared_word(phys(d));
    if (w) {
        uint64_t seen = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        for (;;) {
            uint64_t s = seen > start ? seen : start;
            if (__atomic_compare_exchange_n(w, &seen, s + ns, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                start = s;
                break;
            }
        }
        if (!books_file) {
            char path[4200];
            /* FAKE_CUDA_BOOKS=FILE: this process's books there instead (processes in
             * their own pid namespaces, a container's, share pids) */
            const char *own = getenv("FAKE_CUDA_BOOKS");
            if (own && *own) snprintf(path, sizeof path, "%s", own);
            else snprintf(path, sizeof path, "%s.pid%d", timeline(), (int)getpid());
            books_file = fopen(path, "a");
        }
        if (books_file) {
            fprintf(books_file, "%d %llu %llu\n", phys(d), (unsigned long long)start,
                    (unsigned long long)(start + ns));
            fflush(books_file);
        }
    }
    busy_until[d] = start + ns;
    return start;
}
static int fail(const char *what) {
    const char *e = getenv("FAKE_CUDA_FAIL");
    return e && !strcmp(e, what);
}
static int dev_of_current(void) {
    for (int d = 0; d < MAX_DEVICES; d++)
        if (current == (CUcontext)&ctx_token[d]) return d;
    return 0;
}
/* With FAKE_CUDA_TIMELINE=PREFIX, what this process holds on the machine's devices, for
 * the fake NVML to list: "PHYSICAL_DEVICE LIVE_BYTES" per device it has a context or
 * memory on, in PREFIX.mem.pidN (rewritten whole after every change). */
static void write_node_books(void) {
    if (!timeline()) return;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s.mem.pid%d", timeline(), (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    for (int d = 0; d < devices(); d++)
        if (retains[d] > 0 || live_bytes[d] > 0)
            fprintf(f, "%d %llu\n", phys(d), (unsigned long long)live_bytes[d]);
    fclose(f);
    rename(tmp, path);
}
static void write_stats(void) {
    write_node_books();
    const char *e = getenv("FAKE_CUDA_STATS");
    if (e && !strcmp(e, "0")) return; /* benchmarks: the books' file costs a write */
    /* written aside and renamed into place, so that a reader never sees half a file */
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s.stats", self_path());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    /* by physical device (0 and 1), whatever CUDA_VISIBLE_DEVICES renumbered */
    int o[2] = {-1, -1};
    for (int d = 0; d < devices(); d++)
        if (phys(d) < 2) o[phys(d)] = d;
#define AT(a, p) (o[p] < 0 ? 0 : (unsigned long long)(a)[o[p]])
    fprintf(f, "retains %llu %llu\nlive %llu %llu\nlive_bytes %llu %llu\npeak_bytes %llu %llu\n",
            AT(retains, 0), AT(retains, 1), AT(live, 0), AT(live, 1), AT(live_bytes, 0),
            AT(live_bytes, 1), AT(peak_bytes, 0), AT(peak_bytes, 1));
    fprintf(f, "faults %llu %llu\nprefetched %llu %llu\n", AT(faults, 0), AT(faults, 1),
            AT(prefetched, 0), AT(prefetched, 1));
#undef AT
    fclose(f);
    rename(tmp, path);
}
#define NEED_INIT() do { if (!initialised) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
#define NEED_CTX() do { NEED_INIT(); if (!current) return CUDA_ERROR_INVALID_CONTEXT; \
    if (broken[dev_of_current()]) return CUDA_ERROR_LAUNCH_FAILED; } while (0)

CUresult CUDAAPI cuInit(unsigned int Flags) {
    (void)Flags;
    pthread_mutex_lock(&books);
    if (visible_n < 0) read_visible();
    pthread_mutex_unlock(&books);
    initialised = 1;
    pthread_mutex_lock(&books); write_stats(); pthread_mutex_unlock(&books);
    log_call("cuInit");
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION; /* the version of the header it is built against */
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int *count) { NEED_INIT(); *count = devices(); return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    NEED_INIT();
    if (ordinal < 0 || ordinal >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Fake GPU %d", phys(dev));
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    uuid->bytes[0] = (char)0xfa; uuid->bytes[15] = (char)phys(dev);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }
CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + phys(dev));
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
    NEED_INIT();
    unsigned domain, bus, slot, fn;
    if (!dev || !pciBusId || sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &slot, &fn) != 4)
        return CUDA_ERROR_INVALID_VALUE;
    /* a hidden device has no ordinal */
    for (int d = 0; d < devices(); d++)
        if (!domain && !slot && !fn && phys(d) == (int)bus - 0x10) { *dev = d; return CUDA_SUCCESS; }
    return CUDA_ERROR_INVALID_DEVICE;
}
CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)device_bytes(dev);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&books); retains[dev]++; write_stats(); pthread_mutex_unlock(&books);
    *pctx = (CUcontext)&ctx_token[dev];
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&books);
    CUresult r = retains[dev] > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (retains[dev] > 0) retains[dev]--;
    write_stats();
    pthread_mutex_unlock(&books);
    return r;
}
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&books);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].p && allocs[i].dev == dev) { free(allocs[i].p); allocs[i].p = 0; }
    live[dev] = 0; live_bytes[dev] = 0; broken[dev] = 0; busy_until[dev] = 0;
    write_stats();
    pthread_mutex_unlock(&books);
    current = 0;
    return CUDA_SUCCESS;
}
/* context limits, per device (its primary context), from the documented defaults */
static size_t limits[MAX_DEVICES][CU_LIMIT_MAX];
static int limits_set[MAX_DEVICES];
static size_t *limits_of(int d) {
    if (!limits_set[d]) {
        limits[d][CU_LIMIT_STACK_SIZE] = 1024;
        limits[d][CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
        limits[d][CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
        limits[d][CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
        limits[d][CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
        limits[d][CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
        limits_set[d] = 1;
    }
    return limits[d];
}
CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
    NEED_CTX();
    if (!pvalue || (unsigned)limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
    *pvalue = limits_of(dev_of_current())[limit];
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
    NEED_CTX();
    if ((unsigned)limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED)
        return CUDA_ERROR_INVALID_VALUE;
    limits_of(dev_of_current())[limit] = value;
    log_call("cuCtxSetLimit %d %zu", (int)limit, value);
    return CUDA_SUCCESS;
}
/* device attributes: a small GPU of compute capability 8.0 (what numba-cuda and the
 * interposer ask); any other attribute is 0 */
CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    NEED_INIT();
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 16; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *pi = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *pi = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *pi = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *pi = 48 << 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = 163 << 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *pi = 164 << 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *pi = 64 << 10; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *pi = 1410000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *pi = 1215000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *pi = 5120; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 8; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0x10 + phys(dev); break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *pi = 2; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) { NEED_INIT(); current = ctx; return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    NEED_INIT();
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *device = dev_of_current();
    return CUDA_SUCCESS;
}

/* the kind of kernel an entry name is */
static int kind_of(const char *name) {
    if (!strcmp(name, "tessera_spin")) return SPIN;
    if (!strcmp(name, "tessera_echo")) return ECHO;
    if (!strcmp(name, "tessera_axpy")) return AXPY;
    if (!strcmp(name, "tessera_spin_stamped")) return STAMPED;
    if (!strcmp(name, "tessera_axpy__tessera_slice")) return AXPY_SLICE;
    /* any other kernel's twin: a handle of its own, as a real driver gives each kernel */
    size_t n = strlen(name), t = strlen("__tessera_slice");
    if (n > t && !strcmp(name + n - t, "__tessera_slice")) return NOOP_SLICE;
    return NOOP;
}
/* a fat binary's bytes as text (its NULs made spaces, so that the names of the entries
 * of PTX stored uncompressed can be found; compressed ones cannot), NUL-terminated and
 * malloc'd; 0 if `image` is not a fat binary (magic 0xBA55ED50, a 16-byte header whose
 * last 8 bytes are the size of what follows) */
static char *fatbin_text(const void *image) {
    const unsigned char *c = image;
    /* the CUDA runtime's wrapper: magic 0x466243b1, a version, the fat binary's address */
    if (c[0] == 0xb1 && c[1] == 0x43 && c[2] == 0x62 && c[3] == 0x46) {
        memcpy(&c, c + 8, sizeof c);
        if (!c) return 0;
    }
    if (!(c[0] == 0x50 && c[1] == 0xed && c[2] == 0x55 && c[3] == 0xba)) return 0;
    uint64_t size;
    memcpy(&size, c + 8, 8);
    if (size > (1u << 30)) return 0;
    char *t = malloc(16 + size + 1);
    if (!t) return 0;
    for (uint64_t i = 0; i < 16 + size; i++) t[i] = c[i] ? (char)c[i] : ' ';
    t[16 + size] = 0;
    return t;
}
CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
    NEED_CTX();
    char *fat = fatbin_text(image);
    if (fat) image = fat;
    if (!strstr(image, ".entry")) { free(fat); return CUDA_ERROR_INVALID_PTX; }
    struct mod *m = malloc(sizeof *m); /* modules are never unloaded here */
    if (!m) { free(fat); return CUDA_ERROR_OUT_OF_MEMORY; }
    m->dev = dev_of_current();
    m->image = fat ? fat : strdup(image); /* the driver compiles the image in the call:
                                             the caller's buffer may go once it returns */
    if (!m->image) { free(m); return CUDA_ERROR_OUT_OF_MEMORY; }
    *module = (CUmodule)m;
    log_call("cuModuleLoadData on %d%s", m->dev, fat ? " (a fat binary)" : "");
    return CUDA_SUCCESS;
}
/* a file's whole contents, NUL-terminated (malloc'd; never freed: modules stay) */
static char *read_file(const char *path, size_t *size) {
    FILE *f = path ? fopen(path, "rb") : 0;
    if (!f) return 0;
    char *buf = 0;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            cap = (n + 4096 + 1) * 2;
            char *b = realloc(buf, cap);
            if (!b) { free(buf); fclose(f); return 0; }
            buf = b;
        }
        got = fread(buf + n, 1, 4096, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = 0;
    if (size) *size = n;
    return buf;
}
CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
    CUresult r = cuModuleLoadData(module, fatCubin);
    if (r == CUDA_SUCCESS) log_call("cuModuleLoadFatBinary");
    return r;
}
CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname) {
    NEED_CTX();
    char *image = read_file(fname, 0);
    if (!image) return CUDA_ERROR_FILE_NOT_FOUND;
    log_call("cuModuleLoad %s", fname);
    CUresult r = cuModuleLoadData(module, image);
    free(image);
    return r;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    NEED_CTX();
    const struct mod *m = (const struct mod *)hmod;
    if (!m || m->dev != dev_of_current()) return CUDA_ERROR_INVALID_HANDLE;
    char entry[300];
    snprintf(entry, sizeof entry, ".entry %s", name);
    if (!strstr(m->image, entry)) return CUDA_ERROR_NOT_FOUND;
    int kind = kind_of(name);
    struct fn *f = &fns[m->dev][kind];
    f->dev = m->dev;
    f->kind = kind;
    *hfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}
/* CUDA 12's kernels: context-independent, one per kind; a CUkernel passed where a
 * CUfunction goes stands for the kernel's function in the current context */
static int kernels[KINDS];
/* the function a handle names, if it is one of ours */
static const struct fn *function(CUfunction h) {
    const int *k = (const int *)h;
    if (k >= kernels && k < kernels + KINDS) {
        struct fn *f = &fns[dev_of_current()][k - kernels];
        f->dev = dev_of_current();
        f->kind = (int)(k - kernels);
        return f;
    }
    const struct fn *f = (const struct fn *)h;
    if (f < &fns[0][0] || f >= &fns[0][0] + MAX_DEVICES * KINDS) return 0;
    return f;
}
static int is_kernel(const void *h) { return (const int *)h >= kernels && (const int *)h < kernels + KINDS; }
CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
    NEED_INIT();
    /* a function, not a CUkernel: cuda.h lets a kernel stand for a function only where
     * it says so (launches, occupancy), and cuKernelGetAttribute is the kernel's */
    if (!pi || !function(hfunc) || is_kernel(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; return CUDA_SUCCESS;
    default: *pi = 0; return CUDA_SUCCESS;
    }
}

/* an allocation on device d (the current context's, unless a location or pool names
 * another) */
static CUresult alloc_on(int d, CUdeviceptr *dptr, size_t n, const char *what) {
    NEED_CTX();
    if (d < 0 || d >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&books);
    CUresult r = CUDA_SUCCESS;
    if (fail("oom") || live_bytes[d] + n > device_bytes(d)) r = CUDA_ERROR_OUT_OF_MEMORY;
    int slot = -1;
    for (int i = 0; r == CUDA_SUCCESS && i < MAX_ALLOCS; i++) if (!allocs[i].p) { slot = i; break; }
    if (r == CUDA_SUCCESS && slot < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    /* untouched pages cost the host nothing: the declared memory is never written */
    void *q = r == CUDA_SUCCESS ? malloc(n ? n : 1) : 0;
    if (r == CUDA_SUCCESS && !q) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        allocs[slot].p = q; allocs[slot].dev = d; allocs[slot].n = n;
        allocs[slot].managed = !strcmp(what, "cuMemAllocManaged"); allocs[slot].resident = d;
        live[d]++; live_bytes[d] += n;
        if (live_bytes[d] > peak_bytes[d]) peak_bytes[d] = live_bytes[d];
        *dptr = (CUdeviceptr)(uintptr_t)q;
        write_stats();
    }
    pthread_mutex_unlock(&books);
    log_call("%s %zu -> %d", what, n, (int)r);
    return r;
}
static CUresult alloc(CUdeviceptr *dptr, size_t n, const char *what) {
    NEED_CTX();
    return alloc_on(dev_of_current(), dptr, n, what);
}
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { return alloc(dptr, bytesize, "cuMemAlloc_v2"); }
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    (void)flags;
    return alloc(dptr, bytesize, "cuMemAllocManaged");
}
CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes) {
    (void)ElementSizeBytes;
    size_t pitch = (WidthInBytes + 511) / 512 * 512;
    *pPitch = pitch;
    return alloc(dptr, pitch * Height, "cuMemAllocPitch_v2");
}
CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    (void)hStream;
    return alloc(dptr, bytesize, "cuMemAllocAsync");
}
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return cuMemAllocAsync(dptr, bytesize, hStream);
}
/* memory pools: a pool is a device's (its default one, or one created with a
 * location) */
struct pool { int dev, created; };
static struct pool default_pools[MAX_DEVICES];
CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
    NEED_INIT();
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    default_pools[dev].dev = dev;
    *pool_out = (CUmemoryPool)&default_pools[dev];
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) { return cuDeviceGetDefaultMemPool(pool, dev); }
#if CUDA_VERSION >= 13000
/* CUDA 13's look-ups by location: a device's pools only (host pools are not faked) */
CUresult CUDAAPI cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type) {
    NEED_INIT();
    if (!location || location->type != CU_MEM_LOCATION_TYPE_DEVICE || type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    return cuDeviceGetDefaultMemPool(pool_out, location->id);
}
CUresult CUDAAPI cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type) {
    return cuMemGetDefaultMemPool(pool, location, type);
}
#endif
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    NEED_INIT();
    if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (props->location.id < 0 || props->location.id >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    struct pool *p = malloc(sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = props->location.id;
    p->created = 1;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
    struct pool *p = (struct pool *)pool;
    if (!p || !p->created) return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    (void)hStream;
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    return alloc_on(((struct pool *)pool)->dev, dptr, bytesize, "cuMemAllocFromPoolAsync");
}
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream) {
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}
/* peer access: any two devices this process sees */
CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    NEED_INIT();
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= devices() || peerDev < 0 || peerDev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}
/* virtual-memory allocations: the handle is the host block's address */
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                             unsigned long long flags) {
    (void)flags;
    if (!prop || !handle || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    /* on the device the location names, which need not be the current one */
    CUresult r = alloc_on(prop->location.id, &p, size, "cuMemCreate");
    if (r == CUDA_SUCCESS) *handle = (CUmemGenericAllocationHandle)p;
    return r;
}
/* arrays: the handle is the host block's address */
static size_t element_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    default: return 4;
    }
}
CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d) {
    CUdeviceptr p;
    size_t n = d->Width * (d->Height ? d->Height : 1) * element_bytes(d->Format) * d->NumChannels;
    CUresult r = alloc(&p, n, "cuArrayCreate_v2");
    if (r == CUDA_SUCCESS) *pHandle = (CUarray)(uintptr_t)p;
    return r;
}
CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    CUdeviceptr p;
    size_t n = d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * element_bytes(d->Format) *
               d->NumChannels;
    CUresult r = alloc(&p, n, "cuArray3DCreate_v2");
    if (r == CUDA_SUCCESS) *pHandle = (CUarray)(uintptr_t)p;
    return r;
}
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr);
CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                        unsigned int numMipmapLevels) {
    if (!pHandle || !d) return CUDA_ERROR_INVALID_VALUE;
    size_t n = 0;
    for (unsigned l = 0; l < numMipmapLevels && l < 64; l++) {
        size_t w = d->Width >> l, h = (d->Height ? d->Height : 1) >> l, z = (d->Depth ? d->Depth : 1) >> l;
        n += (w ? w : 1) * (h ? h : 1) * (z ? z : 1) * element_bytes(d->Format) * d->NumChannels;
    }
    CUdeviceptr p;
    CUresult r = alloc(&p, n, "cuMipmappedArrayCreate");
    if (r == CUDA_SUCCESS) *pHandle = (CUmipmappedArray)(uintptr_t)p;
    return r;
}
CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray h) { return cuMemFree_v2((CUdeviceptr)(uintptr_t)h); }

/* The legacy (CUDA 3.1) 32-bit ABI: a v1 device pointer is a token standing for one of
 * the fake's 64-bit allocations (its "device" memory is host memory, above 4 GiB). */
#define MAX_V1 256
#define V1_BASE 0x10000000u
static CUdeviceptr v1_allocs[MAX_V1];
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult r = alloc(&p, bytesize, "cuMemAlloc");
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&books);
    int slot = -1;
    for (int i = 0; i < MAX_V1; i++) if (!v1_allocs[i]) { slot = i; v1_allocs[i] = p; break; }
    pthread_mutex_unlock(&books);
    if (slot < 0) { cuMemFree_v2(p); return CUDA_ERROR_OUT_OF_MEMORY; }
    *dptr = V1_BASE + (unsigned)slot * 0x10000u;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) {
    unsigned slot = (dptr - V1_BASE) / 0x10000u;
    if (dptr < V1_BASE || slot >= MAX_V1 || !v1_allocs[slot]) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuMemFree_v2(v1_allocs[slot]);
    if (r == CUDA_SUCCESS) v1_allocs[slot] = 0;
    return r;
}
CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes) {
    (void)ElementSizeBytes;
    if (!pPitch) return CUDA_ERROR_INVALID_VALUE;
    *pPitch = (WidthInBytes + 511u) / 512u * 512u;
    return cuMemAlloc(dptr, *pPitch * Height);
}
CUresult CUDAAPI cuMemGetInfo(unsigned int *free_bytes, unsigned int *total) {
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        *free_bytes = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
        *total = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
    }
    return r;
}
/* multicast objects are not modelled: refused as on a GPU without NVLink multicast */
CUresult CUDAAPI cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop) {
    (void)mcHandle; (void)prop;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    size_t b;
    CUresult r = cuDeviceTotalMem_v2(&b, dev);
    if (r == CUDA_SUCCESS) *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned int)b;
    return r;
}
CUresult CUDAAPI cuArrayDestroy(CUarray hArray) { return cuMemFree_v2((CUdeviceptr)(uintptr_t)hArray); }
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) { return cuMemFree_v2((CUdeviceptr)handle); }
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    (void)hStream;
    return cuMemFree_v2(dptr);
}
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return cuMemFreeAsync(dptr, hStream); }
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
    pthread_mutex_lock(&books);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].p && allocs[i].p == (void *)(uintptr_t)dptr) {
            if (broken[allocs[i].dev]) { r = CUDA_ERROR_LAUNCH_FAILED; break; }
            live[allocs[i].dev]--; live_bytes[allocs[i].dev] -= allocs[i].n;
            free(allocs[i].p); allocs[i].p = 0; r = CUDA_SUCCESS;
            break;
        }
    write_stats();
    pthread_mutex_unlock(&books);
    log_call("cuMemFree_v2 -> %d", (int)r);
    return r;
}
CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    NEED_CTX();
    int d = dev_of_current();
    pthread_mutex_lock(&books);
    *total = (size_t)device_bytes(d);
    *free_bytes = (size_t)(device_bytes(d) - live_bytes[d]);
    pthread_mutex_unlock(&books);
    return CUDA_SUCCESS;
}
/* A kernel on the current device touches [p, p + n): device memory must be this
 * device's; managed memory moves here on demand. */
static CUresult touch(uint64_t p, size_t n) {
    int d = dev_of_current();
    CUresult r = CUDA_ERROR_ILLEGAL_ADDRESS;
    pthread_mutex_lock(&books);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        uint64_t a = (uint64_t)(uintptr_t)allocs[i].p;
        if (!allocs[i].p || p < a || p + n > a + allocs[i].n) continue;
        if (allocs[i].managed) {
            if (allocs[i].resident != d) {
                allocs[i].resident = d;
                faults[d]++;
                log_call("fault %zu bytes onto %d", allocs[i].n, d);
            }
            r = CUDA_SUCCESS;
        } else {
            r = allocs[i].dev == d ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
        }
        break;
    }
    write_stats();
    pthread_mutex_unlock(&books);
    return r;
}
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
    (void)hStream;
    NEED_INIT();
    if (dstDevice < 0 || dstDevice >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&books);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        uint64_t a = (uint64_t)(uintptr_t)allocs[i].p;
        if (!allocs[i].p || devPtr < a || devPtr + count > a + allocs[i].n) continue;
        if (allocs[i].managed) {
            if (allocs[i].resident != dstDevice) prefetched[dstDevice] += allocs[i].n;
            allocs[i].resident = dstDevice;
            r = CUDA_SUCCESS;
        }
        break;
    }
    write_stats();
    pthread_mutex_unlock(&books);
    log_call("cuMemPrefetchAsync %zu to %d -> %d", count, (int)dstDevice, (int)r);
    return r;
}
CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
    return cuMemPrefetchAsync(devPtr, count, dstDevice, hStream);
}
/* CUDA 12.2's form, by location (what cuGetProcAddress answers from 12020, and CUDA
 * 13's cuda.h calls cuMemPrefetchAsync): a device's only (host prefetch is not faked) */
CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                       CUstream hStream) {
    if (location.type != CU_MEM_LOCATION_TYPE_DEVICE || flags) return CUDA_ERROR_INVALID_VALUE;
    return cuMemPrefetchAsync(devPtr, count, location.id, hStream);
}
CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                            unsigned int flags, CUstream hStream) {
    return cuMemPrefetchAsync_v2(devPtr, count, location, flags, hStream);
}
/* A synchronous copy is work on the legacy stream — or, by a _ptds entry point, on the
 * calling thread's per-thread default stream — done at once; not while a capture makes
 * that stream unusable (see the stream capture entry points below). */
static CUresult sync_copy_on(int ptds);
CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    NEED_CTX();
    CUresult r = sync_copy_on(0);
    if (r == CUDA_SUCCESS) memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
    return r;
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    NEED_CTX();
    CUresult r = sync_copy_on(1);
    if (r == CUDA_SUCCESS) memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
    return r;
}
CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    NEED_CTX();
    CUresult r = sync_copy_on(0);
    if (r == CUDA_SUCCESS) memcpy(dstHost, (void *)(uintptr_t)srcDevice, ByteCount);
    return r;
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    NEED_CTX();
    CUresult r = sync_copy_on(1);
    if (r == CUDA_SUCCESS) memcpy(dstHost, (void *)(uintptr_t)srcDevice, ByteCount);
    return r;
}

/* every stream that may capture (created ones and per-thread default streams, never
 * freed), for invalidation */
#define MAX_STREAMS 1024
static struct stream *streams[MAX_STREAMS];
static int stream_count;
static void remember_stream(struct stream *s) {
    pthread_mutex_lock(&books);
    if (stream_count < MAX_STREAMS) streams[stream_count++] = s;
    pthread_mutex_unlock(&books);
}
/* The calling thread's per-thread default stream, made on its first use (never freed,
 * like a created stream: a thread that exits leaves it idle); it belongs to the current
 * context's device. Null if it cannot be made. */
static __thread struct stream *my_per_thread;
static struct stream *per_thread_stream(void) {
    if (!my_per_thread) {
        struct stream *s = calloc(1, sizeof *s);
        if (!s) return 0;
        s->live = 1;
        s->per_thread = 1;
        remember_stream(s);
        my_per_thread = s;
    }
    if (my_per_thread->capture == CU_STREAM_CAPTURE_STATUS_NONE) my_per_thread->dev = dev_of_current();
    return my_per_thread;
}
/* The stream handle `h` names, given to a plain entry point (ptsz 0) or to a _ptsz/_ptds
 * one (ptsz 1): see struct stream. */
static struct stream *stream_of(CUstream h, int ptsz) {
    if (h == CU_STREAM_PER_THREAD || (!h && ptsz)) return per_thread_stream();
    if (!h || h == CU_STREAM_LEGACY) {
        legacy_stream.dev = dev_of_current();
        return &legacy_stream;
    }
    return (struct stream *)h;
}
/* Whether `s` can take work on device `dev` (a created stream of another device, or a
 * destroyed one, cannot). */
static int stream_ok(const struct stream *s, int dev) {
    if (!s) return 0;
    if (s == &legacy_stream || s->per_thread) return 1;
    return s->live && s->dev == dev;
}
/* `s` if it is in capture (active or invalidated) */
static struct stream *capturing(struct stream *s) {
    if (!s || s == &legacy_stream) return 0;
    return s->capture != CU_STREAM_CAPTURE_STATUS_NONE ? s : 0;
}
/* a potentially unsafe call while captures forbid it: those captures are invalidated */
static int unsafe_during_capture(void) {
    if (!my_strict_captures && !global_captures) return 0;
    pthread_mutex_lock(&books);
    for (int i = 0; i < stream_count; i++) {
        struct stream *s = streams[i];
        if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
        int mine = pthread_equal(s->owner, pthread_self());
        if (s->mode == CU_STREAM_CAPTURE_MODE_GLOBAL || (mine && s->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
            s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    }
    pthread_mutex_unlock(&books);
    log_call("unsafe call during stream capture: captures invalidated");
    return 1;
}
/* The legacy stream synchronises with every blocking stream of its device (a created
 * stream without CU_STREAM_NON_BLOCKING, and every thread's per-thread default stream):
 * while one of them captures, the legacy stream is unusable ("an implicit dependency
 * on the capturing stream"). Whether one captures now; with `invalidate`, work on the
 * legacy stream was attempted, which invalidates those captures (cuda.h,
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT). */
static int blocking_capture(int invalidate) {
    int d = dev_of_current(), found = 0;
    pthread_mutex_lock(&books);
    for (int i = 0; i < stream_count; i++) {
        struct stream *s = streams[i];
        if (s->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE || s->dev != d || (s->flags & CU_STREAM_NON_BLOCKING)) continue;
        found = 1;
        if (invalidate) s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    }
    pthread_mutex_unlock(&books);
    if (found && invalidate) log_call("legacy stream used during stream capture: captures invalidated");
    return found;
}
/* Work is about to be put on `s` (the checks every entry point that enqueues does):
 * CUDA_SUCCESS, or why not. A capturing stream that was invalidated refuses work. */
static CUresult enqueue_on(struct stream *s) {
    if (!stream_ok(s, dev_of_current())) return CUDA_ERROR_INVALID_HANDLE;
    if (s == &legacy_stream && blocking_capture(1)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return CUDA_SUCCESS;
}

static CUresult sync_copy_on(int ptds) {
    struct stream *s = stream_of(0, ptds);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    if (s == &legacy_stream) return blocking_capture(1) ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
    if (capturing(s)) {
        s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

static CUresult launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int blockDimX, struct stream *st,
                              void **kernelParams) {
    NEED_CTX();
    log_call("cuLaunchKernel %u %u on %d%s", gridDimX, blockDimX, dev_of_current(),
             st && st->per_thread ? " (per-thread stream)" : "");
    if (fail("launch")) return CUDA_ERROR_LAUNCH_FAILED;
    const struct fn *fn = function(f);
    if (!fn || fn->dev != dev_of_current()) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = enqueue_on(st);
    if (r != CUDA_SUCCESS) return r;
    struct stream *cs = capturing(st);
    if (cs) {
        cs->launches++;
        cs->graph->launches++;
        if (fn->kind == SPIN || fn->kind == STAMPED) {
            cs->spin_ns += *(uint64_t *)kernelParams[0];
            cs->graph->spin_ns += *(uint64_t *)kernelParams[0];
        }
        return CUDA_SUCCESS;
    }
    if (fn->kind == AXPY) {
        float a = *(float *)kernelParams[0];
        uint64_t xp = *(uint64_t *)kernelParams[1], yp = *(uint64_t *)kernelParams[2];
        uint32_t n = *(uint32_t *)kernelParams[3];
        if ((uint64_t)gridDimX * blockDimX < n) return CUDA_ERROR_INVALID_VALUE;
        r = touch(xp, (size_t)n * sizeof(float));
        if (r == CUDA_SUCCESS) r = touch(yp, (size_t)n * sizeof(float));
        if (r != CUDA_SUCCESS) return r;
        const float *x = (const float *)(uintptr_t)xp;
        float *y = (float *)(uintptr_t)yp;
        for (uint32_t i = 0; i < n; i++) y[i] = a * x[i] + y[i];
        return CUDA_SUCCESS;
    }
    if (fn->kind == AXPY_SLICE) {
        float a = *(float *)kernelParams[0];
        uint64_t xp = *(uint64_t *)kernelParams[1], yp = *(uint64_t *)kernelParams[2];
        uint32_t n = *(uint32_t *)kernelParams[3];
        uint32_t first = *(uint32_t *)kernelParams[4], gx = *(uint32_t *)kernelParams[5];
        uint32_t gy = *(uint32_t *)kernelParams[6], gz = *(uint32_t *)kernelParams[7];
        log_call("axpy slice %u %u of %u %u %u", first, gridDimX, gx, gy, gz);
        if ((uint64_t)first + gridDimX > (uint64_t)gx * gy * gz) return CUDA_ERROR_INVALID_VALUE;
        r = touch(xp, (size_t)n * sizeof(float));
        if (r == CUDA_SUCCESS) r = touch(yp, (size_t)n * sizeof(float));
        if (r != CUDA_SUCCESS) return r;
        const float *x = (const float *)(uintptr_t)xp;
        float *y = (float *)(uintptr_t)yp;
        for (uint64_t i = (uint64_t)first * blockDimX; i < ((uint64_t)first + gridDimX) * blockDimX && i < n; i++)
            y[i] = a * x[i] + y[i];
        return CUDA_SUCCESS;
    }
    if (fn->kind == SPIN) {
        uint64_t ns = *(uint64_t *)kernelParams[0];
        if (ns == 777000000u) { broken[dev_of_current()] = 1; return CUDA_SUCCESS; } /* faults on the device */
        /* asynchronous, as on a GPU: the stream is busy until the spin ends */
        schedule_kernel(dev_of_current(), ns);
        return CUDA_SUCCESS;
    }
    if (fn->kind == STAMPED) {
        /* a spin that writes when it started and ended (the timeline's nanoseconds, as
         * the real kernel writes %globaltimer's) to its u64[2] output */
        uint64_t ns = *(uint64_t *)kernelParams[0], outp = *(uint64_t *)kernelParams[1];
        r = touch(outp, 2 * sizeof(uint64_t));
        if (r != CUDA_SUCCESS) return r;
        uint64_t start = schedule_kernel(dev_of_current(), ns);
        uint64_t *out = (uint64_t *)(uintptr_t)outp;
        out[0] = start;
        out[1] = start + ns;
        return CUDA_SUCCESS;
    }
    if (fn->kind == ECHO) {
        const uint8_t *in = (const uint8_t *)(uintptr_t) * (uint64_t *)kernelParams[0];
        uint32_t in_len = *(uint32_t *)kernelParams[1];
        uint8_t *out = (uint8_t *)(uintptr_t) * (uint64_t *)kernelParams[2];
        uint32_t out_len = *(uint32_t *)kernelParams[3];
        if ((uint64_t)gridDimX * blockDimX < out_len) return CUDA_ERROR_INVALID_VALUE;
        for (uint32_t i = 0; i < out_len; i++) out[i] = in_len ? in[i % in_len] : 0;
        return CUDA_SUCCESS;
    }
    return CUDA_SUCCESS; /* any other entry does nothing */
}
/* Parameters passed as one buffer (`extra`: CU_LAUNCH_PARAM_BUFFER_POINTER and
 * CU_LAUNCH_PARAM_BUFFER_SIZE), read for the axpy kernels only, at the offsets the ABI
 * packs them (f32 a at 0, u64 x at 8, u64 y at 16, u32 n at 24; the twin's four u32
 * after them at 28, 32, 36, 40): `out` gets pointers into the buffer. A buffer too
 * small for them, both forms at once, or another kernel: CUDA_ERROR_INVALID_VALUE. */
static CUresult params_from_extra(CUfunction f, void **kernelParams, void **extra, void *out[8], void ***params) {
    *params = kernelParams;
    if (!extra) return CUDA_SUCCESS;
    if (kernelParams) return CUDA_ERROR_INVALID_VALUE;
    char *buf = 0;
    size_t size = 0;
    for (int i = 0; i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *(size_t *)extra[i + 1];
        else return CUDA_ERROR_INVALID_VALUE;
    }
    const struct fn *fn = function(f);
    if (!buf || !fn || (fn->kind != AXPY && fn->kind != AXPY_SLICE)) return CUDA_ERROR_INVALID_VALUE;
    int count = fn->kind == AXPY ? 4 : 8;
    static const size_t at[8] = {0, 8, 16, 24, 28, 32, 36, 40};
    if (size < at[count - 1] + 4) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < count; i++) out[i] = buf + at[i];
    log_call("launch parameters from a buffer of %zu bytes", size);
    *params = out;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
    (void)gridDimY; (void)gridDimZ; (void)blockDimY; (void)blockDimZ; (void)sharedMemBytes;
    NEED_CTX();
    void *from_buffer[8], **params;
    CUresult r = params_from_extra(f, kernelParams, extra, from_buffer, &params);
    if (r != CUDA_SUCCESS) return r;
    return launch_kernel(f, gridDimX, blockDimX, stream_of(hStream, 0), params);
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    NEED_CTX();
    struct stream *st = malloc(sizeof *st); /* freed never: a destroyed handle stays invalid */
    if (!st) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(st, 0, sizeof *st);
    st->dev = dev_of_current();
    st->live = 1;
    st->flags = (int)Flags;
    remember_stream(st);
    *phStream = (CUstream)st;
    log_call("cuStreamCreate on %d", st->dev);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    (void)priority;
    return cuStreamCreate(phStream, flags);
}
CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
    NEED_INIT();
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
    struct stream *st = (struct stream *)hStream;
    if (!st->live) return CUDA_ERROR_INVALID_HANDLE;
    st->live = 0;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }
/* Sleep until CLOCK_MONOTONIC reaches `until` (ns), in 0.1 ms naps. */
static void sleep_until(uint64_t until) {
    while (now_ns() < until) {
        struct timespec t = {0, 100000};
        nanosleep(&t, 0);
    }
}
/* Wait until the current device has run what was launched on it. */
static void wait_device(void) { sleep_until(busy_until[dev_of_current()]); }
/* The echo kernel completes inside cuLaunchKernel; the spin kernel keeps the device busy.
 * Querying or synchronising a capturing stream is not allowed (the capture is
 * invalidated); nor is using the legacy stream while a blocking stream captures. */
static CUresult stream_query(struct stream *s) {
    NEED_CTX();
    if (!stream_ok(s, dev_of_current())) return CUDA_ERROR_INVALID_HANDLE;
    struct stream *cs = capturing(s);
    if (cs) {
        cs->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s == &legacy_stream && blocking_capture(1)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return now_ns() < busy_until[dev_of_current()] ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
static CUresult stream_synchronize(struct stream *s) {
    CUresult r = stream_query(s);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) return r;
    wait_device();
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamQuery(CUstream hStream) { return stream_query(stream_of(hStream, 0)); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream) { return stream_query(stream_of(hStream, 1)); }
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) { return stream_synchronize(stream_of(hStream, 0)); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) { return stream_synchronize(stream_of(hStream, 1)); }
/* Events: one marks the end of what the device had queued when it was recorded (the
 * fake runs a device's work in launch order, whatever the stream); recorded into a
 * capturing stream it marks nothing. */
struct fake_event { int live; uint64_t at; };
CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    (void)Flags;
    NEED_CTX();
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->live = 1;
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}
static CUresult event_record(CUevent hEvent, struct stream *s) {
    NEED_CTX();
    struct fake_event *e = (struct fake_event *)hEvent;
    if (!e || !e->live) return CUDA_ERROR_INVALID_HANDLE;
    if (!stream_ok(s, dev_of_current())) return CUDA_ERROR_INVALID_HANDLE;
    if (!capturing(s)) e->at = busy_until[dev_of_current()];
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, stream_of(hStream, 0)); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, stream_of(hStream, 1)); }
CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
    struct fake_event *e = (struct fake_event *)hEvent;
    if (!e || !e->live) return CUDA_ERROR_INVALID_HANDLE;
    return now_ns() < e->at ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    struct fake_event *e = (struct fake_event *)hEvent;
    if (!e || !e->live) return CUDA_ERROR_INVALID_HANDLE;
    sleep_until(e->at);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
    struct fake_event *e = (struct fake_event *)hEvent;
    if (!e || !e->live) return CUDA_ERROR_INVALID_HANDLE;
    e->live = 0; /* kept, not freed: a stale handle stays recognisable */
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSynchronize(void) {
    NEED_CTX();
    if (unsafe_during_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    wait_device();
    return CUDA_SUCCESS;
}
#if CUDA_VERSION >= 13000
/* CUDA 13's forms naming their context (NULL: the current one), what cuGetProcAddress
 * answers for cuCtxGetDevice and cuCtxSynchronize at version 13000 */
CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    if (!ctx) return cuCtxGetDevice(device);
    NEED_INIT();
    for (int d = 0; d < MAX_DEVICES; d++)
        if (ctx == (CUcontext)&ctx_token[d]) {
            *device = d;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_CONTEXT;
}
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
    CUcontext saved = current;
    if (ctx) current = ctx;
    CUresult r = cuCtxSynchronize();
    current = saved;
    return r;
}
#endif

/* Stream capture, begun on `s` into a new graph, or into `into`. */
static unsigned long long capture_ids;
static CUresult begin_capture(struct stream *s, CUstreamCaptureMode mode, struct graph *into) {
    NEED_CTX();
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    if (s == &legacy_stream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    if (!stream_ok(s, dev_of_current())) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    struct graph *g = into ? into : calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    s->graph = g;
    s->into = into;
    s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->mode = (int)mode;
    s->owner = pthread_self();
    s->id = __atomic_add_fetch(&capture_ids, 1, __ATOMIC_SEQ_CST);
    s->launches = 0;
    s->spin_ns = 0;
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL) __atomic_add_fetch(&global_captures, 1, __ATOMIC_SEQ_CST);
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED) my_strict_captures++;
    log_call("cuStreamBeginCapture mode %d%s", (int)mode, s->per_thread ? " (per-thread stream)" : "");
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
    return begin_capture(stream_of(hStream, 0), mode, 0);
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
    return begin_capture(stream_of(hStream, 1), mode, 0);
}
/* CUDA 10.0's capture (no mode: global) */
CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
    return begin_capture(stream_of(hStream, 0), CU_STREAM_CAPTURE_MODE_GLOBAL, 0);
}
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream) {
    return begin_capture(stream_of(hStream, 1), CU_STREAM_CAPTURE_MODE_GLOBAL, 0);
}
/* a capture into an existing graph (its dependencies are not modelled) */
static CUresult begin_capture_to_graph(struct stream *s, CUgraph hGraph, CUstreamCaptureMode mode) {
    if (!hGraph) return CUDA_ERROR_INVALID_VALUE;
    return begin_capture(s, mode, (struct graph *)hGraph);
}
CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode) {
    (void)dependencies; (void)dependencyData; (void)numDependencies;
    return begin_capture_to_graph(stream_of(hStream, 0), hGraph, mode);
}
CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode) {
    (void)dependencies; (void)dependencyData; (void)numDependencies;
    return begin_capture_to_graph(stream_of(hStream, 1), hGraph, mode);
}
static CUresult end_capture(struct stream *hs, CUgraph *phGraph) {
    NEED_CTX();
    struct stream *s = capturing(hs);
    if (!s) return CUDA_ERROR_ILLEGAL_STATE;
    if (!pthread_equal(s->owner, pthread_self()) && s->mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    int invalidated = s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (s->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) __atomic_sub_fetch(&global_captures, 1, __ATOMIC_SEQ_CST);
    if (s->mode != CU_STREAM_CAPTURE_MODE_RELAXED) my_strict_captures--;
    log_call("cuStreamEndCapture: %ld launches%s%s", s->launches, invalidated ? ", invalidated" : "",
             s->per_thread ? " (per-thread stream)" : "");
    struct graph *g = s->graph;
    s->graph = 0;
    if (invalidated || !phGraph) {
        if (!s->into) free(g);
        if (phGraph) *phGraph = 0;
        return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_ERROR_INVALID_VALUE;
    }
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) { return end_capture(stream_of(hStream, 0), phGraph); }
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    return end_capture(stream_of(hStream, 1), phGraph);
}
/* The capture status of `s` (the legacy stream's is unusable while a blocking stream
 * captures: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, the capture left as it is); its id and
 * graph while it captures. */
static CUresult capture_info(struct stream *s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph) {
    NEED_CTX();
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    if (!stream_ok(s, dev_of_current())) return CUDA_ERROR_INVALID_HANDLE;
    if (s == &legacy_stream && blocking_capture(0)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    struct stream *c = capturing(s);
    *status = c ? (CUstreamCaptureStatus)c->capture : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id) *id = c ? c->id : 0;
    if (graph) *graph = c && c->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (CUgraph)c->graph : 0;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    return capture_info(stream_of(hStream, 0), captureStatus, 0, 0);
}
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
    return capture_info(stream_of(hStream, 1), captureStatus, 0, 0);
}
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out) {
    return capture_info(stream_of(hStream, 0), captureStatus_out, id_out, 0);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out) {
    return capture_info(stream_of(hStream, 1), captureStatus_out, id_out, 0);
}
/* the versions that also give the graph and its dependencies (none are modelled) */
static CUresult capture_info_deps(struct stream *s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                  const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n) {
    CUresult r = capture_info(s, status, id, graph);
    if (r == CUDA_SUCCESS) {
        if (deps) *deps = 0;
        if (edges) *edges = 0;
        if (n) *n = 0;
    }
    return r;
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out, size_t *numDependencies_out) {
    return capture_info_deps(stream_of(hStream, 0), captureStatus_out, id_out, graph_out, dependencies_out, 0,
                             numDependencies_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out, size_t *numDependencies_out) {
    return capture_info_deps(stream_of(hStream, 1), captureStatus_out, id_out, graph_out, dependencies_out, 0,
                             numDependencies_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out) {
    return capture_info_deps(stream_of(hStream, 0), captureStatus_out, id_out, graph_out, dependencies_out,
                             edgeData_out, numDependencies_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out) {
    return capture_info_deps(stream_of(hStream, 1), captureStatus_out, id_out, graph_out, dependencies_out,
                             edgeData_out, numDependencies_out);
}
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    (void)flags;
    NEED_CTX();
    if (!phGraphExec || !hGraph) return CUDA_ERROR_INVALID_VALUE;
    struct graph *e = malloc(sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    *e = *(const struct graph *)hGraph;
    *phGraphExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) { free(hGraph); return CUDA_SUCCESS; }
CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    struct graph *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}
/* nodes are accepted and not modelled (a memory node's allocation is not made) */
static CUgraphNode node_token(void) {
    static char nodes[1024];
    static int next;
    return (CUgraphNode)&nodes[__atomic_fetch_add(&next, 1, __ATOMIC_SEQ_CST) % 1024];
}
CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
    (void)dependencies; (void)numDependencies;
    if (!phGraphNode || !hGraph || !nodeParams) return CUDA_ERROR_INVALID_VALUE;
    *phGraphNode = node_token();
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                   CUgraphNodeParams *nodeParams) {
    (void)dependencies; (void)dependencyData; (void)numDependencies;
    if (!phGraphNode || !hGraph || !nodeParams) return CUDA_ERROR_INVALID_VALUE;
    *phGraphNode = node_token();
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                size_t numDependencies, CUgraphNodeParams *nodeParams) {
    return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, 0, numDependencies, nodeParams);
}
/* the legacy launches: the parameters were set by cuParamSet*, which the fake does not
 * keep, so the kernel does nothing; the function is checked */
CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
    (void)grid_width; (void)grid_height;
    NEED_CTX();
    const struct fn *fn = function(f);
    if (!fn || fn->dev != dev_of_current()) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = enqueue_on(stream_of(hStream, 0));
    if (r != CUDA_SUCCESS) return r;
    log_call("legacy launch on %d", dev_of_current());
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
    return cuLaunchGridAsync(f, grid_width, grid_height, 0);
}
CUresult CUDAAPI cuLaunch(CUfunction f) { return cuLaunchGridAsync(f, 1, 1, 0); }
CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
                                                      unsigned int flags) {
    (void)flags;
    if (!launchParamsList || !numDevices) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) { free(hGraphExec); return CUDA_SUCCESS; }

/* The per-thread-default-stream variants (what a program built with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM calls, and what cuGetProcAddress answers for
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM): the NULL stream is the calling
 * thread's per-thread default stream. */
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
    (void)gridDimY; (void)gridDimZ; (void)blockDimY; (void)blockDimZ; (void)sharedMemBytes;
    NEED_CTX();
    void *from_buffer[8], **params;
    CUresult r = params_from_extra(f, kernelParams, extra, from_buffer, &params);
    if (r != CUDA_SUCCESS) return r;
    return launch_kernel(f, gridDimX, blockDimX, stream_of(hStream, 1), params);
}
static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra, int ptsz) {
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX();
    void *from_buffer[8], **params;
    CUresult r = params_from_extra(f, kernelParams, extra, from_buffer, &params);
    if (r != CUDA_SUCCESS) return r;
    return launch_kernel(f, config->gridDimX, config->blockDimX, stream_of(config->hStream, ptsz), params);
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    return launch_ex(config, f, kernelParams, extra, 0);
}
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    return launch_ex(config, f, kernelParams, extra, 1);
}
CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void **kernelParams) {
    return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                          kernelParams, 0);
}
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                                void **kernelParams) {
    return cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                               hStream, kernelParams, 0);
}
/* an executable graph replays its capture: the device is busy for its spin time (or,
 * launched into a capturing stream, it is recorded there) */
static CUresult graph_launch(CUgraphExec hGraphExec, struct stream *s) {
    NEED_CTX();
    if (!hGraphExec) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = enqueue_on(s);
    if (r != CUDA_SUCCESS) return r;
    const struct graph *g = (const struct graph *)hGraphExec;
    log_call("cuGraphLaunch: %ld launches%s", g->launches, s->per_thread ? " (per-thread stream)" : "");
    struct stream *cs = capturing(s);
    if (cs) {
        cs->launches += g->launches;
        cs->graph->launches += g->launches;
        cs->graph->spin_ns += g->spin_ns;
        return CUDA_SUCCESS;
    }
    if (g->spin_ns) schedule_kernel(dev_of_current(), g->spin_ns);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    return graph_launch(hGraphExec, stream_of(hStream, 0));
}
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return graph_launch(hGraphExec, stream_of(hStream, 1));
}

/* What numba-cuda (through NVIDIA's cuda-bindings) calls beyond the above: the
 * context stack, the driver's version of things, CUDA 12's libraries and kernels (a
 * CUkernel is a function of the current device here, as the driver lets a CUkernel
 * stand for a CUfunction in the current context). */
static __thread CUcontext ctx_stack[16];
static __thread int ctx_depth;
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
    NEED_INIT();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = current;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
    NEED_INIT();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth >= 16) return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = current;
    current = ctx;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx) {
    NEED_INIT();
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = current;
    current = ctx_depth > 0 ? ctx_stack[--ctx_depth] : 0;
    return CUDA_SUCCESS;
}
/* libraries: the image kept (PTX text, or an ELF cubin whose size its header gives) */
struct library { char *image; size_t size; };
static size_t image_size(const void *code) {
    const unsigned char *c = code;
    if (c[0] == 0x7f && c[1] == 'E' && c[2] == 'L' && c[3] == 'F' && c[4] == 2) {
        uint64_t shoff; uint16_t shentsize, shnum;
        memcpy(&shoff, c + 0x28, 8); memcpy(&shentsize, c + 0x3a, 2); memcpy(&shnum, c + 0x3c, 2);
        return (size_t)(shoff + (uint64_t)shentsize * shnum);
    }
    return strlen(code) + 1;
}
CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                   unsigned int numLibraryOptions) {
    (void)jitOptions; (void)jitOptionsValues; (void)numJitOptions;
    (void)libraryOptions; (void)libraryOptionValues; (void)numLibraryOptions;
    NEED_INIT();
    if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
    char *fat = fatbin_text(code);
    if (fat) {
        struct library *l = malloc(sizeof *l);
        if (!l) { free(fat); return CUDA_ERROR_OUT_OF_MEMORY; }
        if (!strstr(fat, ".entry")) { free(fat); free(l); return CUDA_ERROR_INVALID_PTX; }
        l->image = fat;
        l->size = strlen(fat);
        *library = (CUlibrary)l;
        log_call("cuLibraryLoadData a fat binary");
        return CUDA_SUCCESS;
    }
    size_t n = image_size(code);
    struct library *l = malloc(sizeof *l);
    char *copy = malloc(n + 1);
    if (!l || !copy) { free(l); free(copy); return CUDA_ERROR_OUT_OF_MEMORY; }
    memcpy(copy, code, n);
    copy[n] = 0;
    l->image = copy;
    l->size = n;
    if (copy[0] != 0x7f && !strstr(copy, ".entry")) { free(copy); free(l); return CUDA_ERROR_INVALID_PTX; }
    *library = (CUlibrary)l;
    log_call("cuLibraryLoadData %zu bytes", n);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                       void **jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                       unsigned int numLibraryOptions) {
    NEED_INIT();
    char *code = read_file(fileName, 0);
    if (!code) return CUDA_ERROR_FILE_NOT_FOUND;
    log_call("cuLibraryLoadFromFile %s", fileName);
    CUresult r = cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions,
                                   libraryOptions, libraryOptionValues, numLibraryOptions);
    free(code);
    return r;
}
CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
    struct library *l = (struct library *)library;
    if (!l) return CUDA_ERROR_INVALID_HANDLE;
    free(l->image);
    free(l);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    NEED_INIT();
    const struct library *l = (const struct library *)library;
    if (!pKernel || !l || !name) return CUDA_ERROR_INVALID_VALUE;
    char entry[300];
    snprintf(entry, sizeof entry, ".entry %s", name);
    int found = l->image[0] == 0x7f ? memmem(l->image, l->size, name, strlen(name)) != 0
                                    : strstr(l->image, entry) != 0;
    if (!found) return CUDA_ERROR_NOT_FOUND;
    *pKernel = (CUkernel)&kernels[kind_of(name)];
    log_call("cuLibraryGetKernel %s", name);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    NEED_CTX();
    const struct fn *f = function((CUfunction)kernel);
    if (!pFunc || !f) return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = (CUfunction)f;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
    NEED_INIT();
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    const int *k = (const int *)kernel;
    if (!pi || !is_kernel(k)) return CUDA_ERROR_INVALID_HANDLE;
    struct fn *f = &fns[dev][k - kernels];
    f->dev = dev;
    f->kind = (int)(k - kernels);
    return cuFuncGetAttribute(pi, attrib, (CUfunction)f);
}
CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
    (void)attrib; (void)val;
    NEED_INIT();
    if (dev < 0 || dev >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    if (!is_kernel(kernel)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_NO_DEVICE: *pStr = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_PTX: *pStr = "CUDA_ERROR_INVALID_PTX"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *pStr = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_HANDLE: *pStr = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *pStr = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *pStr = "CUDA_ERROR_LAUNCH_FAILED"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *pStr = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_SYSTEM_NOT_READY: *pStr = "CUDA_ERROR_SYSTEM_NOT_READY"; break;
    default: *pStr = "CUDA_ERROR_UNKNOWN"; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
    static char text[64];
    snprintf(text, sizeof text, "fake CUDA error %d", (int)error);
    *pStr = text;
    return CUDA_SUCCESS;
}

/* Private tables (an integrity check among them) that NVIDIA's runtime demands: a fake
 * has none, and the runtime then stops with its own error. */
CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
    (void)pExportTableId;
    *ppExportTable = 0;
    log_call("cuGetExportTable");
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* The entry points by name, for cuGetProcAddress (no dlsym: a preloaded interposer
 * may hook that). */
#define E(name) { #name, (void *)name }
static const struct { const char *name; void *fn; } entries[] = {
    E(cuInit), E(cuDriverGetVersion), E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName),
    E(cuDeviceGetUuid), E(cuDeviceGetUuid_v2), E(cuDeviceGetPCIBusId), E(cuDeviceTotalMem_v2),
    E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease_v2), E(cuDevicePrimaryCtxReset_v2),
    E(cuCtxSetCurrent), E(cuCtxGetDevice), E(cuModuleLoadData), E(cuModuleLoadFatBinary), E(cuModuleLoad), E(cuModuleGetFunction), E(cuFuncGetAttribute),
    E(cuMemAlloc_v2), E(cuMemAllocManaged), E(cuMemAllocPitch_v2), E(cuMemFree_v2), E(cuMemGetInfo_v2),
    E(cuMemAllocAsync), E(cuMemAllocAsync_ptsz), E(cuMemAllocFromPoolAsync), E(cuDeviceGetDefaultMemPool),
    E(cuDeviceGetMemPool), E(cuMemPoolCreate), E(cuMemPoolDestroy), E(cuDeviceCanAccessPeer),
    E(cuCtxGetLimit), E(cuCtxSetLimit), E(cuDeviceGetAttribute), E(cuCtxGetCurrent), E(cuCtxPushCurrent_v2),
    E(cuCtxPopCurrent_v2), E(cuLibraryLoadData), E(cuLibraryLoadFromFile), E(cuLibraryUnload), E(cuLibraryGetKernel), E(cuKernelGetFunction),
    E(cuKernelGetAttribute), E(cuKernelSetAttribute), E(cuGetErrorName), E(cuMemFreeAsync), E(cuMemFreeAsync_ptsz),
    E(cuMemCreate), E(cuMemRelease), E(cuArrayCreate_v2), E(cuArray3DCreate_v2), E(cuArrayDestroy),
    E(cuMemcpyHtoD_v2), E(cuMemcpyDtoH_v2), E(cuMemPrefetchAsync), E(cuStreamCreate), E(cuStreamCreateWithPriority), E(cuStreamDestroy_v2), E(cuLaunchKernel), E(cuStreamQuery), E(cuStreamSynchronize),
    E(cuCtxSynchronize), E(cuLaunchKernel_ptsz), E(cuLaunchKernelEx), E(cuLaunchKernelEx_ptsz),
    E(cuLaunchCooperativeKernel), E(cuLaunchCooperativeKernel_ptsz), E(cuGraphLaunch), E(cuGraphLaunch_ptsz),
    E(cuStreamBeginCapture_v2), E(cuStreamBeginCapture_ptsz), E(cuStreamEndCapture), E(cuStreamEndCapture_ptsz),
    E(cuStreamIsCapturing), E(cuStreamIsCapturing_ptsz), E(cuGraphInstantiateWithFlags), E(cuGraphDestroy),
    E(cuGraphExecDestroy), E(cuGraphCreate), E(cuGraphAddMemAllocNode), E(cuGraphAddNode), E(cuGraphAddNode_v2),
    E(cuMemAlloc), E(cuMemFree), E(cuMemAllocPitch), E(cuDeviceTotalMem), E(cuDeviceGetByPCIBusId),
    E(cuMipmappedArrayCreate), E(cuMipmappedArrayDestroy), E(cuLaunch), E(cuLaunchGrid), E(cuLaunchGridAsync),
    E(cuLaunchCooperativeKernelMultiDevice), E(cuMemGetInfo), E(cuMulticastCreate), E(cuStreamQuery_ptsz), E(cuStreamSynchronize_ptsz), E(cuGetErrorString), E(cuGetExportTable), E(cuGetProcAddress), E(cuGetProcAddress_v2),
    E(cuMemAllocFromPoolAsync_ptsz), E(cuMemPrefetchAsync_ptsz), E(cuMemPrefetchAsync_v2), E(cuMemPrefetchAsync_v2_ptsz), E(cuMemcpyHtoD_v2_ptds), E(cuMemcpyDtoH_v2_ptds),
    E(cuStreamDestroy), E(cuStreamBeginCapture), E(cuStreamBeginCapture_v2_ptsz), E(cuStreamBeginCaptureToGraph),
    E(cuStreamBeginCaptureToGraph_ptsz), E(cuStreamGetCaptureInfo), E(cuStreamGetCaptureInfo_ptsz),
    E(cuStreamGetCaptureInfo_v2), E(cuStreamGetCaptureInfo_v2_ptsz), E(cuStreamGetCaptureInfo_v3),
    E(cuStreamGetCaptureInfo_v3_ptsz), E(cuEventCreate), E(cuEventRecord), E(cuEventRecord_ptsz),
    E(cuEventQuery), E(cuEventSynchronize), E(cuEventDestroy_v2),
#if CUDA_VERSION >= 13000
    E(cuCtxGetDevice_v2), E(cuCtxSynchronize_v2), E(cuMemGetDefaultMemPool), E(cuMemGetMemPool),
#endif
};
static void *lookup(const char *name) {
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (!strcmp(entries[i].name, name)) return entries[i].fn;
    return 0;
}

/* The versioned look-up of CUDA >= 11.3, as the real driver answers it: the newest
 * variant of `symbol` whose version is at most the caller's `cudaVersion`, the
 * per-thread-stream one (_ptsz, _ptds: its NULL stream is the calling thread's
 * per-thread default stream) when asked for and there is one. The variants and their
 * versions are cudaTypedefs.h's (PFN_<name>_v<version>), as a table the test support
 * generates from the header this is compiled against (tessera_driver::testing::
 * proc_variants); a variant the fake does not implement is not found. */
#ifdef FAKE_PROC_TABLE
static const struct { const char *name; int version; int per_thread; const char *symbol; } variants[] = {
#include FAKE_PROC_TABLE
};
#else
/* built by hand (scripts/try-without-gpu.sh): no table, so every name is looked up as
 * itself, its newest variant first (_v3, _v2), the per-thread one when asked for */
#define FAKE_NO_PROC_TABLE 1
static const struct { const char *name; int version; int per_thread; const char *symbol; } variants[] = {
    {"", 0, 0, ""},
};
#endif
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus) {
    /* answers before cuInit, as the real driver does (the runtime looks up cuInit so) */
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    int threaded = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const char *chosen = 0;
    int best = -1, best_threaded = 0, known = 0;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        if (strcmp(variants[i].name, symbol)) continue;
        known = 1;
        if (variants[i].version > cudaVersion || (variants[i].per_thread && !threaded)) continue;
        /* a per-thread variant beats any plain one; then the newest */
        if (variants[i].per_thread > best_threaded ||
            (variants[i].per_thread == best_threaded && variants[i].version > best)) {
            best = variants[i].version;
            best_threaded = variants[i].per_thread;
            chosen = variants[i].symbol;
        }
    }
    /* a name the header has no typedef for is looked up as itself */
#ifndef FAKE_NO_PROC_TABLE
    void *found = known ? (chosen ? lookup(chosen) : 0) : lookup(symbol);
#else
    void *found = 0;
    char name[256];
    const char *suffixes[] = {"_v3", "_v2", ""};
    for (int i = 0; !found && i < 3; i++) {
        if (threaded) {
            snprintf(name, sizeof name, "%s%s_ptsz", symbol, suffixes[i]);
            if ((found = lookup(name))) break;
            snprintf(name, sizeof name, "%s%s_ptds", symbol, suffixes[i]);
            if ((found = lookup(name))) break;
        }
        snprintf(name, sizeof name, "%s%s", symbol, suffixes[i]);
        found = lookup(name);
    }
#endif
    *pfn = found;
    if (symbolStatus)
        *symbolStatus = found ? CU_GET_PROC_ADDRESS_SUCCESS
                        : (known && !chosen) ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                             : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    log_call("cuGetProcAddress %s %d %llu -> %s", symbol, cudaVersion, (unsigned long long)flags,
             found ? (chosen ? chosen : symbol) : "none");
    return found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, 0);
}
