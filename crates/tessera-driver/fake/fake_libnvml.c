/*
 * A fake NVML (libnvidia-ml.so.1) for tessera's tests: the node as NVIDIA's management
 * library shows it, for the same machine the fake CUDA driver (fake_libcuda.c) makes up.
 * Compiled against NVIDIA's real nvml.h (CUDA 12.9's, from PyPI's nvidia-nvml-dev-cu12
 * wheel, fetched by scripts/fetch-nvidia-artifacts.sh) with NVML_NO_UNVERSIONED_FUNC_DEFS,
 * so that every definition below, the legacy unversioned names included, must match
 * the header's prototype or it does not compile. It says nothing about what a real GPU
 * reports beyond the header's contracts.
 *
 * The machine is the one fake_machine.h describes, shared with the fake driver. Like
 * the real library it shows every GPU of the machine whatever
 * CUDA_VISIBLE_DEVICES says, numbered by PCI bus: device p of FAKE_CUDA_DEVICES
 * (default 2) has the fake driver's UUID GPU-fa000000-0000-0000-0000-0000000000pp,
 * PCI bus id 00000000:(10+p):00.0, serial 0000000000p, minor number p, and p+1 GiB of
 * memory (FAKE_CUDA_DEVICE_MIB each when set).
 *
 * What runs on the GPUs comes from the books the fake driver keeps when
 * FAKE_CUDA_TIMELINE=PREFIX (the machine shared by its processes): each process that
 * holds a context or memory on a device is listed there with its live bytes
 * (PREFIX.mem.pidN), and the devices' memory used is their sum; utilization is the
 * share of the last second its kernels (PREFIX.pidN) kept the device busy, the memory
 * figure half of it (a fake's choice, so the two differ). Processes that exited are
 * left out. Without FAKE_CUDA_TIMELINE the GPUs are idle and empty.
 *
 * Every route NVML has to a device handle is here too — the look-ups by index, UUID, PCI
 * bus id and serial, the topology look-ups (every GPU near every CPU and near each
 * other, on one board), the one S-class unit holding every GPU, and MIG devices (one
 * per GPU when FAKE_NVML_MIG=1, else none) — so that a test can try each.
 *
 * Its own books, for tests: each call is appended to "<this library>.log" when
 * FAKE_NVML_LOG=1. FAKE_NVML_FAIL=init makes initialisation fail with
 * NVML_ERROR_DRIVER_NOT_LOADED, as on a machine whose kernel module is not loaded.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define FAKE_LOG_KNOB "FAKE_NVML_LOG"
#include "fake_machine.h"

#define MAX_PROCESSES 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised; /* reference count, as the real library keeps */
static struct device { int index; } device_table[MAX_DEVICES];

static void bus_id(int p, char *out, size_t len) {
    snprintf(out, len, "00000000:%02X:00.0", 0x10 + p);
}
static void serial_text(int p, char *out, size_t len) { snprintf(out, len, "%011d", p); }
/* The device behind a handle, or -1 for anything that is not one of ours. */
static int index_of(nvmlDevice_t device) {
    for (int p = 0; p < physical_devices(); p++)
        if (device == (nvmlDevice_t)&device_table[p]) return p;
    return -1;
}
#define NEED_INIT() do { if (!initialised) return NVML_ERROR_UNINITIALIZED; } while (0)
#define DEVICE(h, p) NEED_INIT(); int p = index_of(h); if (p < 0) return NVML_ERROR_INVALID_ARGUMENT

/* A process of the machine on a device: its pid and live bytes there. */
struct process { unsigned int pid; unsigned long long bytes; };
static int alive(int pid) { return kill(pid, 0) == 0 || errno == EPERM; }
/* Each live process with a file "<PREFIX><suffix>N" in the timeline's directory calls
 * `each(pid, file, arg)`. */
