#include "ops/vec.h"

#include "ops/matmul_kernels.h"

namespace fak {

const VecKernels& vec_kernels_avx2();

const VecKernels& vec_kernels() {
  static const VecKernels& k = kernels::cpu_has_avx2() ? vec_kernels_avx2() : vec_kernels_ref();
  return k;
}

}  // namespace fak
