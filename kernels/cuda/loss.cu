// Softmax cross-entropy (fused log-softmax + NLL, mean over the batch) and the accuracy count
// on CUDA, float32 (count_correct widens half logits). logits, log_probs, dlogits: (N, C); labels:
// (N) int64, on the device. One thread per row with the CPU's row math (kernels/loss_math.h):
// classifier heads have few classes, so a row is a short sequential loop and the batch gives the
// parallelism.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/loss_math.h"

namespace ringgrad::kernels::cuda {

namespace {

struct Rows {
  int64_t n, c;
};

Rows check_logits_and_labels(const Tensor& logits, const Tensor& labels, const char* op,
                             const char* logits_name) {
  RG_CHECK(logits.defined() && labels.defined(), op, ": ", logits_name,
           " and labels must be defined");
  RG_CHECK_EQ(logits.dim(), 2, op, ": ", logits_name, " must be (N, C), got shape ",
              logits.shape().str());
  check_f32(logits, op, logits_name);
  const Rows r{logits.size(0), logits.size(1)};
  RG_CHECK_GT(r.c, 0, op, ": ", logits_name, " has no classes");
  check_operand(labels, Shape{r.n}, DType::i64, op, "labels");
  return r;
}

// log_probs = row - logsumexp(row); total_nll += -log_probs[label]. A row whose label lies
// outside [0, C) is skipped and the smallest such row is kept in bad_row.
__global__ void cross_entropy_forward_kernel(float* log_probs, double* total_nll,
                                             unsigned long long* bad_row, const float* logits,
                                             const int64_t* labels, Rows r) {
  for (int64_t i = global_thread(); i < r.n; i += grid_threads()) {
    const float* row = logits + i * r.c;
    float* out = log_probs + i * r.c;
    const float lse = static_cast<float>(row_log_sum_exp<double>(row, r.c));
    for (int64_t j = 0; j < r.c; ++j) out[j] = row[j] - lse;
    const int64_t label = labels[i];
    if (label < 0 || label >= r.c) {
      atomicMin(bad_row, static_cast<unsigned long long>(i));
      continue;
    }
    atomicAdd(total_nll, -static_cast<double>(out[label]));
  }
}

__global__ void mean_loss_kernel(float* loss, const double* total_nll, int64_t n) {
  *loss = static_cast<float>(*total_nll / static_cast<double>(n));
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* log_probs,
                                              const int64_t* labels, Rows r, float scale) {
  for (int64_t k = global_thread(); k < r.n * r.c; k += grid_threads()) {
    const int64_t i = k / r.c, j = k - i * r.c;
    dlogits[k] = cross_entropy_grad(log_probs[k], j == labels[i], scale);
  }
}

// Rows whose first maximal logit sits at the label (none with a NaN).
__global__ void count_correct_kernel(unsigned long long* correct, const float* logits,
                                     const int64_t* labels, Rows r) {
  for (int64_t i = global_thread(); i < r.n; i += grid_threads()) {
    if (row_prediction(logits + i * r.c, r.c) == labels[i]) atomicAdd(correct, 1ull);
  }
}

}  // namespace

void cross_entropy_forward(Tensor& loss, Tensor& log_probs, const Tensor& logits,
                           const Tensor& labels) {
  constexpr const char* op = "cross_entropy_forward";
  const Rows r = check_logits_and_labels(logits, labels, op, "logits");
  RG_CHECK_GT(r.n, 0, op, ": empty batch (the mean over zero rows is undefined)");
  check_operand(log_probs, logits.shape(), DType::f32, op, "log_probs");
  RG_CHECK(loss.defined() && loss.numel() == 1 && loss.dtype() == DType::f32, op,
           ": loss must be a one-element float32 tensor");
  Launch l(logits);
  Tensor total = Tensor::zeros({1}, DType::f64, logits.device());
  Tensor bad_row = Tensor::empty({1}, DType::i64, logits.device());
  // All bits set: the largest unsigned value for atomicMin, and -1 (no bad row) as int64.
  CUDA_CHECK(cudaMemsetAsync(bad_row.raw_data(), 0xff, sizeof(int64_t), l.stream));
  auto* bad = static_cast<unsigned long long*>(bad_row.raw_data());
  cross_entropy_forward_kernel<<<blocks_for(r.n), kThreads, 0, l.stream>>>(
      log_probs.data<float>(), total.data<double>(), bad, logits.data<float>(),
      labels.data<int64_t>(), r);
  CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
  mean_loss_kernel<<<1, 1, 0, l.stream>>>(loss.data<float>(), total.data<double>(), r.n);
  CUDA_CHECK_LAUNCH("mean_loss_kernel");
  // A wrong label is a data bug worth one device-to-host word per step (the trainer reads the
  // loss anyway): the same InvalidArgument as the CPU, naming the row.
  const int64_t first_bad = bad_row.to_vector<int64_t>()[0];  // all bits set (-1): none
  if (first_bad >= 0) {
    const int64_t label = labels.narrow(first_bad, 1).to_vector<int64_t>()[0];
    RG_THROW(InvalidArgument, op, ": label ", label, " in row ", first_bad, " is outside [0, ", r.c,
             "); labels must be class indices");
  }
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& log_probs, const Tensor& labels,
                            double dloss) {
  constexpr const char* op = "cross_entropy_backward";
  const Rows r = check_logits_and_labels(log_probs, labels, op, "log_probs");
  check_operand(dlogits, log_probs.shape(), DType::f32, op, "dlogits");
  if (r.n == 0) return;
  Launch l(log_probs);
  cross_entropy_backward_kernel<<<blocks_for(r.n * r.c), kThreads, 0, l.stream>>>(
      dlogits.data<float>(), log_probs.data<float>(), labels.data<int64_t>(), r,
      static_cast<float>(dloss / static_cast<double>(r.n)));
  CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  // Half logits (mixed precision) are counted as the CPU counts them: widened to f32, which is
  // exact, so the prediction is the same.
  if (logits.defined() && (logits.dtype() == DType::f16 || logits.dtype() == DType::bf16)) {
    Tensor wide = Tensor::empty(logits.shape(), DType::f32, logits.device());
    cast(wide, logits);
    return count_correct(wide, labels);
  }
  const Rows r = check_logits_and_labels(logits, labels, "count_correct", "logits");
  Launch l(logits);
  Tensor correct = Tensor::zeros({1}, DType::i64, logits.device());
  count_correct_kernel<<<blocks_for(r.n), kThreads, 0, l.stream>>>(
      static_cast<unsigned long long*>(correct.raw_data()), logits.data<float>(),
      labels.data<int64_t>(), r);
  CUDA_CHECK_LAUNCH("count_correct_kernel");
  return correct.to_vector<int64_t>()[0];
}

}  // namespace ringgrad::kernels::cuda
