/*
 * The schedGPU life cycle from C: reserve GPU memory before allocating it, return it
 * after freeing it. Built and run by crates/tessera-ledger/tests/c_abi.rs:
 *
 *   cc -I crates/tessera-ledger/include examples/ledger_demo.c \
 *      -L target/debug -ltessera_ledger -Wl,-rpath,target/debug -o ledger_demo
 *   TESSERA_LEDGER=/dev/shm/demo-ledger TESSERA_GPU_MEMORY=4799M ./ledger_demo
 */
#include <stdio.h>
#include "tessera_ledger.h"

static int check(const char *what, TesseraStatus s) {
    printf("%-34s %s\n", what, tessera_strerror(s));
    return s == TESSERA_OK;
}

int main(void) {
    const uint64_t buffer = 512ull << 20; /* 512 MiB */

    if (!check("tessera_init", tessera_init())) return 1;

    /* before cudaMalloc: wait up to one second for the memory */
    if (!check("tessera_pre_alloc 512 MiB", tessera_pre_alloc(0, buffer, 1000))) return 1;
    /* ... cudaMalloc(&dev, buffer); kernels; cudaFree(dev); ... */
    if (!check("tessera_post_free 512 MiB", tessera_post_free(0, buffer))) return 1;

    /* errors are codes, never crashes */
    TesseraStatus too_big = tessera_pre_alloc(0, 1ull << 50, 0);
    check("tessera_pre_alloc 1 PiB (expected)", too_big);
    TesseraStatus over_free = tessera_post_free(0, 1);
    check("tessera_post_free unheld (expected)", over_free);
    TesseraStatus no_gpu = tessera_pre_alloc(9, 1, 0);
    check("tessera_pre_alloc on GPU 9 (expected)", no_gpu);

    if (!check("tessera_shutdown", tessera_shutdown())) return 1;
    return too_big == TESSERA_EXCEEDS_CAPACITY && over_free == TESSERA_OVER_FREE
        && no_gpu == TESSERA_NO_SUCH_GPU ? 0 : 2;
}
