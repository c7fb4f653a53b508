/*
 * A fake CUDA driver library: the entry points tesserad's CUDA executor uses, with the
 * GPU replaced by host memory and host loops. It lets tests exercise the executor's
 * loading, argument passing and call order on machines without a GPU. It checks what a
 * real driver would reject (no current context, unknown kernel, grid too small for the
 * output) but says nothing about whether the PTX runs on a real device.
 *
 * It also keeps the books a real driver keeps and a test cannot see: primary-context
 * retains per device, live allocations and their peak (a reset frees a device's
 * allocations), and writes them to "<this library>.stats" after every change. A spin
 * kernel asked to run exactly 777 ms faults instead (CUDA_ERROR_LAUNCH_FAILED, sticky:
 * every later call on that device fails until its primary context is reset).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef uint64_t CUdeviceptr;

enum { OK = 0, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201, INVALID_PTX = 218, NOT_FOUND = 500, INVALID_VALUE = 1,
       OUT_OF_MEMORY = 2, LAUNCH_FAILED = 719 };

static int initialised;
static int ctx_token[2];
static __thread CUcontext current;
static char spin_fn, echo_fn;

/* the books, under one lock (GPU threads call concurrently) */
#include <pthread.h>
static pthread_mutex_t books = PTHREAD_MUTEX_INITIALIZER;
static int retains[2];
static int broken[2];
static long live[2];
static uint64_t live_bytes[2], peak_bytes[2];
#define MAX_ALLOCS 4096
static struct { void *p; int dev; size_t n; } allocs[MAX_ALLOCS];

int cuInitStats(void);
static uint64_t busy_until[2]; /* the spin kernel "runs" until then (CLOCK_MONOTONIC ns) */
static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static int dev_of_current(void) { return current == &ctx_token[1] ? 1 : 0; }

static void write_stats(void) {
    Dl_info info;
    if (!dladdr((void *)cuInitStats, &info) || !info.dli_fname) return;
    /* written aside and renamed into place, so that a reader never sees half a file */
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s.stats", info.dli_fname);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "retains %d %d\nlive %ld %ld\nlive_bytes %llu %llu\npeak_bytes %llu %llu\n", retains[0], retains[1],
            live[0], live[1], (unsigned long long)live_bytes[0], (unsigned long long)live_bytes[1],
            (unsigned long long)peak_bytes[0], (unsigned long long)peak_bytes[1]);
    fclose(f);
    rename(tmp, path);
}

int cuInitStats(void) { return OK; }
int cuInit(unsigned flags) { (void)flags; initialised = 1; pthread_mutex_lock(&books); write_stats(); pthread_mutex_unlock(&books); return OK; }
int cuDeviceGetCount(int *n) { if (!initialised) return NOT_INITIALIZED; *n = 2; return OK; }
int cuDeviceGet(int *d, int i) { if (i < 0 || i > 1) return INVALID_VALUE; *d = i; return OK; }
int cuDeviceTotalMem_v2(size_t *bytes, int d) { *bytes = (size_t)(d + 1) << 30; return OK; }
int cuDevicePrimaryCtxRetain(CUcontext *c, int d) {
    pthread_mutex_lock(&books); retains[d]++; write_stats(); pthread_mutex_unlock(&books);
    *c = &ctx_token[d];
    return OK;
}
int cuDevicePrimaryCtxRelease_v2(int d) {
    pthread_mutex_lock(&books);
    int r = retains[d] > 0 ? OK : INVALID_CONTEXT;
    if (retains[d] > 0) retains[d]--;
    write_stats();
    pthread_mutex_unlock(&books);
    return r;
}
int cuDevicePrimaryCtxReset_v2(int d) {
    pthread_mutex_lock(&books);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].p && allocs[i].dev == d) { free(allocs[i].p); allocs[i].p = 0; }
    live[d] = 0; live_bytes[d] = 0; broken[d] = 0; busy_until[d] = 0;
    write_stats();
    pthread_mutex_unlock(&books);
    current = 0;
    return OK;
}
int cuCtxSetCurrent(CUcontext c) { current = c; return OK; }

