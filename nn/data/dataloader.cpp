// DataLoader (contract in dataloader.h). One worker thread per epoch walks the batches in order;
// batch b is gathered into slot b % 2 once the consumer has released that slot, so the worker
// runs at most one batch ahead and the slot handed out is never written while the trainer reads it.
#include "nn/data/dataloader.h"

#include <algorithm>
#include <cstring>

namespace ringgrad::nn {

DataLoader::DataLoader(Dataset dataset, DistributedSampler sampler, int64_t batch_size,
                       bool drop_last, BatchTransform transform, std::chrono::milliseconds timeout)
    : dataset_(std::move(dataset)),
      sampler_(std::move(sampler)),
      batch_size_(batch_size),
      drop_last_(drop_last),
      transform_(std::move(transform)),
      timeout_(timeout) {
  const Tensor& images = dataset_.images;
  const Tensor& labels = dataset_.labels;
  RG_CHECK(images.defined() && images.is_cpu() && images.dtype() == DType::f32 && images.dim() == 4,
           "DataLoader needs (N, C, H, W) float32 CPU images, got ", images.shape().str(), " ",
           dtype_name(images.dtype()));
  RG_CHECK(labels.defined() && labels.is_cpu() && labels.dtype() == DType::i64 && labels.dim() == 1,
           "DataLoader needs (N) int64 CPU labels, got ", labels.shape().str(), " ",
           dtype_name(labels.dtype()));
  RG_CHECK_EQ(images.size(0), labels.size(0), "DataLoader: image vs label count");
  RG_CHECK_LE(sampler_.size(), images.size(0), "DataLoader: the sampler draws from more samples",
              " than the dataset holds");
  RG_CHECK_GE(batch_size_, 1, "DataLoader: batch_size");
  for (Slot& slot : slots_) {
    slot.images = Tensor::empty({batch_size_, images.size(1), images.size(2), images.size(3)});
    slot.labels = Tensor::empty({batch_size_}, DType::i64);
  }
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_.num_samples();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void DataLoader::start_epoch(int64_t epoch, int64_t start_batch) {
  stop_worker();
  RG_CHECK(start_batch >= 0 && start_batch <= num_batches(),
           "DataLoader::start_epoch: start_batch ", start_batch, " is outside [0, ", num_batches(),
           "]");
  sampler_.set_epoch(epoch);
  indices_ = sampler_.indices();
  for (Slot& slot : slots_) slot.state = SlotState::free;
  cancel_ = false;
  error_ = nullptr;
  next_batch_ = start_batch;
  epoch_started_ = true;
  worker_ = std::thread(&DataLoader::run_worker, this, start_batch);
}

void DataLoader::run_worker(int64_t first_batch) {
  for (int64_t b = first_batch; b < num_batches(); ++b) {
    Slot& slot = slots_[b % 2];
    {
      // Cancellable rather than timed: the consumer may legitimately train for a long while.
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return cancel_ || slot.state == SlotState::free; });
      if (cancel_) return;
    }
    try {
      gather(slot, b);
      if (transform_) {
        Batch batch = view_of(slot);
        transform_(batch);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slot.state = SlotState::ready;
    }
    changed_.notify_all();
  }
}

// Rows [b * batch_size, ...) of this epoch's indices, copied out of the dataset one sample each.
void DataLoader::gather(Slot& slot, int64_t batch) {
  const int64_t begin = batch * batch_size_;
  slot.rows = std::min<int64_t>(batch_size_, static_cast<int64_t>(indices_.size()) - begin);
  const int64_t sample_floats =
      dataset_.images.numel() / std::max<int64_t>(dataset_.images.size(0), 1);
  const float* images = dataset_.images.data<float>();
  const int64_t* labels = dataset_.labels.data<int64_t>();
  float* out_images = slot.images.data<float>();
  int64_t* out_labels = slot.labels.data<int64_t>();
  for (int64_t i = 0; i < slot.rows; ++i) {
    const int64_t index = indices_[begin + i];
    std::memcpy(out_images + i * sample_floats, images + index * sample_floats,
                sample_floats * sizeof(float));
    out_labels[i] = labels[index];
  }
}

Batch DataLoader::view_of(const Slot& slot) const {
  return Batch{slot.images.narrow(0, slot.rows), slot.labels.narrow(0, slot.rows)};
}

bool DataLoader::next(Batch& out) {
  RG_CHECK(epoch_started_, "DataLoader::next called before start_epoch");
  std::unique_lock<std::mutex> lock(mutex_);
  for (Slot& slot : slots_)
    if (slot.state == SlotState::in_use) slot.state = SlotState::free;
  changed_.notify_all();
  if (next_batch_ >= num_batches()) return false;

  Slot& slot = slots_[next_batch_ % 2];
  const bool ready = changed_.wait_for(
      lock, timeout_, [&] { return error_ != nullptr || slot.state == SlotState::ready; });
  // A ready batch precedes the worker's error, which belongs to a later batch.
  if (slot.state != SlotState::ready && error_) std::rethrow_exception(error_);
  if (!ready)
    RG_THROW(TimeoutError, "DataLoader: batch ", next_batch_, " of epoch ", sampler_.epoch(),
             " not ready after ", timeout_.count(), " ms (is the batch transform stuck?)");
  slot.state = SlotState::in_use;
  out = view_of(slot);
  ++next_batch_;
  return true;
}

}  // namespace ringgrad::nn
