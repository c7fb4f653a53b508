/*
 * Memory patterns of real programs, as the memory tests run them under the interposer
 * (issue 51): an unmodified driver-API program that knows nothing of tessera. Every
 * line it prints starts with a word the test waits for; times are CLOCK_MONOTONIC ns.
 *
 * usage: memory_app retry BLOCKS BLOCK_MIB ASK_MIB
 *            allocate BLOCKS blocks of BLOCK_MIB ("allocated"), ask ASK_MIB more: on
 *            CUDA_ERROR_OUT_OF_MEMORY ("oom CODE") free one block and ask again — what
 *            PyTorch's caching allocator does ("retried" on success), then free all
 *            ("done")
 *        memory_app threads BLOCKS BLOCK_MIB ASK_MIB PAUSE_MS
 *            allocate BLOCKS blocks ("allocated"); a second thread asks ASK_MIB
 *            ("asking T"), and PAUSE_MS later the first thread frees one block
 *            ("freeing T" before, "freed T" after); "granted T" once the second
 *            thread's allocation returns, then "done"
 *        memory_app hold MIB [STEP_MIB]
 *            allocate MIB ("allocated", in blocks of STEP_MIB when given), then obey
 *            lines on stdin: "free" frees the last block ("freed T"), "alloc MIB"
 *            allocates one more block ("allocated T" or "error alloc CODE"), "exit"
 *            (or the end of stdin) frees everything and exits ("done")
 * A failure prints "error STEP CODE" and exits 2.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *driver;
static CUresult (*alloc_)(CUdeviceptr *, size_t);
static CUresult (*free_)(CUdeviceptr);

static void *sym(const char *name) {
    void *p = dlsym(driver, name);
    if (!p) { printf("error dlsym:%s 0\n", name); exit(2); }
    return p;
}

#define CHECK(step, call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { printf("error %s %d\n", step, (int)r_); exit(2); } } while (0)

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static void sleep_ms(long ms) {
    struct timespec p = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&p, 0);
}

static size_t mib(const char *s) { return (size_t)atol(s) << 20; }

#define MAX_BLOCKS 64
static CUdeviceptr blocks[MAX_BLOCKS];
static int nblocks;

static CUcontext ctx;
static size_t ask;

static void *asker(void *arg) {
    (void)arg;
    CUdeviceptr p;
    CHECK("current", ((CUresult (*)(CUcontext))sym("cuCtxSetCurrent"))(ctx));
    printf("asking %llu\n", now_ns());
    CHECK("ask", alloc_(&p, ask));
    printf("granted %llu\n", now_ns());
    CHECK("free", free_(p));
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, 0, _IONBF, 0);
    if (argc < 3) { fprintf(stderr, "usage: see the comment at the top\n"); return 64; }
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) { printf("error dlopen 0\n"); return 2; }
    CUresult (*init)(unsigned) = sym("cuInit");
    CUresult (*get)(CUdevice *, int) = sym("cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
    alloc_ = sym("cuMemAlloc_v2");
    free_ = sym("cuMemFree_v2");
    CUdevice dev;
    CHECK("init", init(0));
    CHECK("device", get(&dev, 0));
    CHECK("context", retain(&ctx, dev));
    CHECK("current", set_current(ctx));

    if (!strcmp(argv[1], "retry") && argc >= 5) {
        int n = atoi(argv[2]);
        size_t block = mib(argv[3]);
        ask = mib(argv[4]);
        for (int i = 0; i < n && i < MAX_BLOCKS; i++) CHECK("alloc", alloc_(&blocks[nblocks++], block));
        printf("allocated %llu\n", now_ns());
        CUdeviceptr p;
        CUresult r = alloc_(&p, ask);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            printf("oom %d %llu\n", (int)r, now_ns());
            CHECK("free", free_(blocks[--nblocks]));
            CHECK("retry", alloc_(&p, ask));
            printf("retried %llu\n", now_ns());
        } else {
            CHECK("ask", r);
            printf("granted %llu\n", now_ns());
        }
        CHECK("free", free_(p));
        while (nblocks) CHECK("free", free_(blocks[--nblocks]));
        printf("done\n");
        return 0;
    }
    if (!strcmp(argv[1], "threads") && argc >= 6) {
        int n = atoi(argv[2]);
        size_t block = mib(argv[3]);
        ask = mib(argv[4]);
        long pause = atol(argv[5]);
        for (int i = 0; i < n && i < MAX_BLOCKS; i++) CHECK("alloc", alloc_(&blocks[nblocks++], block));
        printf("allocated %llu\n", now_ns());
        pthread_t t;
        if (pthread_create(&t, 0, asker, 0)) { printf("error thread 0\n"); return 2; }
        sleep_ms(pause);
        /* stamped before the free too: the grant may come (and be stamped) before this
         * thread is back on a CPU to stamp "freed" */
        printf("freeing %llu\n", now_ns());
        CHECK("free", free_(blocks[--nblocks]));
        printf("freed %llu\n", now_ns());
        pthread_join(t, 0);
        while (nblocks) CHECK("free", free_(blocks[--nblocks]));
        printf("done\n");
        return 0;
    }
    if (!strcmp(argv[1], "hold")) {
        size_t total = mib(argv[2]);
        size_t step = argc > 3 ? mib(argv[3]) : total;
        for (size_t got = 0; got < total && nblocks < MAX_BLOCKS; got += step) {
            size_t b = total - got < step ? total - got : step;
            CHECK("alloc", alloc_(&blocks[nblocks++], b));
        }
        printf("allocated %llu\n", now_ns());
        char line[128];
        while (fgets(line, sizeof line, stdin)) {
            if (!strncmp(line, "free", 4) && nblocks) {
                CHECK("free", free_(blocks[--nblocks]));
                printf("freed %llu\n", now_ns());
            } else if (!strncmp(line, "alloc ", 6) && nblocks < MAX_BLOCKS) {
                CUresult r = alloc_(&blocks[nblocks], mib(line + 6));
                if (r == CUDA_SUCCESS) {
                    nblocks++;
                    printf("allocated %llu\n", now_ns());
                } else {
                    printf("error alloc %d\n", (int)r);
                }
            } else if (!strncmp(line, "exit", 4)) {
                break;
            }
        }
        while (nblocks) CHECK("free", free_(blocks[--nblocks]));
        printf("done\n");
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top\n");
    return 64;
}
