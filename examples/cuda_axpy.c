/*
 * An ordinary CUDA driver-API program, written with no knowledge of tessera: y = a*x + y
 * on the first GPU it sees, checked on the host. scripts/try-without-gpu.sh builds it
 * against NVIDIA's cuda.h and runs it under `tessera run` on a machine without a GPU,
 * where libcuda.so.1 is tessera's fake driver: a stand-in that runs no real kernel (it
 * computes this one kernel on the CPU so that the result can be checked). Build it
 * yourself with: cc -I<cuda include> cuda_axpy.c -o cuda_axpy -lcuda
 *
 * usage: cuda_axpy [N [LAUNCHES]]   (default 1000000 elements, 20 launches)
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

/* assembled by NVIDIA's ptxas for sm_70 in the project's tests */
static const char axpy_ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry tessera_axpy(.param .f32 a, .param .u64 x, .param .u64 y, .param .u32 n)\n"
    "{\n"
    "    .reg .pred %p;\n    .reg .b32 %r<6>;\n    .reg .f32 %f<5>;\n    .reg .b64 %rd<8>;\n"
    "    ld.param.f32 %f1, [a];\n    ld.param.u64 %rd1, [x];\n    ld.param.u64 %rd2, [y];\n"
    "    ld.param.u32 %r1, [n];\n    mov.u32 %r2, %ctaid.x;\n    mov.u32 %r3, %ntid.x;\n"
    "    mov.u32 %r4, %tid.x;\n    mad.lo.s32 %r5, %r2, %r3, %r4;\n    setp.ge.u32 %p, %r5, %r1;\n"
    "    @%p bra DONE;\n    cvta.to.global.u64 %rd3, %rd1;\n    cvta.to.global.u64 %rd4, %rd2;\n"
    "    mul.wide.u32 %rd5, %r5, 4;\n    add.s64 %rd6, %rd3, %rd5;\n    add.s64 %rd7, %rd4, %rd5;\n"
    "    ld.global.f32 %f2, [%rd6];\n    ld.global.f32 %f3, [%rd7];\n    fma.rn.f32 %f4, %f1, %f2, %f3;\n"
    "    st.global.f32 [%rd7], %f4;\n"
    "DONE:\n    ret;\n}\n";

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                     \
            const char *s_ = "?";                                                     \
            cuGetErrorString(r_, &s_);                                                \
            fprintf(stderr, "cuda_axpy: %s failed: %d (%s)\n", #call, (int)r_, s_); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

int main(int argc, char **argv) {
    unsigned n = argc > 1 ? (unsigned)atol(argv[1]) : 1000000u;
    long launches = argc > 2 ? atol(argv[2]) : 20;
    CHECK(cuInit(0));
    int count = 0;
    CHECK(cuDeviceGetCount(&count));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    char name[128];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    size_t free_bytes = 0, total = 0;
    CHECK(cuMemGetInfo(&free_bytes, &total));
    printf("cuda_axpy: %d device(s) visible; device 0 is \"%s\"; cuMemGetInfo: %zu MiB free of %zu MiB\n", count,
           name, free_bytes >> 20, total >> 20);
    CUmodule module;
    CUfunction axpy;
    CHECK(cuModuleLoadData(&module, axpy_ptx));
    CHECK(cuModuleGetFunction(&axpy, module, "tessera_axpy"));
    size_t bytes = (size_t)n * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes);
    if (!x || !y) return 1;
    for (unsigned i = 0; i < n; i++) { x[i] = (float)(i % 7); y[i] = 1.0f; }
    CUdeviceptr dx, dy;
    CHECK(cuMemAlloc(&dx, bytes));
    CHECK(cuMemAlloc(&dy, bytes));
    CHECK(cuMemcpyHtoD(dx, x, bytes));
    CHECK(cuMemcpyHtoD(dy, y, bytes));
    float a = 0.5f;
    void *params[] = {&a, &dx, &dy, &n};
    unsigned block = 256, grid = (n + block - 1) / block;
    for (long i = 0; i < launches; i++) {
        CHECK(cuLaunchKernel(axpy, grid, 1, 1, block, 1, 1, 0, 0, params, 0));
    }
    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(y, dy, bytes));
    double worst = 0;
    for (unsigned i = 0; i < n; i++) {
        double want = 1.0 + (double)launches * 0.5 * (double)(i % 7);
        double err = y[i] > want ? y[i] - want : want - y[i];
        if (err > worst) worst = err;
    }
    CHECK(cuMemFree(dx));
    CHECK(cuMemFree(dy));
    printf("cuda_axpy: %ld launches of axpy on %u elements: %s (largest error %g)\n", launches, n,
           worst < 1e-3 ? "correct" : "WRONG", worst);
    return worst < 1e-3 ? 0 : 1;
}
