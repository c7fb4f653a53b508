/*
 * An unmodified program that reads NVML, as monitoring tools and frameworks do, and
 * (unless NVML_ONLY=1) uses a GPU through the CUDA driver (dlopen("libcuda.so.1")). It
 * is linked with libnvidia-ml.so.1 and calls NVML through its link-time symbols, or —
 * NVML_DLOPEN=1 — through dlopen("libnvidia-ml.so.1") and dlsym, as pynvml does.
 *
 * usage: nvml_app MIB SPIN_MS HOLD_MS
 *   nvmlInit; the NVML view ("before"); cuInit, device 0's primary context, MIB
 *   allocated, kernels busy for SPIN_MS in all (20 ms each, synchronised); the view
 *   again ("after"); look-ups of each of the machine's GPUs (FAKE_CUDA_DEVICES, default
 *   2) by UUID, PCI bus id and serial, and by one index past the count; "done"; stays
 *   HOLD_MS, then frees and exits.
 * The view, per phase P and device I:
 *   "count P N", "device P I UUID", "memory P I TOTAL USED FREE" (v1),
 *   "memory2 P I TOTAL USED FREE RESERVED" (v2), "processes P I VERSION PID,PID,..."
 *   (compute processes, v1 to v3), "utilization P I GPU MEMORY", "name P I NAME".
 * Look-ups: "lookup KIND PHYSICAL RESULT INDEX" (INDEX by nvmlDeviceGetIndex, -1 when
 * not found), "byindex N RESULT". "pid PID" first. "error STEP CODE" on a failure,
 * exiting 2.
 * The other routes to a device handle, from its device 0 (after the look-ups): "gpuset
 * RESULT N UUID,..." (nvmlSystemGetTopologyGpuSet of CPU 0: how many, then the
 * handles), "nearest RESULT N UUID,..." (nvmlDeviceGetTopologyNearestGpus, system
 * level), "unit RESULT N UUID,..." (nvmlUnitGetDevices of unit 0), "mig RESULT"
 * (nvmlDeviceGetMigDeviceHandleByIndex 0) and, when that found one, "frommig RESULT
 * UUID" (nvmlDeviceGetDeviceHandleFromMigDeviceHandle); "encoder RESULT PID,..."
 * (nvmlDeviceGetEncoderSessions), "accounting RESULT" (nvmlDeviceGetAccountingStats
 * of pid 1). FORGE_STRIDE=s: each other GPU's handle forged from device 0's (the fake
 * NVML's handles are s bytes apart, by physical index), then "forged PHYSICAL NAME
 * MEMORY PROCESSES SAMEBOARD NEAREST" (the results of nvmlDeviceGetName,
 * nvmlDeviceGetMemoryInfo, nvmlDeviceGetComputeRunningProcesses_v3,
 * nvmlDeviceOnSameBoard and nvmlDeviceGetTopologyNearestGpus with it).
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <cuda.h>
#include <nvml.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *nvml_lib;
/* NVML's `name`: its link-time symbol, or dlsym's answer when NVML_DLOPEN=1 */
#define NVML(name) ((__typeof__(&name))(nvml_lib ? nvml_sym(#name) : (void *)&name))
static void *nvml_sym(const char *name) {
    void *p = dlsym(nvml_lib, name);
    if (!p) { printf("error dlsym:%s 0\n", name); exit(2); }
    return p;
}
static void *driver;
static void *sym(const char *name) {
    void *p = dlsym(driver, name);
    if (!p) { printf("error dlsym:%s 0\n", name); exit(2); }
    return p;
}
#define CHECK(step, call) do { int r_ = (int)(call); if (r_ != 0) { printf("error %s %d\n", step, r_); exit(2); } } while (0)

static void processes(const char *phase, unsigned i, nvmlDevice_t d) {
    unsigned n = 64;
    nvmlProcessInfo_v1_t v1[64];
    CHECK("processes_v1", NVML(nvmlDeviceGetComputeRunningProcesses)(d, &n, v1));
    printf("processes %s %u v1 ", phase, i);
    for (unsigned k = 0; k < n; k++) printf("%s%u", k ? "," : "", v1[k].pid);
    printf("\n");
    nvmlProcessInfo_t v[64];
    nvmlReturn_t (*versions[2])(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *) = {
        NVML(nvmlDeviceGetComputeRunningProcesses_v2), NVML(nvmlDeviceGetComputeRunningProcesses_v3)};
    for (int version = 2; version <= 3; version++) {
        /* asked for the length first, as tools do */
        n = 0;
        nvmlReturn_t r = versions[version - 2](d, &n, 0);
        if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE) CHECK("processes_count", r);
        unsigned needed = n;
        n = 64;
        CHECK("processes", versions[version - 2](d, &n, v));
        printf("processes %s %u v%d ", phase, i, version);
        for (unsigned k = 0; k < n; k++) printf("%s%u", k ? "," : "", v[k].pid);
        printf(" needed %u\n", needed);
    }
}