static void each_process(const char *suffix, void (*each)(int, FILE *, void *), void *arg) {
    const char *prefix = timeline();
    if (!prefix) return;
    char dir[4096], base[4096];
    const char *slash = strrchr(prefix, '/');
    if (slash) {
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - prefix), prefix);
        snprintf(base, sizeof base, "%s%s", slash + 1, suffix);
    } else {
        snprintf(dir, sizeof dir, ".");
        snprintf(base, sizeof base, "%s%s", prefix, suffix);
    }
    DIR *d = opendir(dir);
    if (!d) return;
    size_t n = strlen(base);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, base, n)) continue;
        char *end;
        long pid = strtol(e->d_name + n, &end, 10);
        if (end == e->d_name + n || *end || pid <= 0 || !alive((int)pid)) continue;
        char path[8300];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        each((int)pid, f, arg);
        fclose(f);
    }
    closedir(d);
}
struct listing { int device; struct process *out; unsigned int n; };
static void list_one(int pid, FILE *f, void *arg) {
    struct listing *l = arg;
    int dev;
    unsigned long long bytes;
    while (fscanf(f, "%d %llu", &dev, &bytes) == 2)
        if (dev == l->device && l->n < MAX_PROCESSES) {
            l->out[l->n].pid = (unsigned int)pid;
            l->out[l->n].bytes = bytes;
            l->n++;
        }
}
/* The processes holding a context or memory on device p. */
static unsigned int processes(int p, struct process *out) {
    struct listing l = {p, out, 0};
    each_process(".mem.pid", list_one, &l);
    return l.n;
}
struct busy { int device; uint64_t from, to, ns; int pid; };
static void busy_one(int pid, FILE *f, void *arg) {
    struct busy *b = arg;
    if (b->pid && b->pid != pid) return;
    int dev;
    unsigned long long start, end;
    while (fscanf(f, "%d %llu %llu", &dev, &start, &end) == 3) {
        if (dev != b->device) continue;
        uint64_t s = start > b->from ? start : b->from, t = end < b->to ? end : b->to;
        if (t > s) b->ns += t - s;
    }
}
/* Percent of the last second device p ran kernels (of process `pid`, or anyone's). */
static unsigned int busy_percent(int p, int pid) {
    uint64_t now = now_ns();
    struct busy b = {p, now > 1000000000u ? now - 1000000000u : 0, now, 0, pid};
    each_process(".pid", busy_one, &b);
    uint64_t percent = b.ns / 10000000u;
    return percent > 100 ? 100 : (unsigned int)percent;
}

