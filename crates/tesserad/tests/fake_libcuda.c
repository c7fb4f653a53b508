/*
 * A fake CUDA driver library: the entry points tesserad's CUDA executor uses, with the
 * GPU replaced by host memory and host loops. It lets tests exercise the executor's
 * loading, argument passing and call order on machines without a GPU. It checks what a
 * real driver would reject (no current context, unknown kernel, grid too small for the
 * output) but says nothing about whether the PTX runs on a real device.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef uint64_t CUdeviceptr;

enum { OK = 0, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201, INVALID_PTX = 218, NOT_FOUND = 500, INVALID_VALUE = 1 };

static int initialised;
static int ctx_token[2];
static __thread CUcontext current;
static char spin_fn, echo_fn;

int cuInit(unsigned flags) { (void)flags; initialised = 1; return OK; }
int cuDeviceGetCount(int *n) { if (!initialised) return NOT_INITIALIZED; *n = 2; return OK; }
int cuDeviceGet(int *d, int i) { if (i < 0 || i > 1) return INVALID_VALUE; *d = i; return OK; }
int cuDeviceTotalMem_v2(size_t *bytes, int d) { *bytes = (size_t)(d + 1) << 30; return OK; }
int cuDevicePrimaryCtxRetain(CUcontext *c, int d) { *c = &ctx_token[d]; return OK; }
int cuDevicePrimaryCtxReset_v2(int d) { (void)d; current = 0; return OK; }
int cuCtxSetCurrent(CUcontext c) { current = c; return OK; }

int cuModuleLoadData(CUmodule *m, const void *image) {
    if (!current) return INVALID_CONTEXT;
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
    void *q = malloc(n);
    if (!q) return 2;
    *p = (CUdeviceptr)(uintptr_t)q;
    return OK;
}
int cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return OK; }
int cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return OK; }
int cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return OK; }

int cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    (void)gy; (void)gz; (void)by; (void)bz; (void)shared; (void)stream; (void)extra;
    if (!current) return INVALID_CONTEXT;
    if (f == &spin_fn) {
        uint64_t ns = *(uint64_t *)params[0];
        struct timespec t = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
        nanosleep(&t, 0);
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

/* kernels complete inside cuLaunchKernel here, so the stream is always idle */
int cuStreamQuery(void *stream) { (void)stream; return current ? OK : INVALID_CONTEXT; }