static void view(const char *phase) {
    unsigned count;
    CHECK("count", NVML(nvmlDeviceGetCount_v2)(&count));
    printf("count %s %u\n", phase, count);
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        CHECK("handle", NVML(nvmlDeviceGetHandleByIndex_v2)(i, &d));
        char uuid[NVML_DEVICE_UUID_BUFFER_SIZE], name[NVML_DEVICE_NAME_BUFFER_SIZE];
        CHECK("uuid", NVML(nvmlDeviceGetUUID)(d, uuid, sizeof uuid));
        printf("device %s %u %s\n", phase, i, uuid);
        CHECK("name", NVML(nvmlDeviceGetName)(d, name, sizeof name));
        printf("name %s %u %s\n", phase, i, name);
        nvmlMemory_t m;
        CHECK("memory", NVML(nvmlDeviceGetMemoryInfo)(d, &m));
        printf("memory %s %u %llu %llu %llu\n", phase, i, m.total, m.used, m.free);
        nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
        CHECK("memory2", NVML(nvmlDeviceGetMemoryInfo_v2)(d, &m2));
        printf("memory2 %s %u %llu %llu %llu %llu\n", phase, i, m2.total, m2.used, m2.free, m2.reserved);
        processes(phase, i, d);
        nvmlUtilization_t u;
        CHECK("utilization", NVML(nvmlDeviceGetUtilizationRates)(d, &u));
        printf("utilization %s %u %u %u\n", phase, i, u.gpu, u.memory);
    }
}

/* "KIND RESULT N UUID,..." for a list of `n` handles */
static void handles(const char *kind, nvmlReturn_t r, unsigned n, const nvmlDevice_t *list) {
    printf("%s %d %u ", kind, (int)r, r == NVML_SUCCESS ? n : 0);
    for (unsigned k = 0; r == NVML_SUCCESS && k < n; k++) {
        char uuid[NVML_DEVICE_UUID_BUFFER_SIZE] = "?";
        NVML(nvmlDeviceGetUUID)(list[k], uuid, sizeof uuid);
        printf("%s%s", k ? "," : "", uuid);
    }
    printf("\n");
}

/* Every route to a device handle but the look-ups, from `own` (the program's device 0),
 * and forged handles of the machine's other GPUs. */
static void routes(nvmlDevice_t own, int machine) {
    nvmlDevice_t list[16];
    unsigned n = 0;
    nvmlReturn_t r = NVML(nvmlSystemGetTopologyGpuSet)(0, &n, 0);
    if (r == NVML_SUCCESS && n > 0) {
        n = n > 16 ? 16 : n;
        r = NVML(nvmlSystemGetTopologyGpuSet)(0, &n, list);
    }
    handles("gpuset", r, n, list);
    n = 0;
    r = NVML(nvmlDeviceGetTopologyNearestGpus)(own, NVML_TOPOLOGY_SYSTEM, &n, 0);
    if (r == NVML_SUCCESS && n > 0) {
        n = n > 16 ? 16 : n;
        r = NVML(nvmlDeviceGetTopologyNearestGpus)(own, NVML_TOPOLOGY_SYSTEM, &n, list);
    }
    handles("nearest", r, n, list);
    nvmlUnit_t unit;
    n = 16;
    r = NVML(nvmlUnitGetHandleByIndex)(0, &unit);
    if (r == NVML_SUCCESS) r = NVML(nvmlUnitGetDevices)(unit, &n, list);
    handles("unit", r, n, list);
    nvmlDevice_t mig = 0, parent = 0;
    r = NVML(nvmlDeviceGetMigDeviceHandleByIndex)(own, 0, &mig);
    printf("mig %d\n", (int)r);
    if (r == NVML_SUCCESS) {
        r = NVML(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(mig, &parent);
        handles("frommig", r, 1, &parent);
    }
    nvmlEncoderSessionInfo_t sessions[16];
    n = 16;
    r = NVML(nvmlDeviceGetEncoderSessions)(own, &n, sessions);
    printf("encoder %d ", (int)r);
    for (unsigned k = 0; r == NVML_SUCCESS && k < n; k++) printf("%s%u", k ? "," : "", sessions[k].pid);
    printf("\n");
    nvmlAccountingStats_t stats;
    printf("accounting %d\n", (int)NVML(nvmlDeviceGetAccountingStats)(own, 1, &stats));
    long stride = getenv("FORGE_STRIDE") ? atol(getenv("FORGE_STRIDE")) : 0;
    if (!stride) return;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE] = "";
    CHECK("uuid", NVML(nvmlDeviceGetUUID)(own, uuid, sizeof uuid));
    int mine = (int)strtol(uuid + strlen(uuid) - 2, 0, 16);
    for (int g = 0; g < machine; g++) {
        if (g == mine) continue;
        nvmlDevice_t forged = (nvmlDevice_t)((char *)own + (g - mine) * stride);
        char name[NVML_DEVICE_NAME_BUFFER_SIZE];
        nvmlMemory_t m;
        nvmlProcessInfo_t procs[16];
        unsigned np = 16, nn = 0;
        int same = 0;
        printf("forged %d %d %d %d %d %d\n", g, (int)NVML(nvmlDeviceGetName)(forged, name, sizeof name),
               (int)NVML(nvmlDeviceGetMemoryInfo)(forged, &m),
               (int)NVML(nvmlDeviceGetComputeRunningProcesses_v3)(forged, &np, procs),
               (int)NVML(nvmlDeviceOnSameBoard)(own, forged, &same),
               (int)NVML(nvmlDeviceGetTopologyNearestGpus)(forged, NVML_TOPOLOGY_SYSTEM, &nn, 0));
    }
}

