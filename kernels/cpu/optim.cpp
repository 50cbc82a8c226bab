// kernels/cpu/optim.cpp — fused optimizer updates (one pass over each parameter).
#include "cpu_common.h"
#include "cpu_kernels.h"

namespace heed::kernels::cpu {

void adam_step(const AdamStepArgs& args) { fail("adam_step", "not implemented yet"); }

}  // namespace heed::kernels::cpu
