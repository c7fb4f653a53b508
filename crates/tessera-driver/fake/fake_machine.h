/*
 * What tessera's two fakes — the CUDA driver (fake_libcuda.c) and NVML (fake_libnvml.c)
 * — share: the one machine they both make up, and their call log. Included by each
 * (everything static); FAKE_LOG_KNOB names the environment variable that turns the
 * log on.
 *
 * The machine: FAKE_CUDA_DEVICES GPUs (default 2, at most MAX_DEVICES); physical GPU p
 * has UUID GPU-fa000000-0000-0000-0000-0000000000pp and p+1 GiB of memory
 * (FAKE_CUDA_DEVICE_MIB each when set). FAKE_CUDA_TIMELINE=PREFIX makes it shared by
 * the processes that set it (see each fake).
 */
#ifndef FAKE_MACHINE_H
#define FAKE_MACHINE_H
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEVICES 8

/* The machine's GPUs (before any CUDA_VISIBLE_DEVICES). */
static int physical_devices(void) {
    const char *e = getenv("FAKE_CUDA_DEVICES");
    int n = e ? atoi(e) : 2;
    return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}
/* Physical GPU p's memory. */
static uint64_t physical_bytes(int p) {
    const char *e = getenv("FAKE_CUDA_DEVICE_MIB");
    long mib = e ? atol(e) : 0;
    return mib > 0 ? (uint64_t)mib << 20 : (uint64_t)(p + 1) << 30;
}
/* Physical GPU p's UUID as text (the bytes cuDeviceGetUuid gives: fa, zeros, p). */
static void uuid_text(int p, char *out, size_t len) {
    snprintf(out, len, "GPU-fa000000-0000-0000-0000-0000000000%02x", p & 0xff);
}
/* FAKE_CUDA_TIMELINE's prefix, or null. */
static const char *timeline(void) {
    const char *e = getenv("FAKE_CUDA_TIMELINE");
    return e && *e ? e : 0;
}
static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
/* The path of the library this is compiled into. */
static const char *self_path(void) {
    static char path[4096];
    Dl_info info;
    if (!path[0] && dladdr((void *)self_path, &info) && info.dli_fname)
        snprintf(path, sizeof path, "%s", info.dli_fname);
    return path;
}
/* One line appended to "<this library>.log" when FAKE_LOG_KNOB is 1. */
static void log_call(const char *fmt, ...) {
    const char *e = getenv(FAKE_LOG_KNOB);
    if (!e || strcmp(e, "1")) return;
    char path[4200];
    snprintf(path, sizeof path, "%s.log", self_path());
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}
#endif