static nvmlReturn_t init(const char *name) {
    log_call("%s", name);
    const char *e = getenv("FAKE_NVML_FAIL");
    if (e && !strcmp(e, "init")) return NVML_ERROR_DRIVER_NOT_LOADED;
    pthread_mutex_lock(&lock);
    initialised++;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlInit_v2(void) { return init("nvmlInit_v2"); }
nvmlReturn_t DECLDIR nvmlInit(void) { return init("nvmlInit"); }
nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init("nvmlInitWithFlags");
}
nvmlReturn_t DECLDIR nvmlShutdown(void) {
    log_call("nvmlShutdown");
    pthread_mutex_lock(&lock);
    nvmlReturn_t r = initialised > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (initialised > 0) initialised--;
    pthread_mutex_unlock(&lock);
    return r;
}
const DECLDIR char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}
static nvmlReturn_t copy_text(char *out, unsigned int length, const char *text) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    NEED_INIT();
    return copy_text(version, length, "575.57.08");
}
nvmlReturn_t DECLDIR nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return copy_text(version, length, "12.575.57.08");
}
nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    if (!cudaDriverVersion) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = 12090;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    log_call("nvmlDeviceGetCount_v2");
    NEED_INIT();
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned int)physical_devices();
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetCount(unsigned int *deviceCount) {
    return nvmlDeviceGetCount_v2(deviceCount);
}
/* The handle of device `index` (the look-ups' common end, logged by each caller). */
static nvmlReturn_t handle_of(unsigned int index, nvmlDevice_t *device) {
    NEED_INIT();
    if (!device || index >= (unsigned int)physical_devices()) return NVML_ERROR_INVALID_ARGUMENT;
    device_table[index].index = (int)index;
    *device = (nvmlDevice_t)&device_table[index];
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    log_call("nvmlDeviceGetHandleByIndex_v2 %u", index);
    return handle_of(index, device);
}
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}
/* The device whose text `kind` (a UUID, bus id or serial) is `want`. */
static nvmlReturn_t handle_by(const char *want, void (*text)(int, char *, size_t),
                              nvmlDevice_t *device) {
    NEED_INIT();
    if (!want || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int p = 0; p < physical_devices(); p++) {
        char t[96];
        text(p, t, sizeof t);
        if (!strcasecmp(t, want)) return handle_of((unsigned int)p, device);
    }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    log_call("nvmlDeviceGetHandleByUUID %s", uuid ? uuid : "(null)");
    return handle_by(uuid, uuid_text, device);
}
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device) {
    log_call("nvmlDeviceGetHandleByUUIDV");
    NEED_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    if (uuid->version != nvmlUUID_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (uuid->type != NVML_UUID_TYPE_ASCII) return NVML_ERROR_NOT_SUPPORTED;
    char text[NVML_DEVICE_UUID_ASCII_LEN + 1];
    snprintf(text, sizeof text, "%.*s", NVML_DEVICE_UUID_ASCII_LEN, uuid->value.str);
    return handle_by(text, uuid_text, device);
}
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    log_call("nvmlDeviceGetHandleByPciBusId_v2 %s", pciBusId ? pciBusId : "(null)");
    return handle_by(pciBusId, bus_id, device);
}
nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}
nvmlReturn_t DECLDIR nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device) {
    log_call("nvmlDeviceGetHandleBySerial %s", serial ? serial : "(null)");
    return handle_by(serial, serial_text, device);
}
nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    DEVICE(device, p);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)p;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    DEVICE(device, p);
    if (!minorNumber) return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = (unsigned int)p;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    log_call("nvmlDeviceGetName");
    DEVICE(device, p);
    char t[64];
    snprintf(t, sizeof t, "Fake GPU %d", p); /* as the fake driver names it */
    return copy_text(name, length, t);
}
nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE(device, p);
    char t[96];
    uuid_text(p, t, sizeof t);
    return copy_text(uuid, length, t);
}
nvmlReturn_t DECLDIR nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    DEVICE(device, p);
    char t[32];
    serial_text(p, t, sizeof t);
    return copy_text(serial, length, t);
}
nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE(device, p);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    bus_id(p, pci->busId, sizeof pci->busId);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, 0u,
             (unsigned int)(0x10 + p) & 0xffu, 0u);
    pci->bus = (unsigned int)(0x10 + p);
    pci->pciDeviceId = 0xfa0010de;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                              unsigned int *temp) {
    log_call("nvmlDeviceGetTemperature");
    DEVICE(device, p);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = 40u + (unsigned int)p;
    return NVML_SUCCESS;
}

static unsigned long long used_bytes(int p) {
    struct process procs[MAX_PROCESSES];
    unsigned int n = processes(p, procs);
    unsigned long long used = 0;
    for (unsigned int i = 0; i < n; i++) used += procs[i].bytes;
    return used < physical_bytes(p) ? used : physical_bytes(p);
}
nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    log_call("nvmlDeviceGetMemoryInfo");
    DEVICE(device, p);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = physical_bytes(p);
    memory->used = used_bytes(p);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    log_call("nvmlDeviceGetMemoryInfo_v2");
    DEVICE(device, p);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = physical_bytes(p);
    memory->reserved = 0;
    memory->used = used_bytes(p);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    log_call("nvmlDeviceGetUtilizationRates");
    DEVICE(device, p);
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = busy_percent(p, 0);
    utilization->memory = utilization->gpu / 2;
    return NVML_SUCCESS;
}

/* The running-process queries: every process with a context on the device is a
 * compute process; there are no graphics or MPS ones. `v1`: the legacy struct. */
