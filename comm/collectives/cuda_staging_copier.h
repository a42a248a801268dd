// The StagingCopier for CUDA tensors: two pinned host slots, one stream for device->host and
// one for host->device copies, and an event per slot and direction that orders reuse of a
// slot. Each copy waits for an event recorded on the compute stream, where the kernels that
// wrote the tensor ran (Note [nccl stream ordering] in comm/nccl/nccl_comm.cpp); the host
// waits for the last copy out before the collective's Work completes.
#pragma once
#include <memory>

#include "comm/collectives/staging_pipeline.h"

namespace ringgrad::comm::collectives {

// Throws Error in a build without CUDA (no CUDA tensor can exist there).
std::unique_ptr<StagingCopier> make_cuda_staging_copier(int device);

}  // namespace ringgrad::comm::collectives
