// DataLoader: turns a Dataset and a DistributedSampler into batches, gathered by one background
// thread into one of two preallocated buffers while the trainer works on the other (a queue of
// depth one), like torch's DataLoader with one worker prefetching one batch ahead.
// Contract: one consumer thread calls start_epoch / next; the worker never outlives the loader.
#pragma once
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "nn/data/mnist.h"
#include "nn/data/sampler.h"

namespace ringgrad::nn {

struct Batch {
  Tensor images;  // (B, C, H, W) float32, a view into the loader's buffer
  Tensor labels;  // (B) int64, likewise
};

// Runs on the worker thread on each gathered batch before it is handed out (augmentation,
// casts); may modify the batch in place. An exception it throws is rethrown by next().
using BatchTransform = std::function<void(Batch&)>;

class DataLoader {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{60000};

  // `dataset.images` (N, C, H, W) f32 and `dataset.labels` (N) i64 on the CPU; the sampler's size
  // must be at most N. The loader shares the dataset's tensors (no copy). The last batch of an
  // epoch is smaller unless `drop_last`. next() waits at most `timeout` for a batch.
  DataLoader(Dataset dataset, DistributedSampler sampler, int64_t batch_size,
             bool drop_last = false, BatchTransform transform = {},
             std::chrono::milliseconds timeout = kDefaultTimeout);
  ~DataLoader();  // cancels the worker mid-epoch if need be and joins it
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts gathering epoch `epoch` (sampler.set_epoch) from batch `start_batch` on, so a resumed
  // run skips the batches it already trained on. Abandons any unfinished previous epoch.
  void start_epoch(int64_t epoch, int64_t start_batch = 0);

  // Blocks until the next batch is ready and points `out` at it; false once the epoch is done.
  // `out` stays valid until the next call to next() or start_epoch() (its buffer is then reused).
  // Rethrows an exception of the worker; throws TimeoutError after `timeout` without a batch.
  bool next(Batch& out);

  int64_t num_batches() const;  // per epoch, for this rank
  int64_t batch_size() const { return batch_size_; }
  const DistributedSampler& sampler() const { return sampler_; }

 private:
  // Slot life cycle: free -> (worker gathers) ready -> (next hands it out) in_use -> free.
  enum class SlotState { free, ready, in_use };
  struct Slot {
    Tensor images;  // (batch_size, C, H, W)
    Tensor labels;  // (batch_size)
    SlotState state = SlotState::free;
    int64_t rows = 0;
  };

  void run_worker(int64_t first_batch);
  void gather(Slot& slot, int64_t batch);
  Batch view_of(const Slot& slot) const;
  void stop_worker();

  Dataset dataset_;
  DistributedSampler sampler_;
  int64_t batch_size_;
  bool drop_last_;
  BatchTransform transform_;
  std::chrono::milliseconds timeout_;

  std::vector<int64_t> indices_;  // this epoch's sampler order; read-only while a worker runs
  Slot slots_[2];                 // batch b lives in slots_[b % 2]
  int64_t next_batch_ = 0;        // the batch next() hands out next
  bool epoch_started_ = false;

  std::mutex mutex_;
  std::condition_variable changed_;  // any slot state, cancel_ or error_ changed
  bool cancel_ = false;
  std::exception_ptr error_;  // set by the worker; the epoch ends with it
  std::thread worker_;
};

}  // namespace ringgrad::nn
