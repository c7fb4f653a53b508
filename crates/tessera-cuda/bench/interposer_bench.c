/*
 * The interposer's costs, measured from inside a CUDA program (run by
 * `tessera bench interposer`, with and without LD_PRELOAD=libtessera_cuda.so, on the
 * fake driver). Prints one JSON object per measurement:
 *   {"call": NAME, "p50_ns": .., "p99_ns": .., "samples": ..}
 * Calls are timed in batches of BATCH (clock_gettime around each batch, divided), so the
 * clock's own cost does not swamp calls of a few nanoseconds.
 *
 * usage: interposer_bench launch LABEL ITER     cuLaunchKernel of a no-op kernel
 *        interposer_bench alloc LABEL ITER      cuMemAlloc + cuMemFree of 1 MiB
 *        interposer_bench switch LABEL ITER GAP_MS
 *                                               one launch after GAP_MS idle (past the
 *                                               slice, so it waits for a new one)
 *        interposer_bench spin MS               launch MS ms kernels until killed
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 64
static void *driver;
static void *sym(const char *name) {
    void *p = dlsym(driver, name);
    if (!p) { fprintf(stderr, "no %s\n", name); exit(2); }
    return p;
}
#define CHECK(step, call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s failed: %d\n", step, (int)r_); exit(2); } } while (0)

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void report(const char *call, double *samples, int n) {
    qsort(samples, (size_t)n, sizeof *samples, cmp);
    printf("{\"call\": \"%s\", \"p50_ns\": %.1f, \"p99_ns\": %.1f, \"samples\": %d}\n", call, samples[n / 2],
           samples[(int)((n - 1) * 0.99)], n);
}

int main(int argc, char **argv) {
    setvbuf(stdout, 0, _IONBF, 0);
    if (argc < 3) { fprintf(stderr, "usage: see the source\n"); return 64; }
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) { fprintf(stderr, "no driver\n"); return 2; }
    CUresult (*init)(unsigned) = sym("cuInit");
    CUresult (*get)(CUdevice *, int) = sym("cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
    CUresult (*load)(CUmodule *, const void *) = sym("cuModuleLoadData");
    CUresult (*function)(CUfunction *, CUmodule, const char *) = sym("cuModuleGetFunction");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel");
    CUresult (*sync)(CUstream) = sym("cuStreamSynchronize");
    CUresult (*alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = sym("cuMemFree_v2");
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction noop, spin;
    static const char ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                              ".visible .entry bench_noop()\n{\n    ret;\n}\n"
                              ".visible .entry tessera_spin(.param .u64 ns)\n{\n    ret;\n}\n";
    CHECK("init", init(0));
    CHECK("device", get(&dev, 0));
    CHECK("context", retain(&ctx, dev));
    CHECK("current", set_current(ctx));
    CHECK("module", load(&module, ptx));
    CHECK("noop", function(&noop, module, "bench_noop"));
    CHECK("spin", function(&spin, module, "tessera_spin"));
    const char *mode = argv[1];
    if (!strcmp(mode, "spin")) {
        unsigned long long ns = (unsigned long long)atol(argv[2]) * 1000000ull;
        for (;;) {
            void *params[] = {&ns};
            CHECK("launch", launch(spin, 1, 1, 1, 1, 1, 1, 0, 0, params, 0));
            CHECK("sync", sync(0));
        }
    }
    if (argc < 4) { fprintf(stderr, "usage: see the source\n"); return 64; }
    const char *label = argv[2];
    int iter = atoi(argv[3]);
    double *samples = calloc((size_t)iter, sizeof *samples);
    if (!samples || iter <= 0) return 64;
    if (!strcmp(mode, "launch")) {
        CHECK("warm-up", launch(noop, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0));
        for (int i = 0; i < iter; i++) {
            long long t0 = now_ns();
            for (int j = 0; j < BATCH; j++) CHECK("launch", launch(noop, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0));
            samples[i] = (double)(now_ns() - t0) / BATCH;
        }
    } else if (!strcmp(mode, "alloc")) {
        for (int i = 0; i < iter; i++) {
            long long t0 = now_ns();
            for (int j = 0; j < BATCH; j++) {
                CUdeviceptr p;
                CHECK("alloc", alloc(&p, 1 << 20));
                CHECK("free", release(p));
            }
            samples[i] = (double)(now_ns() - t0) / BATCH;
        }
    } else if (!strcmp(mode, "switch")) {
        long gap_ms = argc > 4 ? atol(argv[4]) : 10;
        struct timespec gap = {gap_ms / 1000, (gap_ms % 1000) * 1000000L};
        for (int i = 0; i < iter; i++) {
            nanosleep(&gap, 0);
            long long t0 = now_ns();
            CHECK("launch", launch(noop, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0));
            samples[i] = (double)(now_ns() - t0);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 64;
    }
    report(label, samples, iter);
    return 0;
}
