/*
 * An unmodified program built for the per-thread default stream, as nvcc
 * --default-stream per-thread builds one: CUDA_API_PER_THREAD_DEFAULT_STREAM is defined
 * before cuda.h, so the header renames the stream entry points it calls to their
 * _ptsz/_ptds variants (cuStreamBeginCapture is cuStreamBeginCapture_v2_ptsz,
 * cuLaunchKernel cuLaunchKernel_ptsz, ...), whose NULL stream is the calling thread's
 * per-thread default stream. Linked with the driver (libcuda.so.1), it calls those
 * names directly.
 *
 * usage: ptsz_app N MS [MODE]
 *   captures N launches of a kernel busy for MS ms on the NULL stream — its per-thread
 *   default stream — (MODE: 0 global, the default; 1 thread-local; 2 relaxed), ends the
 *   capture ("captured"), instantiates the graph, launches it twice on the same stream
 *   and synchronises it ("replayed"). During the capture it prints "capturing STATUS"
 *   (cuStreamIsCapturing of the NULL stream), "info STATUS" (cuStreamGetCaptureInfo's)
 *   and "legacy_status RESULT" (cuStreamIsCapturing of CU_STREAM_LEGACY).
 *   SYNC_IN_CAPTURE=1: cuCtxSynchronize after the first launch ("ctxsync RESULT"), what
 *   a synchronising launch gate would do.
 *   OTHER_THREAD=1: after the first launch, another thread launches one kernel on its
 *   own NULL stream (its per-thread default stream, not capturing) and synchronises it
 *   ("other RESULT RESULT").
 *   LEGACY_IN_CAPTURE=1: after the first launch, one launch on CU_STREAM_LEGACY
 *   ("legacy RESULT").
 * "error STEP CODE" on a failure, exiting 2.
 */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(step, call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { printf("error %s %d\n", step, (int)r_); exit(2); } } while (0)

static CUcontext ctx;
static CUfunction spin;
static unsigned long long ns;

/* another thread's launch on its own per-thread default stream */
static void *other(void *arg) {
    CUresult *r = arg;
    void *params[] = {&ns};
    r[0] = cuCtxSetCurrent(ctx);
    if (r[0] == CUDA_SUCCESS) r[0] = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, 0, params, 0);
    r[1] = r[0] == CUDA_SUCCESS ? cuStreamSynchronize(0) : r[0];
    return 0;
}

static int knob(const char *name) { return getenv(name) && atoi(getenv(name)); }

int main(int argc, char **argv) {
    setvbuf(stdout, 0, _IONBF, 0);
    if (argc < 3) { fprintf(stderr, "usage: ptsz_app N MS [MODE]\n"); return 64; }
    long n = atol(argv[1]);
    ns = (unsigned long long)atol(argv[2]) * 1000000ull;
    int mode = argc > 3 ? atoi(argv[3]) : 0;
    static const char ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                              ".visible .entry tessera_spin(.param .u64 ns)\n{\n    ret;\n}\n";
    CUdevice dev;
    CUmodule module;
    CHECK("init", cuInit(0));
    CHECK("device", cuDeviceGet(&dev, 0));
    CHECK("context", cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK("current", cuCtxSetCurrent(ctx));
    CHECK("module", cuModuleLoadData(&module, ptx));
    CHECK("function", cuModuleGetFunction(&spin, module, "tessera_spin"));
    printf("init\n");

    CHECK("begincapture", cuStreamBeginCapture(0, (CUstreamCaptureMode)mode));
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CHECK("iscapturing", cuStreamIsCapturing(0, &status));
    printf("capturing %d\n", (int)status);
    cuuint64_t id = 0;
    CUgraph capturing = 0;
    status = CU_STREAM_CAPTURE_STATUS_NONE;
#if CUDA_VERSION >= 13000
    /* CUDA 13's cuStreamGetCaptureInfo is the _v3 one, with the edges' data */
    CHECK("captureinfo", cuStreamGetCaptureInfo(0, &status, &id, &capturing, 0, 0, 0));
#else
    CHECK("captureinfo", cuStreamGetCaptureInfo(0, &status, &id, &capturing, 0, 0));
#endif
    printf("info %d\n", (int)status);
    printf("legacy_status %d\n", (int)cuStreamIsCapturing(CU_STREAM_LEGACY, &status));
    for (long i = 0; i < n; i++) {
        void *params[] = {&ns};
        CHECK("launch", cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, 0, params, 0));
        if (i > 0) continue;
        if (knob("SYNC_IN_CAPTURE")) printf("ctxsync %d\n", (int)cuCtxSynchronize());
        if (knob("OTHER_THREAD")) {
            pthread_t t;
            CUresult r[2] = {CUDA_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN};
            if (pthread_create(&t, 0, other, r) != 0) { printf("error thread 0\n"); return 2; }
            pthread_join(t, 0);
            printf("other %d %d\n", (int)r[0], (int)r[1]);
        }
        if (knob("LEGACY_IN_CAPTURE"))
            printf("legacy %d\n", (int)cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_LEGACY, params, 0));
    }
    CUgraph graph;
    CUgraphExec exec;
    CHECK("endcapture", cuStreamEndCapture(0, &graph));
    printf("captured\n");
    CHECK("instantiate", cuGraphInstantiate(&exec, graph, 0));
    CHECK("graphlaunch", cuGraphLaunch(exec, 0));
    CHECK("graphlaunch", cuGraphLaunch(exec, 0));
    CHECK("sync", cuStreamSynchronize(0));
    printf("replayed\n");
    return 0;
}
