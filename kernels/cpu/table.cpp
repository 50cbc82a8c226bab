// kernels/cpu/table.cpp — the CPU backend's kernel table: every kernel is implemented.
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
#define HEED_CPU_KERNEL(name, type) t.name = &cpu::name;
    HEED_FOR_EACH_KERNEL(HEED_CPU_KERNEL)
#undef HEED_CPU_KERNEL
    return t;
  }();
  return table;
}

}  // namespace heed::kernels::cpu
