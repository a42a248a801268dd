// NcclComm: non-blocking init and teardown with deadlines, enqueue settling, abort.
#include "comm/nccl/nccl_comm.h"

#include <nccl.h>

#include <thread>

#include "comm/store/store.h"
#include "core/cuda_check.h"
#include "core/logging.h"

namespace ringgrad::comm {

namespace {

constexpr auto kPollInterval = std::chrono::microseconds(200);

std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  return str_cat(ncclGetErrorString(result), " (", ncclGetLastError(comm), ")");
}

Milliseconds elapsed_since(Clock::time_point start) {
  return std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
}

}  // namespace

NcclComm::NcclComm(const ncclUniqueId& id, int rank, int size, int device,
                   Clock::time_point deadline, std::string label)
    : device_(device), label_(std::move(label)) {
  select_device();
  const auto start = Clock::now();
  // Non-blocking, so a rank that never joins costs a timeout and an abort, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t result = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) {
      ncclCommAbort(comm_);
      RG_THROW(TimeoutError, "nccl backend: communicator setup on ", label_, " not finished after ",
               format_duration(elapsed_since(start)),
               ": some rank has not joined (is every rank started, each on its own GPU?); "
               "aborted the communicator");
    }
    std::this_thread::sleep_for(kPollInterval);
    if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) result = ncclInternalError;
  }
  if (result != ncclSuccess) {
    const std::string why = nccl_message(result, comm_);
    if (comm_) ncclCommAbort(comm_);
    RG_THROW(Error, "nccl backend: communicator setup on ", label_, " failed: ", why);
  }
  // Note [nccl stream ordering]: ringgrad's kernels and copies run on the per-device compute
  // stream (core/cuda_memory.h). Two streams created by cudaStreamCreate do not order each
  // other (each orders only against the legacy default stream), so every enqueue records an
  // event on the compute stream and makes this stream wait for it: the collective starts
  // after the kernels that wrote its inputs, and the host never blocks for it. The other
  // direction, results consumed by later kernels, needs no event while Work::wait blocks the
  // host until the collective's own event completed: whatever the compute stream runs after
  // that is queued after the collective finished (NcclWork::wait still makes the compute
  // stream wait for the event, so the order holds on the device too). This stream stays a
  // blocking one, so work on the legacy default stream (other code, tests) is ordered too.
  // The same rule holds for the ring's staging streams (comm/collectives/cuda_staging_copier.cpp).
  const cudaError_t err = cudaStreamCreate(&stream_);
  if (err != cudaSuccess) {
    ncclCommAbort(comm_);
    RG_THROW(Error, "nccl backend: cudaStreamCreate on ", label_, ": ", cudaGetErrorString(err));
  }
  try {
    inputs_ready_ = std::make_unique<CudaEvent>(device_);
  } catch (const Error&) {
    cudaStreamDestroy(stream_);
    ncclCommAbort(comm_);
    throw;
  }
}

NcclComm::~NcclComm() {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);  // unchecked: a destructor must not throw
  if (!aborted_) {
    const auto deadline = Clock::now() + teardown_;
    ncclResult_t state = ncclCommFinalize(comm_);
    while (state == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(kPollInterval);
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      log_warn("nccl backend: finalizing the communicator on ", label_, " did not finish (",
               ncclGetErrorString(state), "); aborting it");
      ncclCommAbort(comm_);
    }
  }
  cudaStreamDestroy(stream_);
}

std::optional<std::string> NcclComm::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return aborted_;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
  if (query != ncclSuccess) state = query;
  if (state == ncclSuccess || state == ncclInProgress) return std::nullopt;
  abort_locked(
      str_cat("NCCL reported an asynchronous error on ", label_, ": ", nccl_message(state, comm_)));
  return aborted_;
}

void NcclComm::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_locked(reason);
}

void NcclComm::abort_locked(const std::string& reason) {
  if (aborted_) return;
  aborted_ = reason;
  log_error("nccl backend: aborting the communicator on ", label_, ": ", reason);
  cudaSetDevice(device_);  // unchecked: aborting must go ahead whatever else failed
  ncclCommAbort(comm_);
}

void NcclComm::check_usable(const std::string& operation) const {
  if (aborted_)
    RG_THROW(Error, "nccl backend: ", operation, " refused on ", label_,
             ": the communicator was aborted earlier: ", *aborted_);
}

void NcclComm::select_device() const { CUDA_CHECK(cudaSetDevice(device_)); }

void NcclComm::settle(ncclResult_t result, const std::string& operation,
                      Clock::time_point deadline) {
  const auto start = Clock::now();
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) {
      const std::string why =
          str_cat("nccl backend: ", operation, " on ", label_, " could not be queued within ",
                  format_duration(elapsed_since(start)));
      abort_locked(why);
      RG_THROW(TimeoutError, why, "; aborted the communicator");
    }
    std::this_thread::sleep_for(kPollInterval);
    if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) result = ncclInternalError;
  }
  if (result != ncclSuccess) {
    const std::string why = str_cat("nccl backend: ", operation, " on ", label_,
                                    " failed: ", nccl_message(result, comm_));
    abort_locked(why);
    RG_THROW(Error, why, "; aborted the communicator");
  }
}

}  // namespace ringgrad::comm
