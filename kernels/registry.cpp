// kernels/registry.cpp — maps a device type to its kernel table and reports missing kernels.
#include "heed/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"

namespace heed::kernels {

const KernelTable& kernel_table(DeviceType type) {
  return type == DeviceType::CPU ? cpu::kernel_table() : cuda::kernel_table();
}

void throw_missing_kernel(const char* kernel, Device device) {
  fail(kernel, "kernel '{}' is not implemented for device {}{}", kernel, device.str(),
       device.is_cuda() && !cuda::compiled() ? " (heed was built without CUDA)" : "");
}

namespace {
struct KernelEntry {
  const char* name;
  bool (*present)(const KernelTable&);
};
#define HEED_KERNEL_ENTRY(name, type) {#name, [](const KernelTable& t) { return t.name != nullptr; }},
const KernelEntry kEntries[] = {HEED_FOR_EACH_KERNEL(HEED_KERNEL_ENTRY)};
#undef HEED_KERNEL_ENTRY
}  // namespace

int kernel_count() { return static_cast<int>(sizeof(kEntries) / sizeof(kEntries[0])); }

KernelSupport kernel_support(DeviceType type, int i) {
  HEED_CHECK(i >= 0 && i < kernel_count(), "kernel_support", "kernel index {} out of range", i);
  return {kEntries[i].name, kEntries[i].present(kernel_table(type))};
}

}  // namespace heed::kernels