static void look_up(const char *kind, int p, nvmlReturn_t r, nvmlDevice_t d) {
    unsigned index = 0;
    int shown = -1;
    if (r == NVML_SUCCESS && NVML(nvmlDeviceGetIndex)(d, &index) == NVML_SUCCESS) shown = (int)index;
    printf("lookup %s %d %d %d\n", kind, p, (int)r, shown);
}

int main(int argc, char **argv) {
    setvbuf(stdout, 0, _IONBF, 0);
    if (argc < 4) { fprintf(stderr, "usage: nvml_app MIB SPIN_MS HOLD_MS\n"); return 64; }
    size_t bytes = (size_t)atol(argv[1]) << 20;
    long spin_ms = atol(argv[2]), hold_ms = atol(argv[3]);
    printf("pid %d\n", (int)getpid());
    if (getenv("NVML_DLOPEN") && !strcmp(getenv("NVML_DLOPEN"), "1")) {
        nvml_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (!nvml_lib) { printf("error dlopen_nvml 0\n"); return 2; }
    }
    CHECK("nvml_init", NVML(nvmlInit_v2)());
    view("before");
    int cuda = !(getenv("NVML_ONLY") && !strcmp(getenv("NVML_ONLY"), "1"));
    CUdeviceptr p = 0;
    CUresult (*release)(CUdeviceptr) = 0;
    if (cuda) {
        driver = dlopen("libcuda.so.1", RTLD_NOW);
        if (!driver) { printf("error dlopen 0\n"); return 2; }
        CUresult (*init)(unsigned) = sym("cuInit");
        CUresult (*get)(CUdevice *, int) = sym("cuDeviceGet");
        CUresult (*retain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
        CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
        CUresult (*alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
        CUresult (*load)(CUmodule *, const void *) = sym("cuModuleLoadData");
        CUresult (*function)(CUfunction *, CUmodule, const char *) = sym("cuModuleGetFunction");
        CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **) = sym("cuLaunchKernel");
        CUresult (*sync)(CUstream) = sym("cuStreamSynchronize");
        release = sym("cuMemFree_v2");
        CUdevice dev;
        CUcontext ctx;
        CHECK("init", init(0));
        CHECK("device", get(&dev, 0));
        CHECK("context", retain(&ctx, dev));
        CHECK("current", set_current(ctx));
        CHECK("alloc", alloc(&p, bytes));
        printf("allocated\n");
        static const char ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n"
                                  ".visible .entry tessera_spin(.param .u64 ns)\n{\n    ret;\n}\n";
        CUmodule module;
        CUfunction spin;
        CHECK("module", load(&module, ptx));
        CHECK("function", function(&spin, module, "tessera_spin"));
        unsigned long long ns = 20000000ull;
        void *params[] = {&ns};
        for (long spun = 0; spun < spin_ms; spun += 20) {
            CHECK("launch", launch(spin, 1, 1, 1, 1, 1, 1, 0, 0, params, 0));
            CHECK("sync", sync(0));
        }
        printf("spun\n");
    }
    view("after");
    int machine = getenv("FAKE_CUDA_DEVICES") ? atoi(getenv("FAKE_CUDA_DEVICES")) : 2;
    for (int g = 0; g < machine; g++) {
        char text[96];
        nvmlDevice_t d = 0;
        nvmlReturn_t r;
        snprintf(text, sizeof text, "GPU-fa000000-0000-0000-0000-0000000000%02x", g);
        r = NVML(nvmlDeviceGetHandleByUUID)(text, &d);
        look_up("uuid", g, r, d);
        snprintf(text, sizeof text, "00000000:%02X:00.0", 0x10 + g);
        r = NVML(nvmlDeviceGetHandleByPciBusId_v2)(text, &d);
        look_up("pci", g, r, d);
        snprintf(text, sizeof text, "%011d", g);
        r = NVML(nvmlDeviceGetHandleBySerial)(text, &d);
        look_up("serial", g, r, d);
    }
    unsigned count = 0;
    CHECK("count", NVML(nvmlDeviceGetCount_v2)(&count));
    nvmlDevice_t d;
    printf("byindex %u %d\n", count, (int)NVML(nvmlDeviceGetHandleByIndex_v2)(count, &d));
    CHECK("handle", NVML(nvmlDeviceGetHandleByIndex_v2)(0, &d));
    routes(d, machine);
    printf("done\n");
    struct timespec hold = {hold_ms / 1000, (hold_ms % 1000) * 1000000};
    nanosleep(&hold, 0);
    if (release && p) CHECK("free", release(p));
    NVML(nvmlShutdown)();
    return 0;
}