static nvmlReturn_t running(nvmlDevice_t device, unsigned int *count, void *infos, int v1,
                            int compute, const char *name) {
    log_call("%s", name);
    DEVICE(device, p);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    struct process procs[MAX_PROCESSES];
    unsigned int n = compute ? processes(p, procs) : 0;
    if (*count < n || (n && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        if (v1) {
            nvmlProcessInfo_v1_t *out = (nvmlProcessInfo_v1_t *)infos + i;
            out->pid = procs[i].pid;
            out->usedGpuMemory = procs[i].bytes;
        } else {
            nvmlProcessInfo_t *out = (nvmlProcessInfo_t *)infos + i;
            out->pid = procs[i].pid;
            out->usedGpuMemory = procs[i].bytes;
            out->gpuInstanceId = 0xFFFFFFFFu;
            out->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *count = n;
    return NVML_SUCCESS;
}
#define RUNNING(fn, type, v1, compute)                                                    \
    nvmlReturn_t DECLDIR fn(nvmlDevice_t device, unsigned int *infoCount, type *infos) {   \
        return running(device, infoCount, infos, v1, compute, #fn);                        \
    }
RUNNING(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, 1, 1)
RUNNING(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 0, 1)
RUNNING(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, 0, 1)
RUNNING(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, 1, 0)
RUNNING(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, 0, 0)
RUNNING(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t, 0, 0)
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, 1, 0)
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 0, 0)
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t, 0, 0)

/* One sample per process that ran kernels on the device in the last second. */
nvmlReturn_t DECLDIR nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                     nvmlProcessUtilizationSample_t *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp) {
    (void)lastSeenTimeStamp;
    log_call("nvmlDeviceGetProcessUtilization");
    DEVICE(device, p);
    if (!processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
    struct process procs[MAX_PROCESSES];
    unsigned int n = processes(p, procs);
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        nvmlProcessUtilizationSample_t *s = utilization + i;
        memset(s, 0, sizeof *s);
        s->pid = procs[i].pid;
        s->timeStamp = now_ns() / 1000u;
        s->smUtil = busy_percent(p, (int)procs[i].pid);
        s->memUtil = s->smUtil / 2;
    }
    *processSamplesCount = n;
    return NVML_SUCCESS;
}

/* Routes to a device handle other than a look-up (what a program under the interposer
 * must not use to reach a GPU it is not placed on). The machine's topology: every GPU
 * has affinity with every CPU and is on one board and one PCIe switch with the others;
 * there is one S-class unit, holding every GPU; each GPU holds one MIG device when
 * FAKE_NVML_MIG=1 (else none: NVML_ERROR_NOT_FOUND). */
/* The handles of `n` GPUs (those of `p`s that `pick` keeps), as the topology look-ups
 * hand them out: `count` zero asks how many. */
