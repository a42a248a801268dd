// Reducer implementation.
#include "comm/reducer/reducer.h"

#include <cstring>

#include "core/half.h"
#include "core/logging.h"

namespace ringgrad::comm {

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, ProcessGroup& group,
                 ReducerOptions options, ViewsChanged views_changed)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(group),
      options_(options),
      views_changed_(std::move(views_changed)) {
  RG_CHECK_EQ(params_.size(), names_.size(), "Reducer: one name per parameter");
  device_ = params_.empty() ? Device::cpu() : params_[0].device();
  for (size_t i = 0; i < params_.size(); ++i)
    RG_CHECK(params_[i].dtype() == DType::f32 && params_[i].device() == device_,
             "Reducer: parameter '", names_[i], "' must be a float32 tensor on ", device_.str(),
             " (it is ", dtype_name(params_[i].dtype()), " on ", params_[i].device().str(), ")");
  if (device_.is_cuda() && options_.compression != GradCompression::none)
    RG_THROW(InvalidArgument,
             "Reducer: gradient compression casts buckets on the host, so it "
             "needs CPU parameters; with parameters on ",
             device_.str(), " use compression none");
  build_buckets({});
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  std::vector<size_t> bytes;
  for (const Tensor& p : params_) bytes.push_back(p.nbytes());
  assignment_ = compute_bucket_assignment(bytes, options_.bucket_cap_bytes,
                                          options_.first_bucket_bytes, order);
  std::vector<Tensor> old_views = std::move(views_);
  buckets_.assign(assignment_.size(), Bucket());
  views_.assign(params_.size(), Tensor());
  bucket_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < assignment_.size(); ++b) {
    int64_t numel = 0;
    for (size_t i : assignment_[b]) numel += params_[i].numel();
    Bucket& bucket = buckets_[b];
    bucket.flat = Tensor::zeros({numel}, DType::f32, device_);
    if (options_.compression != GradCompression::none)
      bucket.compressed = Tensor::empty(
          {numel}, options_.compression == GradCompression::fp16 ? DType::f16 : DType::bf16);
    size_t offset = 0;
    for (size_t i : assignment_[b]) {
      views_[i] = Tensor::wrap(bucket.flat.storage(), offset, params_[i].shape(), DType::f32);
      if (!old_views.empty()) views_[i].copy_from(old_views[i]);  // keep accumulated values
      offset += params_[i].nbytes();
      bucket_of_[i] = b;
    }
  }
  views_changed_(views_);
}

double Reducer::seconds_since_backward(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double>(t - backward_start_).count();
}

double Reducer::now_s() const { return seconds_since_backward(std::chrono::steady_clock::now()); }

void Reducer::prepare_for_backward() {
  if (iteration_ == 1 && !ready_order_.empty()) {
    // Rebuild once, in the order gradients became ready on rank 0 (the same on every rank).
    Tensor order = Tensor::empty({static_cast<int64_t>(params_.size())}, DType::i64);
    for (size_t i = 0; i < params_.size(); ++i)
      order.data<int64_t>()[i] =
          static_cast<int64_t>(i < ready_order_.size() ? ready_order_[i] : i);
    Tensor shared = order.to(device_);  // the nccl backend moves device tensors only
    group_.broadcast(shared)->wait();
    std::vector<size_t> walk;
    for (int64_t v : shared.to_vector<int64_t>()) walk.push_back(static_cast<size_t>(v));
    build_buckets(walk);
    ready_order_.clear();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].pending = assignment_[b].size();
    buckets_[b].work.reset();
  }
  ready_.assign(params_.size(), false);
  next_bucket_ = 0;
  timeline_ = ReducerTimeline();
  timeline_.buckets.resize(buckets_.size());
  backward_start_ = std::chrono::steady_clock::now();
  in_backward_ = true;
}

void Reducer::mark_ready(size_t param) {
  RG_CHECK(in_backward_, "Reducer: gradient of '", names_[param],
           "' arrived outside a synchronised backward (call prepare_for_backward first)");
  RG_CHECK(!ready_[param], "Reducer: parameter '", names_[param],
           "' was marked ready twice in one backward");
  ready_[param] = true;
  if (iteration_ == 0) ready_order_.push_back(param);
  const size_t b = bucket_of_[param];
  if (--buckets_[b].pending == 0) timeline_.buckets[b].ready_s = now_s();
  timeline_.last_grad_s = now_s();
  // Launch in bucket order only: a ready bucket waits for every lower-index one.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0)
    launch(next_bucket_++);
}

void Reducer::launch(size_t b) {
  Bucket& bucket = buckets_[b];
  timeline_.buckets[b].launched_s = now_s();
  AllreduceOptions opts;
  opts.op = ReduceOp::avg;
  const int64_t n = bucket.flat.numel();
  const float* src = bucket.flat.data<float>();
  if (options_.compression == GradCompression::fp16) {
    Half* dst = bucket.compressed.data<Half>();
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
  } else if (options_.compression == GradCompression::bf16) {
    BFloat16* dst = bucket.compressed.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
  }
  const Tensor& payload = bucket.compressed.defined() ? bucket.compressed : bucket.flat;
  bytes_communicated_ += payload.nbytes();
  bucket.work = group_.allreduce(payload, opts);
}

void Reducer::finalize_backward() {
  RG_CHECK(in_backward_, "Reducer: finalize_backward without prepare_for_backward");
  in_backward_ = false;
  if (next_bucket_ < buckets_.size()) {
    std::string missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing += (missing.empty() ? "" : ", ") + names_[i];
    RG_THROW(Error,
             "DDP: these parameters received no gradient in this backward, so their "
             "buckets could not be reduced: ",
             missing,
             ". Every parameter must take part in the loss on every rank, or construct "
             "DistributedDataParallel with find_unused_parameters.");
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.work->wait();
    const auto completed = bucket.work->completed_at().value_or(std::chrono::steady_clock::now());
    timeline_.buckets[b].done_s = seconds_since_backward(completed);
    const int64_t n = bucket.flat.numel();
    float* dst = bucket.flat.data<float>();
    if (options_.compression == GradCompression::fp16) {
      const Half* src = bucket.compressed.data<Half>();
      for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
    } else if (options_.compression == GradCompression::bf16) {
      const BFloat16* src = bucket.compressed.data<BFloat16>();
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
    }
  }
  ++iteration_;
}

}  // namespace ringgrad::comm
