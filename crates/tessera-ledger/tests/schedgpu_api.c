/* A program written against schedGPU's API (its header only), run against tessera's
 * ledger: the life cycle of the paper's §4 with a GPU of 1000 bytes (the test sets
 * TESSERA_GPU_MEMORY). With -DCHECK_CUDA_CODES it is compiled against NVIDIA's real
 * driver_types.h and checks that the codes it expects are the CUDA runtime's. */
#include "schedGPU.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef CHECK_CUDA_CODES
#include <driver_types.h>
_Static_assert(cudaSuccess == 0, "cudaSuccess");
_Static_assert(cudaErrorInvalidValue == 1, "cudaErrorInvalidValue");
_Static_assert(cudaErrorMemoryAllocation == 2, "cudaErrorMemoryAllocation");
_Static_assert(cudaErrorInitializationError == 3, "cudaErrorInitializationError");
_Static_assert(cudaErrorInvalidDevice == 101, "cudaErrorInvalidDevice");
_Static_assert(cudaErrorNotReady == 600, "cudaErrorNotReady");
_Static_assert(cudaErrorUnknown == 999, "cudaErrorUnknown");
#endif

static int failures = 0;

static void expect(const char *what, int got, int want) {
    printf("%s -> %d%s\n", what, got, got == want ? "" : " (UNEXPECTED)");
    if (got != want) failures++;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int main(void) {
    expect("preCudaMalloc before schedGPUInit", preCudaMalloc(1, 0, 0), 3);
    expect("schedGPUInit", schedGPUInit(), 0);
    expect("preCudaMalloc 600", preCudaMalloc(600, 0, 0), 0);
    expect("preCudaMalloc 600 more, non-blocking", preCudaMalloc(600, 0, 0), 600);
    /* a wait only its own 600 stand in the way of could never end: refused at once,
     * cudaErrorMemoryAllocation, not cudaErrorNotReady after the timeout as the paper's
     * client would (docs/ledger.md says why) */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect("preCudaMalloc 600 more, 10 s timeout", preCudaMalloc(600, 0, 10000), 2);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec > 5) {
        fprintf(stderr, "FAIL: the refusal took %ld s, not at once\n", (long)(t1.tv_sec - t0.tv_sec));
        failures++;
    }
    expect("preCudaMalloc beyond the GPU", preCudaMalloc(2000, 0, 0), 2);
    expect("preCudaMalloc on device 7", preCudaMalloc(1, 7, 0), 101);
    expect("preCudaMalloc on device -1", preCudaMalloc(1, -1, 0), 101);
    expect("postCudaFree more than held", postCudaFree(700, 0), 1);
    expect("postCudaFree 600", postCudaFree(600, 0), 0);
    expect("preCudaMalloc the whole GPU", preCudaMalloc(1000, 0, 0), 0);
    fflush(stdout);

    /* another program waits for memory this one holds and gets it when freed */
    pid_t child = fork();
    if (child == 0) {
        failures = 0;
        expect("child schedGPUInit", schedGPUInit(), 0);
        expect("child preCudaMalloc 500, waiting up to 10 s", preCudaMalloc(500, 0, 10000), 0);
        /* exits holding 500 bytes: the shutdown stage releases them */
        fflush(stdout);
        exit(failures == 0 ? 0 : 1);
    }
    sleep_ms(300);
    expect("postCudaFree the whole GPU (wakes the child)", postCudaFree(1000, 0), 0);
    int status = 0;
    waitpid(child, &status, 0);
    expect("child exit status", WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
    expect("preCudaMalloc the whole GPU after the child exited", preCudaMalloc(1000, 0, 2000), 0);
    expect("schedGPUShutdown", schedGPUShutdown(), 0);
    expect("preCudaMalloc after shutdown", preCudaMalloc(1, 0, 0), 3);
    printf("schedgpu api: %s\n", failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}
