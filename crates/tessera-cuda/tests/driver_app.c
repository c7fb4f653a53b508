/*
 * An unmodified CUDA driver-API program, as the tests run it under the interposer: it
 * opens the driver the way the CUDA runtime does (dlopen("libcuda.so.1"), then dlsym,
 * or cuGetProcAddress for the allocation), and knows nothing of tessera.
 *
 * usage: driver_app alloc MIB HOLD_MS   allocate, hold, free
 *        driver_app getproc MIB          allocate through cuGetProcAddress("cuMemAlloc")
 *        driver_app meminfo MIB          print cuMemGetInfo before and after allocating
 *        driver_app async|vmm|pool|pool13|array MIB HOLD_MS
 *                                        the same as alloc, through cuMemAllocAsync /
 *                                        cuMemFreeAsync, cuMemCreate (at device 0's
 *                                        location) / cuMemRelease, a pool created at
 *                                        device POOL_DEVICE's location (default 0) /
 *                                        cuMemFreeAsync, or cuArrayCreate /
 *                                        cuArrayDestroy (float, 1 channel)
 *        SHOW_DEVICES=1 (any mode)       "sees I BUS" for each device, "peer 0 1 RESULT"
 *                                        of cuDeviceCanAccessPeer, and "bus BUS RESULT
 *                                        ORDINAL" of cuDeviceGetByPCIBusId for the
 *                                        machine's two GPUs
 *        driver_app grow MIB MORE_MIB PAUSE_MS
 *                                        allocate MIB, pause, allocate MORE_MIB more
 *                                        ("grown"), free both
 *        driver_app capture N MS [MODE]  capture N launches of a kernel busy for MS ms
 *                                        on a stream (MODE: 0 global, the default; 1
 *                                        thread-local; 2 relaxed), end the capture
 *                                        ("captured"), then launch the graph twice and
 *                                        synchronise ("replayed"); SYNC_IN_CAPTURE=1
 *                                        calls cuCtxSynchronize after the first launch
 *        driver_app escapes MIB            the entry points a program could slip past a
 *                                        tenant's limit or placement with: prints
 *                                        "NAME RESULT" for each (legacy cuMemAlloc by
 *                                        dlsym and by cuGetProcAddress version 3000, a
 *                                        mipmapped array, a graph memory node, each
 *                                        device by PCI bus id, context limits
 *                                        (malloc heap of MIB, then 16 MiB; a 64 KiB
 *                                        stack; 2^20 pending device launches),
 *                                        cuDeviceTotalMem, a legacy cuLaunchGrid)
 *        driver_app launch N MS [GRID BLOCK]
 *                                        N launches of a kernel busy for MS ms (a
 *                                        decimal: 0.05 is 50 us; GRID
 *                                        blocks of BLOCK threads; default 1 x 1), each
 *                                        synchronised; "launch T" after each launch
 *                                        returns (T: CLOCK_MONOTONIC ns); GAP_MS=g
 *                                        sleeps g ms after each, CPU_US=c computes
 *                                        (spins) c us after each, SYNC_CTX=1
 *                                        synchronises with cuCtxSynchronize,
 *                                        FORK_WHEN_RAISED=1 forks once while its nice
 *                                        is raised ("forked child nice N", "forked
 *                                        parent nice N"), HOLD_MS=h
 *                                        stays h ms after printing "done"; FORK=1
 *                                        forks after the first launch, and parent
 *                                        and child both make the remaining launches
 *                                        (the parent waits for the child; "child
 *                                        STATUS"); ASYNC_EVERY=k makes every k-th
 *                                        kernel 100 x MS long and leaves the launches
 *                                        unsynchronised, but for one each 100 ms (a
 *                                        program gaming a gate that measures only a
 *                                        slice's first launches)
 * Prints one line per step ("init", "devices N", "device HANDLE PCI_BUS_ID" of its device
 * 0, "allocated", "freed",
 * "meminfo FREE TOTAL") and
 * "error STEP CODE" on a failure, exiting 2.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void *driver;
static void *sym(const char *name) {
    void *p = dlsym(driver, name);
    if (!p) { printf("error dlsym:%s 0\n", name); exit(2); }
    return p;
}
#define CHECK(step, call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { printf("error %s %d\n", step, (int)r_); exit(2); } } while (0)

/* The time this thread has waited on a run queue (ns; /proc's schedstat, its second
 * field), or 0 where the kernel does not keep it. */
