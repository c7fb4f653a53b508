/* A CUDA-runtime program as nvcc builds one, written out by hand (PyPI's CUDA wheels
 * have no nvcc): its kernel in a fat binary (NVIDIA's `fatbinary`, its PTX compressed
 * as nvcc packs it), wrapped as nvcc wraps it (`__fatBinC_Wrapper_t`), registered with
 * the runtime at start (`__cudaRegisterFatBinary`, `__cudaRegisterFunction`: what
 * nvcc's generated host code calls) and launched by its host stub
 * (`cudaLaunchKernel`). The runtime, not the program, hands the fat binary to the
 * driver: what the GPU slicing check (scripts/gpu-slicing-check.sh) runs under tessera
 * with kernel slicing on and off, to see that the runtime's own load is sliced.
 *
 * The fat binary's bytes come from the build (scripts/gpu-check/build-runtime-program.sh:
 * `tessera_stamp_fatbin`, 8-byte aligned). The kernel (runtime_stamp.ptx) writes at each
 * thread's index a value made of its block's coordinates, the grid's size and its thread
 * index.
 *
 * usage: runtime_fatbin BLOCKS_X BLOCKS_Y
 * Prints one JSON line: blocks, elements differing from the unsliced launch's values
 * (computed here), an FNV-1a digest of the output, and the first CUDA error if any.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern const unsigned char tessera_stamp_fatbin[];

/* nvcc's wrapper of a fat binary, which the runtime registers */
typedef struct {
    int magic;
    int version;
    const void *data;
    void *filename_or_fatbins;
} fatbin_wrapper;

static const fatbin_wrapper wrapper __attribute__((aligned(8))) = {0x466243b1, 1, tessera_stamp_fatbin, 0};

/* the runtime's registration entry points nvcc's host code calls */
extern void **__cudaRegisterFatBinary(void *fat_cubin);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaUnregisterFatBinary(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                                   const char *device_name, int thread_limit, uint3 *tid,
                                   uint3 *bid, dim3 *block, dim3 *grid, int *warp_size);

/* the kernel's host stub: its address names the kernel to the runtime */
static void stamp(void) {}

#define THREADS 128u

static uint32_t expected(uint32_t bx, uint32_t by, uint32_t gx, uint32_t gy, uint32_t t) {
    return (bx * 7919u + by * 104729u + gx * 31u + gy) * 1000003u + t;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s BLOCKS_X BLOCKS_Y\n", argv[0]);
        return 64;
    }
    uint32_t gx = (uint32_t)strtoul(argv[1], 0, 10), gy = (uint32_t)strtoul(argv[2], 0, 10);
    size_t n = (size_t)gx * gy * THREADS;
    const char *error = "none";
    void **handle = __cudaRegisterFatBinary((void *)&wrapper);
    __cudaRegisterFunction(handle, (const char *)stamp, (char *)"stamp", "stamp", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFatBinaryEnd(handle);
    uint32_t *host = malloc(n * sizeof *host);
    uint32_t *dev = 0;
    cudaError_t e = host ? cudaMalloc((void **)&dev, n * sizeof *dev) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaMemset(dev, 0xff, n * sizeof *dev);
    if (e == cudaSuccess) {
        void *args[] = {&dev};
        dim3 grid = {gx, gy, 1}, block = {THREADS, 1, 1};
        e = cudaLaunchKernel((const void *)stamp, grid, block, args, 0, 0);
    }
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(host, dev, n * sizeof *dev, cudaMemcpyDeviceToHost);
    size_t differing = 0;
    uint64_t digest = 1469598103934665603ull;
    if (e == cudaSuccess) {
        for (uint32_t by = 0; by < gy; by++)
            for (uint32_t bx = 0; bx < gx; bx++)
                for (uint32_t t = 0; t < THREADS; t++) {
                    size_t i = ((size_t)by * gx + bx) * THREADS + t;
                    differing += host[i] != expected(bx, by, gx, gy, t);
                }
        const unsigned char *b = (const unsigned char *)host;
        for (size_t i = 0; i < n * sizeof *host; i++) digest = (digest ^ b[i]) * 1099511628211ull;
    } else {
        error = cudaGetErrorName(e);
    }
    printf("{\"blocks\": %llu, \"differing\": %zu, \"digest\": \"%016llx\", \"error\": \"%s\"}\n",
           (unsigned long long)gx * gy, e == cudaSuccess ? differing : n, (unsigned long long)digest, error);
    if (dev) cudaFree(dev);
    free(host);
    __cudaUnregisterFatBinary(handle);
    return e == cudaSuccess && differing == 0 ? 0 : 1;
}
