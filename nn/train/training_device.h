// Where ringgrad-train keeps the model, each batch and the loss: --device cpu or cuda. Under a
// launcher (ringgrad-run, torchrun) a CUDA worker uses GPU LOCAL_RANK, as
// torch.cuda.set_device(local_rank).
#pragma once
#include "core/device.h"

namespace ringgrad::nn {

// cpu -> the CPU. cuda -> device LOCAL_RANK (0 when unset), made current; throws Error naming
// the reason (cuda_unavailable_reason()) when this build or machine has no usable device.
// Called before joining the job, so a worker without a GPU fails before the rendezvous.
Device select_training_device(DeviceType type);

}  // namespace ringgrad::nn
