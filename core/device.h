// Where a tensor's bytes live: host memory or one CUDA device.
#pragma once
#include <string>

#include "core/choices.h"

namespace ringgrad {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device& o) const {
    return type == o.type && (is_cpu() || index == o.index);
  }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

// The device type a program's --device flag names: "cpu" or "cuda".
inline const Choices<DeviceType> kDeviceTypes{{"cpu", DeviceType::cpu}, {"cuda", DeviceType::cuda}};

// Parses "cpu", "cuda", "cuda:1"; throws InvalidArgument otherwise.
Device parse_device(const std::string& s);

}  // namespace ringgrad
