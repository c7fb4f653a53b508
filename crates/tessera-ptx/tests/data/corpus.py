"""Write the PTX that real compilers emit for a set of kernels, into the directory
given: numba-cuda's (NVVM, and its LTO-IR linked to PTX by nvJitLink) and NVRTC's,
for compute capability 8.0. Run with the
interpreter of `scripts/python-client.sh numba-cuda` (which has numba-cuda, NVVM and
NVRTC from PyPI); no GPU is needed. Used by crates/tessera-ptx/tests/ptxas.rs; its
numba kernels (`numba_kernels`) are also run on a GPU, sliced and whole, by
scripts/gpu-check/numba_sliced_check.py."""
import pathlib
import sys

from numba import cuda, float32, int32


def numba_kernels():
    def saxpy(a, x, y, res):
        i = cuda.grid(1)
        if i < res.size:
            res[i] = a * x[i] + y[i]

    def grid_stride(x, res):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, x.size, stride):
            res[i] = x[i] * 2.0

    def grid3d(res):
        x, y, z = cuda.grid(3)
        nx, ny, nz = cuda.gridsize(3)
        if x < res.shape[0] and y < res.shape[1] and z < res.shape[2]:
            res[x, y, z] = x + nx * (y + ny * z)

    def block_sum(x, res):
        s = cuda.shared.array(256, float32)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        s[t] = x[i] if i < x.size else 0.0
        cuda.syncthreads()
        step = 128
        while step > 0:
            if t < step:
                s[t] += s[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            res[cuda.blockIdx.x] = s[0]

    return [
        ("saxpy", saxpy, "void(float32, float32[:], float32[:], float32[:])"),
        ("grid_stride", grid_stride, "void(float32[:], float32[:])"),
        ("grid3d", grid3d, "void(int32[:,:,:])"),
        ("block_sum", block_sum, "void(float32[:], float32[:])"),
    ]


def write_numba(out):
    from cuda.core import Linker, LinkerOptions, ObjectCode

    for name, fn, sig in numba_kernels():
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(8, 0))
        (out / f"numba_{name}.ptx").write_text(ptx)
        # what numba-cuda runs by default: the kernel as LTO-IR, which nvJitLink links; its
        # PTX as the interposer's nvJitLink hooks ask for it (the same link with -ptx)
        ltoir, _ = cuda.compile(fn, sig, cc=(8, 0), device=False, abi="numba", output="ltoir")
        options = LinkerOptions(arch="sm_80", link_time_optimization=True, ptx=True)
        linked = Linker(ObjectCode.from_ltoir(ltoir), options=options).link("ptx").code
        (out / f"numba_lto_{name}.ptx").write_bytes(linked.rstrip(b"\0"))


NVRTC_SOURCE = rb"""
extern "C" __global__ void matmul(const float* a, const float* b, float* c, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float s = 0;
    for (int k = 0; k < n; ++k) s += a[row * n + k] * b[k * n + col];
    c[row * n + col] = s;
  }
}

extern "C" __global__ void reduce_dynamic(const float* x, float* out, int n) {
  extern __shared__ float s[];
  unsigned t = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x * 2 + t;
  float v = 0;
  if (i < n) v = x[i];
  if (i + blockDim.x < n) v += x[i + blockDim.x];
  s[t] = v;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x + gridDim.x * blockIdx.y] = s[0];
}

extern "C" __global__ void stencil3d(const float* in, float* out, int nx, int ny, int nz) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < 1 || y < 1 || z < 1 || x >= nx - 1 || y >= ny - 1 || z >= nz - 1) return;
  int i = x + nx * (y + ny * z);
  out[i] = in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx] + in[i - nx * ny] + in[i + nx * ny];
}

__device__ float twice(float v) { return 2 * v; }

extern "C" __global__ void with_helper(float* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = twice(x[i]);
}

struct Many { double a[3]; int b; char c; };

extern "C" __global__ void many_params(
    char p0, short p1, int p2, long long p3, float p4, double p5, Many p6, float* p7,
    char p8, double p9, int p10, char p11, float* p12, short p13, long long p14, int p15) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    p7[0] = p0 + p1 + p2 + p3 + p4 + p5 + p6.a[2] + p6.b + p6.c + p8 + p9 + p10 + p11 + p12[0]
            + p13 + p14 + p15;
}
"""


def write_nvrtc(out):
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(NVRTC_SOURCE, b"corpus.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    opts = [b"--gpu-architecture=compute_80"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        sys.exit(log.decode())
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    (out / "nvrtc_corpus.ptx").write_text(ptx.rstrip(b"\0 ").decode())


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write_numba(out)
    write_nvrtc(out)


if __name__ == "__main__":
    main()
