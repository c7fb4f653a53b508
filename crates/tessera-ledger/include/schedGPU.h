/* schedGPU's explicit API (Reaño et al., "schedGPU", §4 "the life cycle") on tessera's
 * memory ledger, for programs written against schedGPU: include this header and link
 * with -ltessera_ledger. Each call returns a CUDA runtime error code (a cudaError_t
 * value): 0 cudaSuccess, 1 cudaErrorInvalidValue, 2 cudaErrorMemoryAllocation,
 * 3 cudaErrorInitializationError, 101 cudaErrorInvalidDevice, 600 cudaErrorNotReady,
 * 999 cudaErrorUnknown. The ledger is configured by the environment (TESSERA_LEDGER,
 * TESSERA_GPU_MEMORY, TESSERA_POLICY, TESSERA_PRIORITY; see tessera_ledger.h). */
#ifndef SCHEDGPU_H
#define SCHEDGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Open (or create) the ledger; the shutdown stage then runs by itself at exit. */
int schedGPUInit(void);

/* Reserve `size` bytes on `device` before cudaMalloc. timeout_ms: 0 = non-blocking
 * (600, cudaErrorNotReady, when not free now), > 0 = wait up to that long, < 0 = wait
 * as long as it takes (tessera's extension; a wait that would deadlock is refused). */
int preCudaMalloc(size_t size, int device, int64_t timeout_ms);

/* Return `size` bytes on `device` after cudaFree; waiting programs are notified. */
int postCudaFree(size_t size, int device);

/* The shutdown stage, explicitly (it also runs at exit). */
int schedGPUShutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* SCHEDGPU_H */
