// tests/test_kernel_coverage.cpp — kernel coverage read from the kernel table itself
// (HEED_FOR_EACH_KERNEL in kernels/kernels.h), not from a list kept in the test: every kernel
// has a CPU entry and, in a build with the CUDA backend (real or emulated), a CUDA entry.
//
// Invariant: checked without a GPU (the tables are filled on first use and touch no device).
// Both backends fill their table through HEED_FOR_EACH_KERNEL, so a kernel without an
// implementation already fails to link; this test states the rule at run time and lists the
// table as the build sees it.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/kernels.h"

using namespace heed;

TEST_CASE("kernels: every kernel in the table has a CPU entry, and a CUDA entry in a CUDA build") {
  const int n = kernels::kernel_count();
  REQUIRE(n > 0);
  std::vector<std::string> names, missing_cpu, missing_cuda;
  for (int i = 0; i < n; ++i) {
    const kernels::KernelSupport cpu = kernels::kernel_support(DeviceType::CPU, i);
    names.push_back(cpu.name);
    if (!cpu.implemented) missing_cpu.push_back(cpu.name);
    if (cuda::compiled_with_cuda()) {
      const kernels::KernelSupport gpu = kernels::kernel_support(DeviceType::CUDA, i);
      CHECK(std::string(gpu.name) == cpu.name);
      if (!gpu.implemented) missing_cuda.push_back(gpu.name);
    }
  }
  MESSAGE(n, " kernels; CUDA backend ", cuda::compiled_with_cuda() ? "compiled" : "not compiled");
  CHECK_MESSAGE(missing_cpu.empty(),
                "kernels without a CPU entry: " << fmt::format("{}", fmt::join(missing_cpu, ", ")));
  CHECK_MESSAGE(missing_cuda.empty(),
                "kernels without a CUDA entry: " << fmt::format("{}", fmt::join(missing_cuda, ", ")));
  // Names are unique (a duplicated X-macro row would shadow a kernel).
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  // Without the CUDA backend the CUDA table is empty, and dispatch says so.
  if (!cuda::compiled_with_cuda()) {
    for (int i = 0; i < n; ++i) CHECK_FALSE(kernels::kernel_support(DeviceType::CUDA, i).implemented);
  }
}
