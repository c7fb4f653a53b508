/*
 * Asks cuGetProcAddress_v2 (through dlsym on libcuda.so.1, as the CUDA runtime and
 * cuda-bindings do) for each "NAME VERSION FLAGS" line of stdin, and prints
 * "NAME VERSION FLAGS RESULT LIBRARY SYMBOL": what answered (the library and symbol
 * dladdr names for the pointer, "- -" for none). Under the interposer, a governed
 * entry point must be answered by libtessera_cuda.so's hook of the exact variant the
 * driver resolved.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

int main(void) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    getproc_fn getproc;
    *(void **)&getproc = dlsym(driver, "cuGetProcAddress_v2");
    if (!getproc) {
        fprintf(stderr, "no cuGetProcAddress_v2\n");
        return 1;
    }
    char name[256];
    int version;
    unsigned long long flags;
    while (scanf("%255s %d %llu", name, &version, &flags) == 3) {
        void *p = 0;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
        CUresult r = getproc(name, &p, version, flags, &status);
        const char *lib = "-", *sym = "-";
        Dl_info info;
        if (r == CUDA_SUCCESS && p && dladdr(p, &info)) {
            lib = info.dli_fname ? strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname : "?";
            sym = info.dli_sname ? info.dli_sname : "?";
        }
        printf("%s %d %llu %d %s %s\n", name, version, flags, (int)r, lib, sym);
    }
    return 0;
}
