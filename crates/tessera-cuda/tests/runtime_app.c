/*
 * A CUDA runtime-API program, linked with NVIDIA's real libcudart.so.12: the most
 * demanding real user of cuGetProcAddress. On a fake driver the runtime cannot start
 * (it demands private tables through cuGetExportTable, which no fake has), so this ends
 * with the runtime's own error; what the test checks is how its look-ups were answered.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
int main(void) {
    void *p = 0;
    cudaError_t e = cudaMalloc(&p, 1 << 20);
    printf("cudaMalloc %d %s\n", (int)e, cudaGetErrorName(e));
    if (e == cudaSuccess) {
        size_t f, t;
        e = cudaMemGetInfo(&f, &t);
        printf("cudaMemGetInfo %d %zu %zu\n", (int)e, f, t);
        char buf[16] = {0};
        e = cudaMemcpy(p, buf, sizeof buf, cudaMemcpyHostToDevice);
        printf("cudaMemcpy %d\n", (int)e);
        e = cudaFree(p);
        printf("cudaFree %d\n", (int)e);
    }
    return e == cudaSuccess ? 0 : 3;
}
