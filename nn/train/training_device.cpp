// Choosing the training device.
#include "nn/train/training_device.h"

#include "core/cuda_memory.h"
#include "core/error.h"

namespace ringgrad::nn {

Device select_training_device(DeviceType type) {
  if (type == DeviceType::cpu) return Device::cpu();
  const std::string reason = cuda_unavailable_reason();
  if (!reason.empty())
    RG_THROW(Error, "--device cuda: no usable CUDA device (", reason,
             "); run with --device cpu, or on a machine with a GPU and a CUDA build");
  return Device::cuda(cuda_select_device_from_env());
}

}  // namespace ringgrad::nn