int cuModuleLoadData(CUmodule *m, const void *image) {
    if (!current) return INVALID_CONTEXT;
    if (broken[dev_of_current()]) return LAUNCH_FAILED;
    if (!strstr(image, ".entry tessera_spin") || !strstr(image, ".entry tessera_echo")) return INVALID_PTX;
    *m = (void *)image;
    return OK;
}

int cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    (void)m;
    if (!strcmp(name, "tessera_spin")) *f = &spin_fn;
    else if (!strcmp(name, "tessera_echo")) *f = &echo_fn;
    else return NOT_FOUND;
    return OK;
}

int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (!current) return INVALID_CONTEXT;
    int d = dev_of_current();
    pthread_mutex_lock(&books);
    int r = OK;
    if (broken[d]) r = LAUNCH_FAILED;
    else if (live_bytes[d] + n > ((uint64_t)(d + 1) << 30)) r = OUT_OF_MEMORY;
    int slot = -1;
    for (int i = 0; r == OK && i < MAX_ALLOCS; i++) if (!allocs[i].p) { slot = i; break; }
    if (r == OK && slot < 0) r = OUT_OF_MEMORY;
    /* untouched pages cost the host nothing: the declared memory is never written */
    void *q = r == OK ? malloc(n) : 0;
    if (r == OK && !q) r = OUT_OF_MEMORY;
    if (r == OK) {
        allocs[slot].p = q; allocs[slot].dev = d; allocs[slot].n = n;
        live[d]++; live_bytes[d] += n;
        if (live_bytes[d] > peak_bytes[d]) peak_bytes[d] = live_bytes[d];
        *p = (CUdeviceptr)(uintptr_t)q;
        write_stats();
    }
    pthread_mutex_unlock(&books);
    return r;
}
int cuMemFree_v2(CUdeviceptr p) {
    pthread_mutex_lock(&books);
    int r = INVALID_VALUE;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].p && allocs[i].p == (void *)(uintptr_t)p) {
            if (broken[allocs[i].dev]) { r = LAUNCH_FAILED; break; }
            live[allocs[i].dev]--; live_bytes[allocs[i].dev] -= allocs[i].n;
            free(allocs[i].p); allocs[i].p = 0; r = OK;
            break;
        }
    write_stats();
    pthread_mutex_unlock(&books);
    return r;
}
int cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
    if (!current) return INVALID_CONTEXT;
    if (broken[dev_of_current()]) return LAUNCH_FAILED;
    memcpy((void *)(uintptr_t)d, s, n);
    return OK;
}
int cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
    if (!current) return INVALID_CONTEXT;
    if (broken[dev_of_current()]) return LAUNCH_FAILED;
    memcpy(d, (void *)(uintptr_t)s, n);
    return OK;
}

int cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    (void)gy; (void)gz; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
    if (!current) return INVALID_CONTEXT;
    if (broken[dev_of_current()]) return LAUNCH_FAILED;
    if (f == &spin_fn) {
        uint64_t ns = *(uint64_t *)params[0];
        if (ns == 777000000u) { broken[dev_of_current()] = 1; return OK; } /* faults on the device */
        /* asynchronous, as on a GPU: the stream is busy until the spin ends */
        busy_until[dev_of_current()] = now_ns() + ns;
        return OK;
    }
    if (f == &echo_fn) {
        const uint8_t *in = (const uint8_t *)(uintptr_t) * (uint64_t *)params[0];
        uint32_t in_len = *(uint32_t *)params[1];
        uint8_t *out = (uint8_t *)(uintptr_t) * (uint64_t *)params[2];
        uint32_t out_len = *(uint32_t *)params[3];
        if ((uint64_t)gx * bx < out_len) return INVALID_VALUE;
        for (uint32_t i = 0; i < out_len; i++) out[i] = in_len ? in[i % in_len] : 0;
        return OK;
    }
    return NOT_FOUND;
}

/* the echo kernel completes inside cuLaunchKernel; the spin kernel keeps the stream busy */
int cuStreamQuery(void *stream) {
    (void)stream;
    if (!current) return INVALID_CONTEXT;
    if (broken[dev_of_current()]) return LAUNCH_FAILED;
    return now_ns() < busy_until[dev_of_current()] ? 600 /* NOT_READY */ : OK;
}
