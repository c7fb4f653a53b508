/*
 * An unmodified CUDA driver-API program that computes something, for the migration
 * test: it knows nothing of tessera. It makes y = 2 x + y, N times, over N_ELEMS
 * floats (whole numbers, so the result is exact however the arithmetic is ordered),
 * each launch on a stream of its own making and synchronised on it, then checks the
 * result on the host.
 *
 * usage: migrate_app N [N_ELEMS]   (LAUNCH_EX set: each launch through cuLaunchKernelEx;
 * SECOND_MODULE set: the kernel launched is a second module's, which slicing leaves whole;
 * LIBRARY set: the kernel is loaded with cuLibraryLoadData and launched by its CUkernel;
 * with LAUNCH_EX, EX_ATTR=ID gives the launch one attribute of that id; EXTRA set: the
 * parameters are passed in one buffer, the launch's `extra` (EXTRA_SIZE=B: said to be
 * B bytes, 28 by default); FROM_FILE=PATH: the PTX is written to PATH and the module (or
 * library) loaded from the file, with cuModuleLoad (cuLibraryLoadFromFile);
 * FROM_FILE_UNWRITTEN set: not written first; FILE_WHOLE set: the file's kernel reads %gridid,
 * which slicing leaves whole; PTX_OUT=PATH: the program's PTX is written to PATH and it
 * exits; FATBIN=PATH: the module (or library) is loaded from the fat binary in PATH, given
 * to cuModuleLoadData (cuLibraryLoadData) as bytes, or with WRAPPED set inside the CUDA
 * runtime's wrapper of it, as a program built with nvcc registers it; with FATBINARY set,
 * given to cuModuleLoadFatBinary instead; FATBIN_FILE=PATH: the fat binary in PATH
 * loaded by its name, with cuModuleLoad (cuLibraryLoadFromFile))
 * Prints "launch I DEVICE" after each launch (DEVICE: what cuCtxGetDevice says), then
 * "result ok SUM" or "result wrong INDEX GOT WANT", then "done"; "error STEP CODE" on a
 * failure, exiting 2.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *driver;
static void *sym(const char *name) {
    void *p = dlsym(driver, name);
    if (!p) { printf("error dlsym:%s 0\n", name); exit(2); }
    return p;
}
/* a file's bytes (malloc'd, never freed: the module's image) */
static void *read_bytes(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0) { printf("error read_bytes 0\n"); exit(2); }
    long n = ftell(f);
    void *b = malloc(n > 0 ? (size_t)n : 1);
    if (!b || fseek(f, 0, SEEK_SET) != 0 || fread(b, 1, (size_t)n, f) != (size_t)n) {
        printf("error read_bytes 0\n");
        exit(2);
    }
    fclose(f);
    return b;
}
/* the CUDA runtime's __fatBinC_Wrapper_t */
struct fatbin_wrapper { int magic; int version; const void *data; void *filename_or_fatbins; };
static void write_file(const char *path, const char *text) {
    if (getenv("FROM_FILE_UNWRITTEN")) return; /* the load finds no file */
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) { printf("error write_file 0\n"); exit(2); }
}
#define CHECK(step, call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { printf("error %s %d\n", step, (int)r_); exit(2); } } while (0)