static nvmlReturn_t topology_set(unsigned int *count, nvmlDevice_t *deviceArray, int skip) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int p = 0; p < physical_devices(); p++) n += p != skip;
    if (*count == 0) {
        *count = n;
        return NVML_SUCCESS;
    }
    if (!deviceArray) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int given = 0;
    for (int p = 0; p < physical_devices() && given < *count; p++)
        if (p != skip) handle_of((unsigned int)p, &deviceArray[given++]);
    *count = given;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                                 nvmlDevice_t *deviceArray) {
    (void)cpuNumber;
    log_call("nvmlSystemGetTopologyGpuSet");
    NEED_INIT();
    return topology_set(count, deviceArray, -1);
}
nvmlReturn_t DECLDIR nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                                      unsigned int *count, nvmlDevice_t *deviceArray) {
    log_call("nvmlDeviceGetTopologyNearestGpus");
    DEVICE(device, p);
    if (level == NVML_TOPOLOGY_INTERNAL) {
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        *count = 0;
        return NVML_SUCCESS;
    }
    return topology_set(count, deviceArray, p);
}
nvmlReturn_t DECLDIR nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                         nvmlGpuTopologyLevel_t *pathInfo) {
    DEVICE(device1, p1);
    DEVICE(device2, p2);
    if (!pathInfo) return NVML_ERROR_INVALID_ARGUMENT;
    *pathInfo = p1 == p2 ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_SINGLE;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                            nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus) {
    (void)p2pIndex;
    DEVICE(device1, p1);
    DEVICE(device2, p2);
    if (!p2pStatus) return NVML_ERROR_INVALID_ARGUMENT;
    *p2pStatus = p1 == p2 ? NVML_P2P_STATUS_NOT_SUPPORTED : NVML_P2P_STATUS_OK;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard) {
    DEVICE(device1, p1);
    DEVICE(device2, p2);
    (void)p1; (void)p2;
    if (!onSameBoard) return NVML_ERROR_INVALID_ARGUMENT;
    *onSameBoard = 1;
    return NVML_SUCCESS;
}
static int unit_token;
nvmlReturn_t DECLDIR nvmlUnitGetCount(unsigned int *unitCount) {
    NEED_INIT();
    if (!unitCount) return NVML_ERROR_INVALID_ARGUMENT;
    *unitCount = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlUnitGetHandleByIndex(unsigned int index, nvmlUnit_t *unit) {
    NEED_INIT();
    if (!unit || index != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *unit = (nvmlUnit_t)&unit_token;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlUnitGetDevices(nvmlUnit_t unit, unsigned int *deviceCount, nvmlDevice_t *devices) {
    log_call("nvmlUnitGetDevices");
    NEED_INIT();
    if (unit != (nvmlUnit_t)&unit_token || !deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = (unsigned int)physical_devices();
    if (*deviceCount < n || !devices) {
        *deviceCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int p = 0; p < n; p++) handle_of(p, &devices[p]);
    *deviceCount = n;
    return NVML_SUCCESS;
}
/* MIG devices: one per GPU (FAKE_NVML_MIG=1), a handle of their own */
static struct device mig_table[MAX_DEVICES];
static int mig_enabled(void) {
    const char *e = getenv("FAKE_NVML_MIG");
    return e && !strcmp(e, "1");
}
nvmlReturn_t DECLDIR nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                         nvmlDevice_t *migDevice) {
    log_call("nvmlDeviceGetMigDeviceHandleByIndex");
    DEVICE(device, p);
    if (!migDevice) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_enabled() || index != 0) return NVML_ERROR_NOT_FOUND;
    mig_table[p].index = p;
    *migDevice = (nvmlDevice_t)&mig_table[p];
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    log_call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    NEED_INIT();
    if (!device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int p = 0; p < physical_devices(); p++)
        if (migDevice == (nvmlDevice_t)&mig_table[p]) return handle_of((unsigned int)p, device);
    return NVML_ERROR_INVALID_ARGUMENT; /* not a MIG device's handle */
}

/* What else names processes: an encoder session per process on the device (as if each
 * encoded video), and accounting, which is off (NVML_ERROR_NOT_SUPPORTED). */
nvmlReturn_t DECLDIR nvmlDeviceGetEncoderSessions(nvmlDevice_t device, unsigned int *sessionCount,
                                                  nvmlEncoderSessionInfo_t *sessionInfos) {
    log_call("nvmlDeviceGetEncoderSessions");
    DEVICE(device, p);
    if (!sessionCount) return NVML_ERROR_INVALID_ARGUMENT;
    struct process procs[MAX_PROCESSES];
    unsigned int n = processes(p, procs);
    if (*sessionCount == 0) {
        *sessionCount = n;
        return NVML_SUCCESS;
    }
    if (!sessionInfos) return NVML_ERROR_INVALID_ARGUMENT;
    if (*sessionCount < n) {
        *sessionCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        memset(&sessionInfos[i], 0, sizeof sessionInfos[i]);
        sessionInfos[i].sessionId = i + 1;
        sessionInfos[i].pid = procs[i].pid;
    }
    *sessionCount = n;
    return NVML_SUCCESS;
}
nvmlReturn_t DECLDIR nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                                  nvmlAccountingStats_t *stats) {
    (void)pid;
    DEVICE(device, p);
    (void)p;
    if (!stats) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}
