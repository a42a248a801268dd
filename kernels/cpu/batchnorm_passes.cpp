// The passes of the CPU batch norm over the data (kernels/cpu/batchnorm_passes.h), with the
// element math of kernels/batchnorm_math.h and kernels/elementwise_math.h. The elementwise work
// runs in the values' arithmetic type (f32 for f32 and bf16), each result rounded once. Sums are
// kept in double per position of a block's run over the n rows, then folded per channel:
// E[x^2] - mean^2 and the gradient sums need the precision, and a data-parallel run must get
// the single-process numbers whatever the split of the batch (tests/nn/test_ddp.cpp). f32 and bf16
// data on AVX-512 go plane by plane instead (Note [Batch-norm planes]).
#include "kernels/cpu/batchnorm_passes.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/batchnorm_math.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/batchnorm_planes.h"
#include "kernels/elementwise_math.h"

namespace ringgrad::kernels::cpu {

namespace {

template <class T>
using Math = ComputeType<T>;

// Channels [c0, c1); the run of image n starts at value (n * c + c0) * hw and holds `run` values.
struct Block {
  int64_t c0, c1, run;
  int64_t row(Layout l, int64_t n) const { return (n * l.c + c0) * l.hw; }
};

// Per-thread scratch, grown to the largest block and then reused: no allocation per step. One
// buffer per use that can be live at once: sums per run position, values per channel, and
// coefficients spread per run position.
enum Scratch { kRunSums, kChannelValues, kRunCoefficients };

template <class V, Scratch Use>
V* scratch(int64_t size) {
  thread_local std::vector<V> storage;
  if (static_cast<int64_t>(storage.size()) < size) storage.resize(size);
  return storage.data();
}

// A block's row holds at most about kRunValues values: its sums and coefficients stay in L1.
constexpr int64_t kRunValues = 4096;

// Runs f(block) for blocks of whole channels in parallel: the one-pass loops (SyncBatchNorm's
// split functions, the eval forward). A block's row holds at most about kRunValues values, and
// each thread gets two blocks where there are channels enough.
template <class F>
void for_each_block(Layout l, F&& f) {
  if (l.c == 0) return;
  const int64_t threads = omp_get_max_threads();
  int64_t channels = std::min(kRunValues / l.hw, (l.c + 2 * threads - 1) / (2 * threads));
  channels = std::clamp<int64_t>(channels, 1, l.c);
  const int64_t blocks = (l.c + channels - 1) / channels;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * channels, c1 = std::min(l.c, c0 + channels);
    f(Block{c0, c1, (c1 - c0) * l.hw});
  }
}

// f(offset, i) for every plane of the block, image by image: i counts channels from c0.
template <class F>
void for_each_plane(Layout l, Block b, F&& f) {
  for (int64_t n = 0; n < l.n; ++n)
    for (int64_t i = 0; i < b.c1 - b.c0; ++i) f(b.row(l, n) + i * l.hw, i);
}

// out[j] = value[c] for every position j of channel c in the run (value indexed from c0).
template <class M>
void spread(M* out, const double* value, Block b, int64_t hw) {
  for (int64_t c = 0; c < b.c1 - b.c0; ++c) std::fill_n(out + c * hw, hw, static_cast<M>(value[c]));
}

// per_channel[c] = the sum of channel c's positions in sums (per_channel indexed from c0).
template <class M>
void fold(double* per_channel, const M* sums, Block b, int64_t hw) {
  for (int64_t c = 0; c < b.c1 - b.c0; ++c) {
    double total = 0;
    for (int64_t i = 0; i < hw; ++i) total += sums[c * hw + i];
    per_channel[c] = total;
  }
}

// sum and sum_sq (indexed from c0) of the block's channels.
template <class T>
void block_sums(const T* x, Layout l, Block b, double* sum, double* sum_sq) {
  if constexpr (kHasPlanes<T>)
    if (planes_apply<T>(l.hw)) {
      std::fill_n(sum, b.c1 - b.c0, 0.0);
      std::fill_n(sum_sq, b.c1 - b.c0, 0.0);
      return for_each_plane(
          l, b, [&](int64_t o, int64_t i) { plane_sums(x + o, l.hw, sum[i], sum_sq[i]); });
    }
  double* s = scratch<double, kRunSums>(2 * b.run);
  double* q = s + b.run;
  std::fill_n(s, 2 * b.run, 0.0);
  for (int64_t n = 0; n < l.n; ++n) {
    const T* row = x + b.row(l, n);
#pragma omp simd
    for (int64_t j = 0; j < b.run; ++j) {
      const double v = widen(row[j]);
      s[j] += v;
      q[j] += v * v;
    }
  }
  fold(sum, s, b, l.hw);
  fold(sum_sq, q, b, l.hw);
}

// y = epilogue((x - mean) * scale + beta) over the block, coefficients spread per position.
// (Not x * scale + (beta - mean * scale): with a mean large against the spread, the two terms
// would cancel in f32.)
template <class T, bool Residual, bool Relu>
void block_apply_rows(T* y, const T* x, const T* residual, Layout l, Block b, const Math<T>* mean,
                      const Math<T>* scale, const Math<T>* beta) {
  for (int64_t n = 0; n < l.n; ++n) {
    const int64_t o = b.row(l, n);
#pragma omp simd
    for (int64_t j = 0; j < b.run; ++j) {
      Math<T> v = bn_normalize(widen(x[o + j]), mean[j], scale[j], beta[j]);
      if constexpr (Residual) v += widen(residual[o + j]);
      if constexpr (Relu) v = relu(v);
      y[o + j] = narrow<T>(v);
    }
  }
}

// mean, scale and beta indexed from c0.
template <class T>
void block_apply(T* y, const T* x, Layout l, Block b, const double* mean, const double* scale,
                 const double* beta, Epilogue<T> e) {
  if constexpr (kHasPlanes<T>)
    if (planes_apply<T>(l.hw))
      return for_each_plane(l, b, [&](int64_t o, int64_t i) {
        plane_apply(y + o, x + o, e.residual ? e.residual + o : nullptr, e.relu, l.hw,
                    static_cast<float>(mean[i]), static_cast<float>(scale[i]),
                    static_cast<float>(beta[i]));
      });
  Math<T>* m = scratch<Math<T>, kRunCoefficients>(3 * b.run);
  Math<T>* k = m + b.run;
  Math<T>* s = k + b.run;
  spread(m, mean, b, l.hw);
  spread(k, scale, b, l.hw);
  spread(s, beta, b, l.hw);
  const T* r = e.residual;
  if (r && e.relu) return block_apply_rows<T, true, true>(y, x, r, l, b, m, k, s);
  if (r) return block_apply_rows<T, true, false>(y, x, r, l, b, m, k, s);
  if (e.relu) return block_apply_rows<T, false, true>(y, x, r, l, b, m, k, s);
  block_apply_rows<T, false, false>(y, x, r, l, b, m, k, s);
}

// sum_dy and sum_dy_xmu (indexed from c0) of g = dy, masked by y > 0 when Masked, with g
// written to dresidual when Written.
template <class T, bool Masked, bool Written>
void block_backward_sums_rows(const T* dy, const T* y, const T* x, T* dresidual, Layout l, Block b,
                              const double* mean, double* sum_dy, double* sum_dy_xmu) {
  double* s = scratch<double, kRunSums>(3 * b.run);
  double* sx = s + b.run;
  double* m = sx + b.run;
  std::fill_n(s, 2 * b.run, 0.0);
  spread(m, mean, b, l.hw);
  // In pieces of kPiece values: g and x in the values' type first, then the double sums, two
  // loops that vectorise where one mixing both widths does not.
  constexpr int64_t kPiece = 256;
  Math<T> g[kPiece], xv[kPiece];
  for (int64_t n = 0; n < l.n; ++n) {
    const int64_t o = b.row(l, n);
    for (int64_t j0 = 0; j0 < b.run; j0 += kPiece) {
      const int64_t count = std::min(kPiece, b.run - j0);
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) {
        Math<T> v = widen(dy[o + j0 + j]);
        if constexpr (Masked) v = relu_grad(v, widen(y[o + j0 + j]));
        if constexpr (Written) dresidual[o + j0 + j] = narrow<T>(v);
        g[j] = v;
        xv[j] = widen(x[o + j0 + j]);
      }
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) {
        s[j0 + j] += g[j];
        sx[j0 + j] += g[j] * (static_cast<double>(xv[j]) - m[j0 + j]);
      }
    }
  }
  fold(sum_dy, s, b, l.hw);
  fold(sum_dy_xmu, sx, b, l.hw);
}

