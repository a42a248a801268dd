// Softmax cross-entropy (fused log-softmax + NLL, mean over the batch) and the accuracy count,
// on the CPU. logits, log_probs, dlogits: (N, C); labels: (N) int64. One row per thread.
// Element math: kernels/loss_math.h.
#include <cstdint>

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/half_via_f32.h"
#include "kernels/loss_math.h"

namespace ringgrad::kernels::cpu {

namespace {

struct Rows {
  int64_t n, c;  // (N, C)
};

// Checks logits (N, C) and labels (N) int64 with every label in [0, C); returns (N, C).
Rows check_logits_and_labels(const Tensor& logits, const Tensor& labels, const char* op,
                             const char* logits_name) {
  RG_CHECK(logits.defined() && labels.defined(), op, ": ", logits_name,
           " and labels must be defined");
  RG_CHECK_EQ(logits.dim(), 2, op, ": ", logits_name, " must be (N, C), got shape ",
              logits.shape().str());
  const Rows r{logits.size(0), logits.size(1)};
  RG_CHECK_GT(r.c, 0, op, ": ", logits_name, " has no classes");
  check_shape(labels, Shape{r.n}, op, "labels");
  RG_CHECK(labels.dtype() == DType::i64, op, ": labels must be int64, got ",
           dtype_name(labels.dtype()));
  check_cpu(logits, op);
  check_cpu(labels, op);
  const int64_t* label = labels.data<int64_t>();
  for (int64_t i = 0; i < r.n; ++i)
    if (label[i] < 0 || label[i] >= r.c)
      RG_THROW(InvalidArgument, op, ": label ", label[i], " in row ", i, " is outside [0, ", r.c,
               "); labels must be class indices");
  return r;
}

}  // namespace

// log_probs = logits - logsumexp(row); loss = -mean_i log_probs[i, labels[i]].
void cross_entropy_forward(Tensor& loss, Tensor& log_probs, const Tensor& logits,
                           const Tensor& labels) {
  constexpr const char* op = "cross_entropy_forward";
  const Rows r = check_logits_and_labels(logits, labels, op, "logits");
  RG_CHECK_GT(r.n, 0, op, ": empty batch (the mean over zero rows is undefined)");
  check_shape(log_probs, logits.shape(), op, "log_probs");
  check_same(log_probs, logits, op);
  RG_CHECK(loss.defined() && loss.numel() == 1, op, ": loss must be a one-element tensor");
  RG_CHECK(loss.dtype() == logits.dtype() && loss.is_cpu(), op,
           ": loss must be a CPU tensor of the logits' dtype");
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* lp = log_probs.data<T>();
    const int64_t* label = labels.data<int64_t>();
    double total_nll = 0;
#pragma omp parallel for schedule(static) reduction(+ : total_nll)
    for (int64_t i = 0; i < r.n; ++i) {
      const T* row = x + i * r.c;
      T* out = lp + i * r.c;
      const T lse = static_cast<T>(row_log_sum_exp<double>(row, r.c));
#pragma omp simd
      for (int64_t j = 0; j < r.c; ++j) out[j] = row[j] - lse;
      total_nll -= out[label[i]];
    }
    *loss.data<T>() = static_cast<T>(total_nll / static_cast<double>(r.n));
  });
}

// dlogits = (softmax - onehot(labels)) * dloss / N.
void cross_entropy_backward(Tensor& dlogits, const Tensor& log_probs, const Tensor& labels,
                            double dloss) {
  constexpr const char* op = "cross_entropy_backward";
  const Rows r = check_logits_and_labels(log_probs, labels, op, "log_probs");
  check_shape(dlogits, log_probs.shape(), op, "dlogits");
  check_same(dlogits, log_probs, op);
  if (r.n == 0) return;
  dispatch_float(log_probs.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(dloss / static_cast<double>(r.n));
    const T* lp = log_probs.data<T>();
    T* g = dlogits.data<T>();
    const int64_t* label = labels.data<int64_t>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < r.n; ++i) {
      const int64_t row_label = label[i];
#pragma omp simd
      for (int64_t j = 0; j < r.c; ++j)
        g[i * r.c + j] = cross_entropy_grad(lp[i * r.c + j], j == row_label, scale);
    }
  });
}

// Rows whose first maximal logit sits at the label.
int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  constexpr const char* op = "count_correct";
  if (logits.defined() && logits.is_cpu() && is_half(logits.dtype()))
    return cpu::count_correct(widened(logits), labels);  // exact: a half value widens exactly
  const Rows r = check_logits_and_labels(logits, labels, op, "logits");
  int64_t correct = 0;
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const int64_t* label = labels.data<int64_t>();
#pragma omp parallel for schedule(static) reduction(+ : correct)
    for (int64_t i = 0; i < r.n; ++i) {
      correct += row_prediction(x + i * r.c, r.c) == label[i];
    }
  });
  return correct;
}

}  // namespace ringgrad::kernels::cpu
