// The argument checks every backend (ring, nccl) makes before it enqueues anything, so that a
// bad rank or tensor is the same InvalidArgument, in the same words, whichever backend runs.
// A backend adds only what is its own (nccl: CUDA tensors on its device).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ringgrad::comm {

// `t` is defined; `role` names it ("input", "output").
void check_tensor(const Tensor& t, const char* operation, const char* role);
// An input and its output: both defined, of one dtype and one device, and the output holds
// out_per_in_num / out_per_in_den elements per input element (allgather: world / 1).
void check_pair(const Tensor& in, const Tensor& out, const char* operation, int64_t out_per_in_num,
                int64_t out_per_in_den);

// `r` names a rank of a group of `size` (a root, a destination, a source).
void check_rank(int r, int size, const char* operation, const char* role);
// The peer of a send (sending) or recv: in the group, and not the calling rank itself.
void check_peer(int peer, int rank, int size, bool sending);

}  // namespace ringgrad::comm