template <class T>
void block_backward_sums(const T* dy, const T* y, const T* x, T* dresidual, Layout l, Block b,
                         const double* mean, double* sum_dy, double* sum_dy_xmu) {
  if constexpr (kHasPlanes<T>)
    if (planes_apply<T>(l.hw)) {
      std::fill_n(sum_dy, b.c1 - b.c0, 0.0);
      std::fill_n(sum_dy_xmu, b.c1 - b.c0, 0.0);
      return for_each_plane(l, b, [&](int64_t o, int64_t i) {
        plane_backward_sums(dy + o, y ? y + o : nullptr, x + o, dresidual ? dresidual + o : nullptr,
                            l.hw, mean[i], sum_dy[i], sum_dy_xmu[i]);
      });
    }
  if (y && dresidual)
    return block_backward_sums_rows<T, true, true>(dy, y, x, dresidual, l, b, mean, sum_dy,
                                                   sum_dy_xmu);
  if (y)
    return block_backward_sums_rows<T, true, false>(dy, y, x, dresidual, l, b, mean, sum_dy,
                                                    sum_dy_xmu);
  block_backward_sums_rows<T, false, false>(dy, y, x, dresidual, l, b, mean, sum_dy, sum_dy_xmu);
}

// dx = scale * (g - mean_dy - (x - mean) * xmu_coeff) (bn_input_grad), g being dy, masked by
// y > 0 when Masked; the four factors spread per position, in the order of Factor.
enum Factor { kMean, kScale, kMeanDy, kXmuCoeff, kFactors };