int main(int argc, char **argv) {
    setvbuf(stdout, 0, _IONBF, 0);
    if (argc < 2) { fprintf(stderr, "usage: migrate_app N [N_ELEMS]\n"); return 64; }
    long launches = atol(argv[1]);
    unsigned n = argc > 2 ? (unsigned)atol(argv[2]) : 4096;
    driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) { printf("error dlopen 0\n"); return 2; }
    CUresult (*init)(unsigned) = sym("cuInit");
    CUresult (*get)(CUdevice *, int) = sym("cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
    CUresult (*ctx_device)(CUdevice *) = sym("cuCtxGetDevice");
    CUresult (*alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
    CUresult (*release)(CUdeviceptr) = sym("cuMemFree_v2");
    CUresult (*to_device)(CUdeviceptr, const void *, size_t) = sym("cuMemcpyHtoD_v2");
    CUresult (*to_host)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");
    CUresult (*load)(CUmodule *, const void *) = sym("cuModuleLoadData");
    CUresult (*function)(CUfunction *, CUmodule, const char *) = sym("cuModuleGetFunction");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = sym("cuLaunchKernel");
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **) = sym("cuLaunchKernelEx");
    CUresult (*make_stream)(CUstream *, unsigned) = sym("cuStreamCreate");
    CUresult (*drop_stream)(CUstream) = sym("cuStreamDestroy_v2");
    CUresult (*sync)(CUstream) = sym("cuStreamSynchronize");

    CHECK("init", init(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK("device", get(&dev, 0));
    CHECK("context", retain(&ctx, dev));
    CHECK("current", set_current(ctx));
    static const char ptx[] =
        ".version 6.0\n.target sm_50\n.address_size 64\n"
        ".visible .entry tessera_axpy(.param .f32 a, .param .u64 x, .param .u64 y, .param .u32 n)\n{\n    ret;\n}\n";
    /* a kernel that reads %gridid, which kernel slicing leaves whole (no twin) */
    static const char whole[] =
        ".version 6.0\n.target sm_50\n.address_size 64\n"
        ".visible .entry tessera_axpy(.param .f32 a, .param .u64 x, .param .u64 y, .param .u32 n)\n{\n"
        "    .reg .b64 %rd<2>;\n    mov.u64 %rd1, %gridid;\n    ret;\n}\n";
    /* FILE_WHOLE set: the file holds that kernel */
    const char *file_text = getenv("FILE_WHOLE") ? whole : ptx;
    if (getenv("PTX_OUT")) {
        write_file(getenv("PTX_OUT"), ptx);
        return 0;
    }
    /* FATBIN: the image the load is given; WRAPPED: inside the runtime's wrapper */
    const void *image = ptx;
    static struct fatbin_wrapper wrapper = {0x466243b1, 1, 0, 0};
    if (getenv("FATBIN")) {
        image = read_bytes(getenv("FATBIN"));
        if (getenv("WRAPPED")) {
            wrapper.data = image;
            image = &wrapper;
        }
    }
    CUmodule module;
    CUfunction axpy;
    if (getenv("LIBRARY")) {
        /* CUDA 12's libraries, as cuda-core loads a program: the kernel handle is
         * launched where a function goes */
        CUresult (*load_library)(CUlibrary *, const void *, CUjit_option *, void **, unsigned,
                                 CUlibraryOption *, void **, unsigned) = sym("cuLibraryLoadData");
        CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *) = sym("cuLibraryGetKernel");
        CUlibrary library;
        CUkernel kernel;
        if (getenv("FROM_FILE") || getenv("FATBIN_FILE")) {
            CUresult (*load_file)(CUlibrary *, const char *, CUjit_option *, void **, unsigned,
                                  CUlibraryOption *, void **, unsigned) = sym("cuLibraryLoadFromFile");
            const char *path = getenv("FATBIN_FILE");
            if (!path) {
                path = getenv("FROM_FILE");
                write_file(path, ptx);
            }
            CHECK("library", load_file(&library, path, 0, 0, 0, 0, 0, 0));
        } else {
            CHECK("library", load_library(&library, image, 0, 0, 0, 0, 0, 0));
        }
        CHECK("kernel", get_kernel(&kernel, library, "tessera_axpy"));
        axpy = (CUfunction)kernel;
    } else if (getenv("FATBIN_FILE")) {
        CUresult (*load_file)(CUmodule *, const char *) = sym("cuModuleLoad");
        CHECK("module", load_file(&module, getenv("FATBIN_FILE")));
        CHECK("function", function(&axpy, module, "tessera_axpy"));
    } else if (getenv("FATBINARY")) {
        CUresult (*load_fatbinary)(CUmodule *, const void *) = sym("cuModuleLoadFatBinary");
        CHECK("module", load_fatbinary(&module, image));
        CHECK("function", function(&axpy, module, "tessera_axpy"));
    } else if (getenv("FROM_FILE")) {
        CUresult (*load_file)(CUmodule *, const char *) = sym("cuModuleLoad");
        write_file(getenv("FROM_FILE"), file_text);
        CHECK("module", load_file(&module, getenv("FROM_FILE")));
        CHECK("function", function(&axpy, module, "tessera_axpy"));
    } else {
        CHECK("module", load(&module, image));
        CHECK("function", function(&axpy, module, "tessera_axpy"));
    }
    if (getenv("SECOND_MODULE")) {
        /* a second module whose axpy reads %gridid (kernel slicing leaves it whole); the
         * program launches that one (tessera's fake driver hands out the same function
         * handle for both) */
        CUmodule second;
        CHECK("module", load(&second, whole));
        CHECK("function", function(&axpy, second, "tessera_axpy"));
    }
    size_t bytes = (size_t)n * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes), *out = malloc(bytes);
    if (!x || !y || !out) { printf("error malloc 0\n"); return 2; }
    for (unsigned i = 0; i < n; i++) { x[i] = (float)(1 + i % 7); y[i] = (float)(i % 1000); }
    CUdeviceptr dx, dy;
    CHECK("alloc", alloc(&dx, bytes));
    CHECK("alloc", alloc(&dy, bytes));
    CHECK("copy", to_device(dx, x, bytes));
    CHECK("copy", to_device(dy, y, bytes));
    CUstream stream;
    CHECK("stream", make_stream(&stream, 0));
    float a = 2.0f;
    void *params[] = {&a, &dx, &dy, &n};
    unsigned block = 256, grid = (n + block - 1) / block;
    /* EXTRA: the parameters in one buffer, packed as the ABI lays them out: f32 a at 0,
     * u64 x at 8, u64 y at 16, u32 n at 24 (28 bytes) */
    unsigned char buffer[32] = {0};
    size_t size = getenv("EXTRA_SIZE") ? (size_t)atol(getenv("EXTRA_SIZE")) : 28;
    memcpy(buffer, &a, 4);
    memcpy(buffer + 8, &dx, 8);
    memcpy(buffer + 16, &dy, 8);
    memcpy(buffer + 24, &n, 4);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    void **given = getenv("EXTRA") ? 0 : params, **given_extra = getenv("EXTRA") ? extra : 0;
    for (long i = 0; i < launches; i++) {
        if (getenv("LAUNCH_EX")) {
            /* the same launch through cuLaunchKernelEx, its configuration without attributes */
            CUlaunchConfig config = {0};
            config.gridDimX = grid; config.gridDimY = 1; config.gridDimZ = 1;
            config.blockDimX = block; config.blockDimY = 1; config.blockDimZ = 1;
            config.hStream = stream;
            /* EX_ATTR=ID: one launch attribute of that id (its value zero but for a
             * priority of 1) */
            CUlaunchAttribute attr;
            memset(&attr, 0, sizeof attr);
            if (getenv("EX_ATTR")) {
                attr.id = (CUlaunchAttributeID)atoi(getenv("EX_ATTR"));
                if (attr.id == CU_LAUNCH_ATTRIBUTE_PRIORITY) attr.value.priority = 1;
                config.attrs = &attr;
                config.numAttrs = 1;
            }
            CHECK("launch", launch_ex(&config, axpy, given, given_extra));
        } else {
            CHECK("launch", launch(axpy, grid, 1, 1, block, 1, 1, 0, stream, given, given_extra));
        }
        CHECK("sync", sync(stream));
        CUdevice now;
        CHECK("ctxdevice", ctx_device(&now));
        printf("launch %ld %d\n", i, (int)now);
    }
    CHECK("copy", to_host(out, dy, bytes));
    double sum = 0;
    for (unsigned i = 0; i < n; i++) {
        float want = y[i] + (float)launches * a * x[i];
        if (out[i] != want) { printf("result wrong %u %g %g\n", i, (double)out[i], (double)want); return 1; }
        sum += out[i];
    }
    printf("result ok %.0f\n", sum);
    CHECK("stream", drop_stream(stream));
    CHECK("free", release(dx));
    CHECK("free", release(dy));
    printf("done\n");
    return 0;
}
