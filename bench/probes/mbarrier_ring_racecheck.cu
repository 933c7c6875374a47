// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -O2 -o ring mbarrier_ring_racecheck.cu
// Run:   compute-sanitizer --tool racecheck ./ring 0   (1: explicit .release/.acquire qualifiers)
// Seen 2026-11-29 on an H200 (CUDA 13.0): modes 0 and 1 give correct sums and 1 racecheck hazard each.
// Does compute-sanitizer racecheck honour mbarrier ordering of plain shared-memory stores and loads?
// One producer thread hands N indices to 8 consumer warps through a 2-slot ring with full/empty
// mbarriers: the protocol of forward_wgmma.cuh's dynamic schedule. Mode 0: default qualifiers; mode 1: explicit
// .release.cta/.acquire.cta. Each consumer warp sums the indices it reads; the sum is checked. (Dropping the
// producer's wait for "empty" does not make a usable positive control: the phases wrap and it deadlocks.)
#include <cstdio>
typedef unsigned u32;
__device__ __forceinline__ u32 sa(const void *p) { return (u32)__cvta_generic_to_shared(p); }
template <int MODE> __device__ __forceinline__ void arrive(u32 b) {
    if (MODE == 1) asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
    else asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
}
template <int MODE> __device__ __forceinline__ void wait(u32 b, u32 par) {
    u32 done;
    do {
        if (MODE == 1)
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(b), "r"(par) : "memory");
        else
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(b), "r"(par) : "memory");
    } while (!done);
}
template <int MODE> __global__ void ring(int n, int *out) {
    __shared__ __align__(8) unsigned long long bars[4];
    __shared__ int slot[2];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    if (tid == 0) {
        for (int b = 0; b < 2; b++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(&bars[b])), "r"(1));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(&bars[2 + b])), "r"(8));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == 0) {
        if (tid == 0)
            for (int pn = 0; pn <= n; pn++) { // index n: the end
                const int b = pn & 1;
                if (pn >= 2) wait<MODE>(sa(&bars[2 + b]), ((pn >> 1) - 1) & 1);
                slot[b] = pn;
                arrive<MODE>(sa(&bars[b]));
            }
        return;
    }
    int sum = 0;
    for (int cn = 0;; cn++) {
        const int b = cn & 1;
        wait<MODE>(sa(&bars[b]), (cn >> 1) & 1);
        const int v = *(volatile int *)&slot[b];
        __syncwarp();
        if (lane == 0) arrive<MODE>(sa(&bars[2 + b]));
        if (v >= n) break;
        sum += v;
    }
    if (lane == 0) out[blockIdx.x * 8 + warp - 1] = sum;
}
template <int MODE> int run(int *d, int *h) {
    const int n = 1000, blocks = 4;
    ring<MODE><<<blocks, 288>>>(n, d);
    cudaMemcpy(h, d, blocks * 8 * sizeof(int), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < blocks * 8; i++) bad += h[i] != n * (n - 1) / 2;
    printf("mode %d: %s (%d of %d warp sums wrong)\n", MODE, bad ? "WRONG" : "sums ok", bad, blocks * 8);
    return bad;
}
int main(int argc, char **argv) {
    int *d, h[64];
    cudaMalloc(&d, 64 * sizeof(int));
    const int mode = argc > 1 ? argv[1][0] - '0' : 0;
    if (mode == 0) run<0>(d, h);
    if (mode == 1) run<1>(d, h);
    return 0;
}