static long long runqueue_ns(void) {
    long long on_cpu = 0, waited = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &on_cpu, &waited) != 2) waited = 0;
    fclose(f);
    return waited;
}
int main(int argc, char **argv) {
    setvbuf(stdout, 0, _IONBF, 0);
    if (argc < 3) { fprintf(stderr, "usage: driver_app alloc|getproc|meminfo MIB [HOLD_MS]\n"); return 64; }
    size_t bytes = (size_t)atol(argv[2]) << 20;
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) { printf("error dlopen 0\n"); return 2; }
    CUresult (*init)(unsigned) = sym("cuInit");
    CUresult (*get)(CUdevice *, int) = sym("cuDeviceGet");
    CUresult (*count)(int *) = sym("cuDeviceGetCount");
    CUresult (*retain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
    CUresult (*alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = sym("cuMemFree_v2");
    CUresult (*info)(size_t *, size_t *) = sym("cuMemGetInfo_v2");
    CUresult (*getproc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        sym("cuGetProcAddress_v2");
    CUresult (*load)(CUmodule *, const void *) = sym("cuModuleLoadData");
    CUresult (*function)(CUfunction *, CUmodule, const char *) = sym("cuModuleGetFunction");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel");
    CUresult (*sync)(CUstream) = sym("cuStreamSynchronize");

    CHECK("init", init(0));
    printf("init\n");
    CUdevice dev;
    CUcontext ctx;
    int n;
    CHECK("count", count(&n));
    printf("devices %d\n", n);
    CHECK("device", get(&dev, 0));
    CUresult (*bus_of)(char *, int, CUdevice) = sym("cuDeviceGetPCIBusId");
    char dev_bus[32] = "?";
    CHECK("busid", bus_of(dev_bus, sizeof dev_bus, dev));
    printf("device %d %s\n", (int)dev, dev_bus);
    CHECK("context", retain(&ctx, dev));
    CHECK("current", set_current(ctx));
    if (getenv("SHOW_DEVICES")) {
        /* every device it sees, peer access between its first two, and each of the
         * machine's two GPUs looked up by PCI bus id */
        CUresult (*by_bus)(CUdevice *, const char *) = sym("cuDeviceGetByPCIBusId");
        CUresult (*can_peer)(int *, CUdevice, CUdevice) = sym("cuDeviceCanAccessPeer");
        for (int i = 0; i < n; i++) {
            CUdevice d;
            char bus[32];
            CHECK("device", get(&d, i));
            CHECK("busid", bus_of(bus, sizeof bus, d));
            printf("sees %d %s\n", i, bus);
        }
        int can = -1;
        printf("peer 0 1 %d\n", (int)can_peer(&can, 0, 1));
        for (int i = 0; i < 2; i++) {
            char bus[32];
            CUdevice found = -1;
            snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + i);
            CUresult r = by_bus(&found, bus);
            printf("bus %s %d %d\n", bus, (int)r, r == CUDA_SUCCESS ? (int)found : -1);
        }
    }
    if (!strcmp(argv[1], "escapes")) {
        typedef unsigned int ptr_v1;
        CUresult (*alloc_v1)(ptr_v1 *, unsigned) = sym("cuMemAlloc");
        CUresult (*free_v1)(ptr_v1) = sym("cuMemFree");
        ptr_v1 p1 = 0;
        CUresult r = alloc_v1(&p1, (unsigned)bytes);
        printf("legacy_alloc %d\n", (int)r);
        if (r == CUDA_SUCCESS) free_v1(p1);
        void *fn = 0;
        CUdriverProcAddressQueryResult found;
        CHECK("getproc", getproc("cuMemAlloc", &fn, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
        r = ((CUresult (*)(ptr_v1 *, unsigned))fn)(&p1, (unsigned)bytes);
        printf("getproc_legacy_alloc %d\n", (int)r);
        if (r == CUDA_SUCCESS) free_v1(p1);
        CUresult (*mipmap)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned) = sym("cuMipmappedArrayCreate");
        CUresult (*mipmap_destroy)(CUmipmappedArray) = sym("cuMipmappedArrayDestroy");
        CUDA_ARRAY3D_DESCRIPTOR d3;
        memset(&d3, 0, sizeof d3);
        d3.Width = bytes / 4 / 256;
        d3.Height = 256;
        d3.Format = CU_AD_FORMAT_FLOAT;
        d3.NumChannels = 1;
        CUmipmappedArray mm;
        r = mipmap(&mm, &d3, 4);
        printf("mipmap %d\n", (int)r);
        if (r == CUDA_SUCCESS) mipmap_destroy(mm);
        CUresult (*graph_create)(CUgraph *, unsigned) = sym("cuGraphCreate");
        CUresult (*mem_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUDA_MEM_ALLOC_NODE_PARAMS *) =
            sym("cuGraphAddMemAllocNode");
        CUgraph graph;
        CUgraphNode node;
        CUDA_MEM_ALLOC_NODE_PARAMS np;
        memset(&np, 0, sizeof np);
        np.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        np.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        np.poolProps.location.id = (int)dev;
        np.bytesize = bytes;
        CHECK("graph", graph_create(&graph, 0));
        printf("memnode %d\n", (int)mem_node(&node, graph, 0, 0, &np));
        CUresult (*by_bus)(CUdevice *, const char *) = sym("cuDeviceGetByPCIBusId");
        for (int i = 0; i < 2; i++) {
            char bus[32];
            CUdevice found_dev = -1;
            snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + i);
            r = by_bus(&found_dev, bus);
            printf("pcibus %d %d\n", i, (int)r);
        }
        CUresult (*set_limit)(CUlimit, size_t) = sym("cuCtxSetLimit");
        printf("heap %d\n", (int)set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, bytes));
        printf("small_heap %d\n", (int)set_limit(CU_LIMIT_MALLOC_HEAP_SIZE, 16 << 20));
        printf("stack %d\n", (int)set_limit(CU_LIMIT_STACK_SIZE, 64 << 10));
        printf("pending %d\n", (int)set_limit(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 1 << 20));
        CUresult (*info_v1)(unsigned *, unsigned *) = sym("cuMemGetInfo");
        unsigned f1 = 0, t1 = 0;
        CHECK("meminfo_v1", info_v1(&f1, &t1));
        printf("legacy_meminfo %u %u\n", f1, t1);
        CUresult (*total)(size_t *, CUdevice) = sym("cuDeviceTotalMem_v2");
        size_t t = 0;
        CHECK("totalmem", total(&t, dev));
        printf("totalmem %zu\n", t);
        static const char ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                                  ".visible .entry tessera_noop()\n{\n    ret;\n}\n";
        CUresult (*grid)(CUfunction, int, int) = sym("cuLaunchGrid");
        CUmodule module;
        CUfunction noop;
        CHECK("module", load(&module, ptx));
        CHECK("function", function(&noop, module, "tessera_noop"));
        printf("launchgrid %d\n", (int)grid(noop, 1, 1));
        return 0;
    }
    if (!strcmp(argv[1], "capture")) {
        static const char ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                                  ".visible .entry tessera_spin(.param .u64 ns)\n{\n    ret;\n}\n";
        CUresult (*make_stream)(CUstream *, unsigned) = sym("cuStreamCreate");
        CUresult (*begin)(CUstream, CUstreamCaptureMode) = sym("cuStreamBeginCapture_v2");
        CUresult (*end)(CUstream, CUgraph *) = sym("cuStreamEndCapture");
        CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long) = sym("cuGraphInstantiateWithFlags");
        CUresult (*graph_launch)(CUgraphExec, CUstream) = sym("cuGraphLaunch");
        CUmodule module;
        CUfunction spin;
        CUstream stream;
        CHECK("module", load(&module, ptx));
        CHECK("function", function(&spin, module, "tessera_spin"));
        CHECK("stream", make_stream(&stream, 0));
        long n = atol(argv[2]);
        unsigned long long ns = (unsigned long long)atol(argc > 3 ? argv[3] : "1") * 1000000ull;
        int mode = argc > 4 ? atoi(argv[4]) : 0;
        CHECK("begincapture", begin(stream, (CUstreamCaptureMode)mode));
        for (long i = 0; i < n; i++) {
            void *params[] = {&ns};
            CHECK("launch", launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, 0));
            if (i == 0 && getenv("SYNC_IN_CAPTURE")) {
                /* what a naive accounting would do: synchronise the context */
                CUresult (*ctx_sync)(void) = sym("cuCtxSynchronize");
                printf("ctxsync %d\n", (int)ctx_sync());
            }
        }
        CUgraph graph;
        CUgraphExec exec;
        CHECK("endcapture", end(stream, &graph));
        printf("captured\n");
        CHECK("instantiate", instantiate(&exec, graph, 0));
        CHECK("graphlaunch", graph_launch(exec, stream));
        CHECK("graphlaunch", graph_launch(exec, stream));
        CHECK("sync", sync(stream));
        printf("replayed\n");
        return 0;
    }
    if (!strcmp(argv[1], "launch")) {
        static const char ptx[] = ".version 6.0\n.target sm_50\n.address_size 64\n"
                                  ".visible .entry tessera_spin(.param .u64 ns)\n{\n    ret;\n}\n";
        CUmodule module;
        CUfunction spin;
        CHECK("module", load(&module, ptx));
        CHECK("function", function(&spin, module, "tessera_spin"));
        long n = atol(argv[2]);
        unsigned long long ns = (unsigned long long)(atof(argc > 3 ? argv[3] : "1") * 1e6);
        unsigned grid = argc > 4 ? (unsigned)atol(argv[4]) : 1, block = argc > 5 ? (unsigned)atol(argv[5]) : 1;
        pid_t child = -1;
        long long waited_before = runqueue_ns();
        for (long i = 0; i < n; i++) {
            if (i == 1 && getenv("FORK") && atoi(getenv("FORK"))) {
                child = fork();
                if (child < 0) { printf("error fork 0\n"); return 2; }
            }
            long every = getenv("ASYNC_EVERY") ? atol(getenv("ASYNC_EVERY")) : 0;
            unsigned long long this_ns = every && i % every == every - 1 ? 100 * ns : ns;
            void *params[] = {&this_ns};
            CHECK("launch", launch(spin, grid, 1, 1, block, 1, 1, 0, 0, params, 0));
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            printf("launch %lld\n", (long long)now.tv_sec * 1000000000ll + now.tv_nsec);
            static long long synced;
            long long t = (long long)now.tv_sec * 1000000000ll + now.tv_nsec;
            /* ASYNC_FROM=K: from iteration K on, no synchronous call at all (a phase of
             * launches alone, as a program leaving its interactive phase) */
            long async_from = getenv("ASYNC_FROM") ? atol(getenv("ASYNC_FROM")) : -1;
            if (async_from >= 0 && i >= async_from) {
                /* launches only */
            } else if (!every || t - synced >= 100000000ll) {
                if (getenv("SYNC_CTX")) {
                    CUresult (*ctx_sync)(void) = sym("cuCtxSynchronize");
                    CHECK("sync", ctx_sync());
                } else {
                    CHECK("sync", sync(0));
                }
                synced = t;
            }
            long gap = getenv("GAP_MS") ? atol(getenv("GAP_MS")) : 0;
            struct timespec g = {gap / 1000, (gap % 1000) * 1000000L};
            if (gap) nanosleep(&g, 0);
            long cpu = getenv("CPU_US") ? atol(getenv("CPU_US")) : 0;
            if (cpu) {
                struct timespec c0, c1;
                clock_gettime(CLOCK_MONOTONIC, &c0);
                do clock_gettime(CLOCK_MONOTONIC, &c1);
                while ((c1.tv_sec - c0.tv_sec) * 1000000000ll + (c1.tv_nsec - c0.tv_nsec) < cpu * 1000ll);
            }
            /* PRINT_NICE=1: this iteration's nice (below 0 while a slice is coscheduled) */
            if (getenv("PRINT_NICE")) printf("nice %ld %d\n", i, getpriority(PRIO_PROCESS, 0));
            /* FORK_WHEN_RAISED=1: once, the first time this thread's nice is below 0 (a
             * coscheduled slice), fork a child that says its own nice and exits */
            static int forked_raised;
            int parent_nice = getpriority(PRIO_PROCESS, 0);
            if (getenv("FORK_WHEN_RAISED") && !forked_raised && parent_nice < 0) {
                forked_raised = 1;
                fflush(stdout);
                pid_t c = fork();
                if (c == 0) {
                    printf("forked child nice %d\n", getpriority(PRIO_PROCESS, 0));
                    fflush(stdout);
                    _exit(0);
                }
                if (c > 0) waitpid(c, 0, 0);
                printf("forked parent nice %d\n", parent_nice);
                fflush(stdout);
            }
        }
        if (child == 0) return 0;
        if (child > 0) {
            int status = 0;
            waitpid(child, &status, 0);
            printf("child %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        }
        /* PRINT_RUNQUEUE=1: how long this thread waited for a CPU while it launched
         * (a program descheduled asks nothing of the GPU: a share test allows for it) */
        if (getenv("PRINT_RUNQUEUE")) printf("runqueue %lld\n", runqueue_ns() - waited_before);
        printf("done\n");
        long hold = getenv("HOLD_MS") ? atol(getenv("HOLD_MS")) : 0;
        struct timespec h = {hold / 1000, (hold % 1000) * 1000000L};
        if (hold) nanosleep(&h, 0);
        return 0;
    }
    if (!strcmp(argv[1], "grow")) {
        CUdeviceptr first, second;
        size_t more = argc > 3 ? (size_t)atol(argv[3]) << 20 : 0;
        long pause = argc > 4 ? atol(argv[4]) : 0;
        CHECK("alloc", alloc(&first, bytes));
        printf("allocated\n");
        struct timespec p = {pause / 1000, (pause % 1000) * 1000000L};
        nanosleep(&p, 0);
        CHECK("grow", alloc(&second, more));
        printf("grown\n");
        CHECK("free", release(second));
        CHECK("free", release(first));
        printf("freed\n");
        return 0;
    }
    if (!strcmp(argv[1], "getproc")) {
        void *fn = 0;
        CUdriverProcAddressQueryResult found;
        CHECK("getproc", getproc("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
        alloc = (CUresult (*)(CUdeviceptr *, size_t))fn;
    }
    size_t free_bytes, total;
    if (!strcmp(argv[1], "meminfo")) {
        CHECK("meminfo", info(&free_bytes, &total));
        printf("meminfo %zu %zu\n", free_bytes, total);
    }
    /* ROUNDS=n allocates and frees n times in a row (a free must return the memory) */
    int rounds = getenv("ROUNDS") ? atoi(getenv("ROUNDS")) : 1;
    for (int round = 0; round < rounds; round++) {
    CUdeviceptr p;
    CUmemGenericAllocationHandle handle = 0;
    CUarray array = 0;
    if (!strcmp(argv[1], "async")) {
        CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) = sym("cuMemAllocAsync");
        CHECK("alloc", alloc_async(&p, bytes, 0));
    } else if (!strcmp(argv[1], "vmm")) {
        CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) =
            sym("cuMemCreate");
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = (int)dev;
        CHECK("alloc", create(&handle, bytes, &prop, 0));
    } else if (!strcmp(argv[1], "pool")) {
        /* a pool on device POOL_DEVICE (default: the current context's), created with
         * that location; the context stays the current one */
        CUresult (*pool_create)(CUmemoryPool *, const CUmemPoolProps *) = sym("cuMemPoolCreate");
        CUresult (*from_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) = sym("cuMemAllocFromPoolAsync");
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = getenv("POOL_DEVICE") ? atoi(getenv("POOL_DEVICE")) : (int)dev;
        CUmemoryPool pool;
        CHECK("pool", pool_create(&pool, &props));
        CHECK("alloc", from_pool(&p, bytes, pool, 0));
    } else if (!strcmp(argv[1], "pool13")) {
        /* CUDA 13's look-up by location: the default pool of device POOL_DEVICE */
#if CUDA_VERSION >= 13000
        CUresult (*get_pool)(CUmemoryPool *, CUmemLocation *, CUmemAllocationType) = sym("cuMemGetDefaultMemPool");
        CUresult (*from_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) = sym("cuMemAllocFromPoolAsync");
        CUmemLocation where = {CU_MEM_LOCATION_TYPE_DEVICE, getenv("POOL_DEVICE") ? atoi(getenv("POOL_DEVICE")) : (int)dev};
        CUmemoryPool pool;
        CHECK("pool", get_pool(&pool, &where, CU_MEM_ALLOCATION_TYPE_PINNED));
        CHECK("alloc", from_pool(&p, bytes, pool, 0));
#else
        fprintf(stderr, "pool13 needs CUDA 13's cuda.h\n");
        return 3;
#endif
    } else if (!strcmp(argv[1], "array")) {
        CUresult (*create)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *) = sym("cuArrayCreate_v2");
        CUDA_ARRAY_DESCRIPTOR d = {bytes / 4 / 256, 256, CU_AD_FORMAT_FLOAT, 1};
        CHECK("alloc", create(&array, &d));
    } else {
        CHECK("alloc", alloc(&p, bytes));
    }
    printf("allocated\n");
    if (!strcmp(argv[1], "meminfo")) {
        CHECK("meminfo", info(&free_bytes, &total));
        printf("meminfo %zu %zu\n", free_bytes, total);
    }
    long hold_ms = argc > 3 ? atol(argv[3]) : 0;
    struct timespec t = {hold_ms / 1000, (hold_ms % 1000) * 1000000L};
    nanosleep(&t, 0);
    if (!strcmp(argv[1], "async") || !strcmp(argv[1], "pool") || !strcmp(argv[1], "pool13")) {
        CUresult (*free_async)(CUdeviceptr, CUstream) = sym("cuMemFreeAsync");
        CHECK("free", free_async(p, 0));
    } else if (!strcmp(argv[1], "vmm")) {
        CUresult (*release_handle)(CUmemGenericAllocationHandle) = sym("cuMemRelease");
        CHECK("free", release_handle(handle));
    } else if (!strcmp(argv[1], "array")) {
        CUresult (*destroy)(CUarray) = sym("cuArrayDestroy");
        CHECK("free", destroy(array));
    } else {
        CHECK("free", release(p));
    }
    printf("freed\n");
    }
    /* AFTER_MS=m: stay m ms after the last free (an idle process) */
    long after = getenv("AFTER_MS") ? atol(getenv("AFTER_MS")) : 0;
    struct timespec a = {after / 1000, (after % 1000) * 1000000L};
    if (after) nanosleep(&a, 0);
    return 0;
}
