// The StagingCopier for CUDA tensors: two pinned host slots, one stream for device->host and
// one for host->device copies, and an event per slot and direction that orders reuse of a
// slot. Streams are blocking ones, so copies in wait for kernels on the legacy default stream
// that wrote the tensor (see Note [nccl stream ordering] in comm/nccl/nccl_comm.cpp).
#pragma once
#include <memory>

#include "comm/ring/staging_pipeline.h"

namespace ringgrad::comm::ring {

// Throws Error in a build without CUDA (no CUDA tensor can exist there).
std::unique_ptr<StagingCopier> make_cuda_staging_copier(int device);

}  // namespace ringgrad::comm::ring
