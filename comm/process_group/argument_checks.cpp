// The checks every backend shares.
#include "comm/process_group/argument_checks.h"

#include "core/error.h"

namespace ringgrad::comm {

void check_tensor(const Tensor& t, const char* operation, const char* role) {
  if (!t.defined()) RG_THROW(InvalidArgument, operation, ": the ", role, " tensor is undefined");
}

void check_pair(const Tensor& in, const Tensor& out, const char* operation, int64_t out_per_in_num,
                int64_t out_per_in_den) {
  check_tensor(in, operation, "input");
  check_tensor(out, operation, "output");
  if (in.dtype() != out.dtype())
    RG_THROW(InvalidArgument, operation, ": input is ", dtype_name(in.dtype()), " but output is ",
             dtype_name(out.dtype()));
  if (in.device() != out.device())
    RG_THROW(InvalidArgument, operation, ": input is on ", in.device().str(), " but output is on ",
             out.device().str());
  if (out.numel() * out_per_in_den != in.numel() * out_per_in_num)
    RG_THROW(InvalidArgument, operation, ": output has ", out.numel(), " elements, expected ",
             in.numel() * out_per_in_num / out_per_in_den, " (input has ", in.numel(), ")");
}

void check_rank(int r, int size, const char* operation, const char* role) {
  if (r < 0 || r >= size)
    RG_THROW(InvalidArgument, operation, ": ", role, " ", r, " is outside the group of size ",
             size);
}

void check_peer(int peer, int rank, int size, bool sending) {
  const char* operation = sending ? "send" : "recv";
  check_rank(peer, size, operation, sending ? "destination" : "source");
  if (peer == rank)
    RG_THROW(InvalidArgument, operation, ": rank ", rank, " cannot ",
             sending ? "send to" : "receive from", " itself");
}

}  // namespace ringgrad::comm
