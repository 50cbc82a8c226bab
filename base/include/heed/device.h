// heed/device.h — where a tensor's storage lives.
//
// Invariant: a Device is a (type, index) pair; index is 0 for the CPU.
#pragma once

#include <cstdint>
#include <string>

namespace heed {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit by design
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }
};

inline constexpr Device kCPU{DeviceType::CPU, 0};
inline constexpr Device kCUDA{DeviceType::CUDA, 0};

// Parses "cpu", "cuda", "cuda:1"; throws heed::Error on anything else.
Device parse_device(const std::string& text);

}  // namespace heed
