// Which tiled tensor-map copies of a 3-d float32 tensor (positions, C, N) stop the kernel: one
// copy of a box (inner x channels x 1) whose corner is at (start, 0, 0), into dynamic shared
// memory at `offset`, then the result of cudaDeviceSynchronize. Arguments: inner box, L2
// promotion (0: none, 1: 256 B), start, positions, C, N, channel box, offset. Build:
// nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o tma_alignment_probe tma_alignment_probe.cu
// (notes.txt, section 2: starts whose byte offset is not a multiple of 16 fault).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
typedef CUresult (*Encode)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                           const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                           CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                           CUtensorMapFloatOOBfill);
__global__ void probe(const __grid_constant__ CUtensorMap map, int c0, int c1, int c2, int offset,
                      int bytes, float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ alignas(8) unsigned long long bar;
  unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned dst = (unsigned)__cvta_generic_to_shared(smem) + offset;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(b), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
    asm volatile(
        "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra "
        "W;\n}\n" ::"r"(b)
        : "memory");
    out[0] = reinterpret_cast<float*>(smem + offset)[1];
  }
}
int main(int argc, char** argv) {
  int inner = atoi(argv[1]), promo = atoi(argv[2]), c0 = atoi(argv[3]);
  long positions = atol(argv[4]), C = atol(argv[5]), N = atol(argv[6]);
  int cbox = atoi(argv[7]), offset = atoi(argv[8]);
  float* t;
  cudaMalloc(&t, positions * C * N * 4);
  cudaMemset(t, 0, positions * C * N * 4);
  float* out;
  cudaMalloc(&out, 16);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q);
  CUtensorMap map;
  cuuint64_t dims[3] = {(cuuint64_t)positions, (cuuint64_t)C, (cuuint64_t)N};
  cuuint64_t strides[2] = {(cuuint64_t)positions * 4, (cuuint64_t)positions * C * 4};
  cuuint32_t box[3] = {(cuuint32_t)inner, (cuuint32_t)cbox, 1}, es[3] = {1, 1, 1};
  CUresult r =
      ((Encode)fn)(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, t, dims, strides, box, es,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                   promo ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_NONE,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200000);
  probe<<<1, 32, 200000>>>(map, c0, 0, 0, offset, inner * cbox * 4, out);
  cudaError_t e = cudaDeviceSynchronize();
  printf("inner %d promo %d c0 %d pos %ld C %ld N %ld cbox %d off %d: encode %d run %s\n", inner,
         promo, c0, positions, C, N, cbox, offset, (int)r, cudaGetErrorString(e));
  return 0;
}
