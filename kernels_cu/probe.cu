// A tiny real kernel that exercises compile, cache, load and launch end to end: writes
// out[i] = i * 3 + 1 for i < n. Used by `deepselect-rt check` to prove the toolchain works.
extern "C" __global__ void __launch_bounds__(DS_THREADS) DS_ENTRY(unsigned int* out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned int)(i * 3u + 1u);
}