template <class T, bool Masked>
void block_backward_apply_rows(T* dx, const T* dy, const T* y, const T* x, Layout l, Block b,
                               const Math<T>* f) {
  const Math<T>* mean = f + kMean * b.run;
  const Math<T>* scale = f + kScale * b.run;
  const Math<T>* mean_dy = f + kMeanDy * b.run;
  const Math<T>* xmu_coeff = f + kXmuCoeff * b.run;
  for (int64_t n = 0; n < l.n; ++n) {
    const int64_t o = b.row(l, n);
#pragma omp simd
    for (int64_t j = 0; j < b.run; ++j) {
      Math<T> g = widen(dy[o + j]);
      if constexpr (Masked) g = relu_grad(g, widen(y[o + j]));
      dx[o + j] =
          narrow<T>(bn_input_grad(g, widen(x[o + j]), mean[j], scale[j], mean_dy[j], xmu_coeff[j]));
    }
  }
}

// mean and factors indexed from c0.
template <class T>
void block_backward_apply(T* dx, const T* dy, const T* y, const T* x, Layout l, Block b,
                          const double* mean, const InputGradFactors* factors) {
  if constexpr (kHasPlanes<T>)
    if (planes_apply<T>(l.hw))
      return for_each_plane(l, b, [&](int64_t o, int64_t i) {
        const InputGradFactors& f = factors[i];
        plane_backward_apply(dx + o, dy + o, y ? y + o : nullptr, x + o, l.hw,
                             static_cast<float>(mean[i]), static_cast<float>(f.scale),
                             static_cast<float>(f.mean_dy), static_cast<float>(f.xmu_coeff));
      });
  const int64_t channels = b.c1 - b.c0;
  double* per_channel = scratch<double, kChannelValues>(kFactors * channels);
  for (int64_t c = 0; c < channels; ++c) {
    per_channel[kMean * channels + c] = mean[c];
    per_channel[kScale * channels + c] = factors[c].scale;
    per_channel[kMeanDy * channels + c] = factors[c].mean_dy;
    per_channel[kXmuCoeff * channels + c] = factors[c].xmu_coeff;
  }
  Math<T>* spread_factors = scratch<Math<T>, kRunCoefficients>(kFactors * b.run);
  for (int i = 0; i < kFactors; ++i)
    spread(spread_factors + i * b.run, per_channel + i * channels, b, l.hw);
  if (y) return block_backward_apply_rows<T, true>(dx, dy, y, x, l, b, spread_factors);
  block_backward_apply_rows<T, false>(dx, dy, y, x, l, b, spread_factors);
}

// The two passes of a fused forward or backward, each thread taking a fixed run of whole images
// for both, as the convolutions around batch norm split their work: the images a thread's conv
// wrote are still in that core's cache when its batch norm reads them, and its output is where
// the next conv's thread reads it (by channel blocks over all the images, half the data would
// move between cores at each layer). One thread takes all the images, in the order memory is in:
// a block of one channel over all images would be read as N planes a tensor apart (1.5 KiB each
// in bf16 on resnet20's first layer), too short for the hardware prefetcher, and the passes
// measured up to twice as slow that way although their second pass then found the block in L2
// (docs/measurements.md). Within a run the channels go in blocks of `channels` (run_channels).
// first(run, offset, block, partial) puts the per-channel sums of the block's channels in the run
// (run: the layout of images [n0, n1), offset: where image n0 starts) into partial (2 x C, indexed
// by channel); once every thread's are in, finish(c, sum) gets channel c's two sums, the threads'
// partials added in thread order; then second(run, offset, block) over the same blocks.
template <class First, class Finish, class Second>
void in_image_runs(Layout l, int64_t channels, First&& first, Finish&& finish, Second&& second) {
  if (l.n == 0 || l.c == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), l.n));
  std::vector<double> partials(threads * 2 * l.c, 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), runs = omp_get_num_threads();
    const int64_t n0 = l.n * t / runs, n1 = l.n * (t + 1) / runs;
    const Layout run{n1 - n0, l.c, l.hw};
    auto for_each_block_of_run = [&](auto&& f) {
      for (int64_t c0 = 0; c0 < l.c; c0 += channels) {
        const int64_t c1 = std::min(l.c, c0 + channels);
        f(run, n0 * l.c * l.hw, Block{c0, c1, (c1 - c0) * l.hw});
      }
    };
    double* partial = partials.data() + t * 2 * l.c;
    for_each_block_of_run([&](Layout r, int64_t offset, Block b) { first(r, offset, b, partial); });
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t c = 0; c < l.c; ++c) {
      double sum[2] = {0, 0};
      for (int64_t r = 0; r < runs; ++r)
        for (int i = 0; i < 2; ++i) sum[i] += partials[(r * 2 + i) * l.c + c];
      finish(c, sum);
    }
    for_each_block_of_run(second);
  }
}

// Channels per block within a run of images: blocks of about kRunValues, or on the planes, which
// keep no sums per position, all of them (image after image, the order memory is in).
template <class T>
int64_t run_channels(Layout l) {
  if constexpr (kHasPlanes<T>)
    if (planes_apply<T>(l.hw)) return l.c;
  return std::clamp<int64_t>(kRunValues / l.hw, 1, l.c);
}

}  // namespace

template <class T>
void channel_sums_loop(const T* x, Layout l, double* sum, double* sum_sq) {
  for_each_block(l, [&](Block b) { block_sums(x, l, b, sum + b.c0, sum_sq + b.c0); });
}

template <class T>
void apply_loop(T* y, const T* x, Layout l, const double* mean, const double* scale,
                const double* beta, Epilogue<T> epilogue) {
  for_each_block(l, [&](Block b) {
    block_apply(y, x, l, b, mean + b.c0, scale + b.c0, beta + b.c0, epilogue);
  });
}

template <class T>
void backward_reduce_loop(const T* dy, const T* x, Layout l, const double* mean, double* sum_dy,
                          double* sum_dy_xmu) {
  for_each_block(l, [&](Block b) {
    block_backward_sums<T>(dy, nullptr, x, nullptr, l, b, mean + b.c0, sum_dy + b.c0,
                           sum_dy_xmu + b.c0);
  });
}

template <class T>
void backward_apply_loop(T* dx, const T* dy, const T* x, Layout l, const double* mean,
                         const InputGradFactors* factors) {
  for_each_block(l, [&](Block b) {
    block_backward_apply<T>(dx, dy, nullptr, x, l, b, mean + b.c0, factors + b.c0);
  });
}

template <class T>
void fused_forward_train_loop(T* y, const T* x, Layout l, const double* gamma, const double* beta,
                              double eps, double* mean, double* invstd, double* var,
                              Epilogue<T> epilogue) {
  const double count = l.count();
  std::vector<double> scale(l.c);
  in_image_runs(
      l, run_channels<T>(l),
      [&](Layout run, int64_t offset, Block b, double* sums) {
        block_sums(x + offset, run, b, sums + b.c0, sums + l.c + b.c0);
      },
      [&](int64_t c, const double* sum) {
        var[c] = bn_biased_var(sum[0], sum[1], count);
        mean[c] = sum[0] / count;
        invstd[c] = bn_invstd(var[c], eps);
        scale[c] = invstd[c] * gamma[c];
      },
      [&](Layout run, int64_t offset, Block b) {
        const Epilogue<T> e{epilogue.residual ? epilogue.residual + offset : nullptr,
                            epilogue.relu};
        block_apply(y + offset, x + offset, run, b, mean + b.c0, scale.data() + b.c0, beta + b.c0,
                    e);
      });
}

template <class T>
void fused_backward_loop(T* dx, T* dresidual, const T* dy, const T* y, const T* x, Layout l,
                         const double* mean, const double* invstd, const double* gamma,
                         double* sum_dy, double* sum_dy_xhat) {
  const double count = l.count();
  std::vector<InputGradFactors> factors(l.c);
  auto at = [](auto* p, int64_t offset) { return p ? p + offset : nullptr; };
  in_image_runs(
      l, run_channels<T>(l),
      [&](Layout run, int64_t offset, Block b, double* sums) {
        block_backward_sums(dy + offset, at(y, offset), x + offset, at(dresidual, offset), run, b,
                            mean + b.c0, sums + b.c0, sums + l.c + b.c0);
      },
      [&](int64_t c, const double* sum) {
        sum_dy[c] = sum[0];
        sum_dy_xhat[c] = sum[1] * invstd[c];  // sum g * (x - mean) * invstd
        factors[c] = input_grad_factors(gamma[c], invstd[c], sum_dy[c], sum_dy_xhat[c], count);
      },
      [&](Layout run, int64_t offset, Block b) {
        if (!dx) return;
        // The masked gradient, already written to dresidual, is read back instead of dy and y.
        if (dresidual)
          return block_backward_apply<T>(dx + offset, dresidual + offset, nullptr, x + offset, run,
                                         b, mean + b.c0, factors.data() + b.c0);
        block_backward_apply(dx + offset, dy + offset, at(y, offset), x + offset, run, b,
                             mean + b.c0, factors.data() + b.c0);
      });
}

#define RG_INSTANTIATE(T)                                                                        \
  template void channel_sums_loop<T>(const T*, Layout, double*, double*);                        \
  template void apply_loop<T>(T*, const T*, Layout, const double*, const double*, const double*, \
                              Epilogue<T>);                                                      \
  template void backward_reduce_loop<T>(const T*, const T*, Layout, const double*, double*,      \
                                        double*);                                                \
  template void backward_apply_loop<T>(T*, const T*, const T*, Layout, const double*,            \
                                       const InputGradFactors*);                                 \
  template void fused_forward_train_loop<T>(T*, const T*, Layout, const double*, const double*,  \
                                            double, double*, double*, double*, Epilogue<T>);     \
  template void fused_backward_loop<T>(T*, T*, const T*, const T*, const T*, Layout,             \
                                       const double*, const double*, const double*, double*,     \
                                       double*);
RG_INSTANTIATE(float)
RG_INSTANTIATE(double)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

}  // namespace ringgrad::kernels::cpu
