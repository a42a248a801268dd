// The position-class path of the CPU convolution (kernels/cpu/conv2d_paths.h), for f32 and f64
// convs on small images, where im2col's column matrix is mostly padding.
//
// Note [Position classes]
// Along one axis, output o of a conv reads kernel taps t with 0 <= o*stride - pad + t < extent:
// one contiguous range [t0(o), t1(o)). With a 3x3 pad-1 kernel the first output reads taps 1..2,
// the last one taps 0..1, the ones between all three. im2col writes all R*S taps for every
// output and the GEMM multiplies the zeros of the padding: on a 4x4 image 31% of its work, on
// 2x2 (ResNet-18's last stage) 56%. Here the outputs are grouped into position classes: runs
// of outputs with the same tap range along each axis (an axis class), crossed (a 3x3 kernel
// gives at most 3 x 3). Within a class no tap meets padding, so the class is a conv with a
// smaller kernel and no padding at all:
//   A_c   (rows x D)  one row per (image, output position of the class), D = C x the class's
//                     taps, the image values those taps read ("im2row": im2col's transpose)
//   y_c   (rows x K)  = A_c W_c^T            forward
//   dW_c  (K x D)    += dY_c A_c             weight gradient
//   dA_c  (rows x D)  = dY_c^T W_c           input gradient, added back into dx
// with W_c (K x D) the weights of the class's taps and dY_c (K x rows) the output gradient at
// its positions. Columns run over taps (r, s) and then channels c, so that with the image
// staged channels-last (images, H, W, C) a row of A_c is one copy per kernel row (taps s0..s1
// x every channel are adjacent), and W_c is, per kernel row, a block of adjacent columns of the
// whole kernel laid out the same way: no per-class copy of the weights, one GEMM per kernel row
// of the class. Each GEMM has K or D along the vector lanes and reads B in place; a corner
// class, one position per image, is a few rows of A. The tests hold this path to
// conv2d_reference.cpp.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/gemm.h"

namespace ringgrad::kernels::cpu {

namespace {

// Outputs [o0, o1) along one axis, each reading exactly taps [t0, t1).
struct AxisClass {
  int64_t o0, o1, t0, t1;
  int64_t outputs() const { return o1 - o0; }
  int64_t taps() const { return t1 - t0; }
};

std::vector<AxisClass> axis_classes(int64_t taps, int64_t pad, int64_t stride, int64_t extent,
                                    int64_t outputs) {
  std::vector<AxisClass> classes;
  for (int64_t o = 0; o < outputs; ++o) {
    const int64_t t0 = std::max<int64_t>(0, pad - o * stride);
    const int64_t t1 = std::min(taps, extent + pad - o * stride);
    if (!classes.empty() && classes.back().t0 == t0 && classes.back().t1 == t1)
      classes.back().o1 = o + 1;
    else
      classes.push_back({o, o + 1, t0, t1});
  }
  return classes;
}

struct PositionClass {
  AxisClass h, w;
  int64_t depth;      // D = C x taps
  int64_t positions;  // outputs of one image in the class
  int64_t lead;       // row stride of A_c: the class matrices and weights are B operands of our
                 // AVX-512 GEMM, read in place where their stride allows (harmless for OpenBLAS)
};

std::vector<PositionClass> position_classes(const ConvGeometry& g) {
  std::vector<PositionClass> classes;
  for (const AxisClass& h : axis_classes(g.R, g.pad_h, g.stride_h, g.H, g.P))
    for (const AxisClass& w : axis_classes(g.S, g.pad_w, g.stride_w, g.W, g.Q)) {
      const int64_t depth = g.C * h.taps() * w.taps();
      classes.push_back({h, w, depth, h.outputs() * w.outputs(), sgemm_in_place_stride(depth)});
    }
  return classes;
}

// The image staged channels-last, (images, H, W, C), so that the taps one kernel row of a
// class reads at one output position, (r, s0..s1) x every channel, are one contiguous run.
template <class T>
void to_channels_last(T* out, const T* x, int64_t images, int64_t C, int64_t plane) {
  for (int64_t b = 0; b < images; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const T* in = x + (b * C + c) * plane;
      T* o = out + b * plane * C + c;
      for (int64_t i = 0; i < plane; ++i) o[i * C] = in[i];
    }
}

// The inverse, for dx.
template <class T>
void from_channels_last(T* dx, const T* in, int64_t images, int64_t C, int64_t plane) {
  for (int64_t b = 0; b < images; ++b)
    for (int64_t c = 0; c < C; ++c) {
      T* out = dx + (b * C + c) * plane;
      const T* i0 = in + b * plane * C + c;
      for (int64_t i = 0; i < plane; ++i) out[i] = i0[i * C];
    }
}

// Column d of every class matrix and of the weights below is tap (r, s) and channel c in the
// order (r, s, c): a class's taps of one kernel row are then one block of taps_w x C columns,
// at (r*S + s0)*C of the whole kernel's RSC columns.
int64_t tap_column(const ConvGeometry& g, int64_t r, int64_t s) { return (r * g.S + s) * g.C; }

// w (K, C, R, S) as (K x RSC), leading dimension ld: each output channel's row is reordered
// where it lies (9 KB at most in ResNet), in parallel over the channels, since ResNet-18's
// largest kernel is 9 MB.
template <class T>
void weights_rsc(T* out, const T* w, const ConvGeometry& g, int64_t ld) {
  const int64_t RS = g.R * g.S;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t rs = 0; rs < RS; ++rs) out[k * ld + rs * g.C + c] = w[(k * g.C + c) * RS + rs];
}

// And transposed, (RSC x K), in blocks of kBlock output channels: a block's writes to a row
// fill a cache line, and its reads are kBlock sequential streams.
template <class T>
void weights_rsc_transposed(T* out, const T* w, const ConvGeometry& g, int64_t ld) {
  constexpr int64_t kBlock = 16;
  const int64_t RS = g.R * g.S;
#pragma omp parallel for schedule(static)
  for (int64_t k0 = 0; k0 < g.K; k0 += kBlock)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t rs = 0; rs < RS; ++rs)
        for (int64_t k = k0; k < std::min(g.K, k0 + kBlock); ++k)
          out[(rs * g.C + c) * ld + k] = w[(k * g.C + c) * RS + rs];
}

// Calls f(row, b, p, q) for every row of a class's matrices over `images` images.
template <class F>
void for_each_row(const PositionClass& pc, int64_t images, F&& f) {
  int64_t row = 0;
  for (int64_t b = 0; b < images; ++b)
    for (int64_t p = pc.h.o0; p < pc.h.o1; ++p)
      for (int64_t q = pc.w.o0; q < pc.w.o1; ++q) f(row++, b, p, q);
}

// Where in a channels-last chunk output (p, q) of a class reads its kernel row r.
int64_t run_start(const ConvGeometry& g, const PositionClass& pc, int64_t b, int64_t p, int64_t q,
                  int64_t r) {
  const int64_t ih = p * g.stride_h - g.pad_h + r, iw = q * g.stride_w - g.pad_w + pc.w.t0;
  return ((b * g.H + ih) * g.W + iw) * g.C;
}

// A_c of `images` images from the channels-last chunk: one run per row and kernel row.
template <class T>
void gather_rows(T* a, const T* x_cl, int64_t images, const ConvGeometry& g,
                 const PositionClass& pc) {
  const int64_t run = pc.w.taps() * g.C;
  for_each_row(pc, images, [&](int64_t row, int64_t b, int64_t p, int64_t q) {
    T* out = a + row * pc.lead;
    for (int64_t r = pc.h.t0; r < pc.h.t1; ++r, out += run)
      std::copy_n(x_cl + run_start(g, pc, b, p, q, r), run, out);
  });
}

// The adjoint: the channels-last dx += dA_c, run by run.
template <class T>
void scatter_rows(T* dx_cl, const T* da, int64_t images, const ConvGeometry& g,
                  const PositionClass& pc) {
  const int64_t run = pc.w.taps() * g.C;
  for_each_row(pc, images, [&](int64_t row, int64_t b, int64_t p, int64_t q) {
    const T* in = da + row * pc.lead;
    for (int64_t r = pc.h.t0; r < pc.h.t1; ++r, in += run) {
      T* out = dx_cl + run_start(g, pc, b, p, q, r);
      for (int64_t i = 0; i < run; ++i) out[i] += in[i];
    }
  });
}

// dY_c (K x rows) from dy (images, K, P, Q).
template <class T>
void gather_output_grad(T* dyc, const T* dy, int64_t images, const ConvGeometry& g,
                        const PositionClass& pc) {
  const int64_t rows = images * pc.positions;
  for_each_row(pc, images, [&](int64_t row, int64_t b, int64_t p, int64_t q) {
    const T* in = dy + b * g.output_image_size() + p * g.Q + q;
    for (int64_t k = 0; k < g.K; ++k) dyc[k * rows + row] = in[k * g.output_plane()];
  });
}

// How the batch is cut: every thread a contiguous run of chunks, a chunk as many images as keep
// the largest A_c within kRowsBytes.
struct ClassPlan {
  int64_t images, chunks;
  int threads;
};

ClassPlan plan_class_chunks(int64_t N, const std::vector<PositionClass>& classes,
                            size_t element_size) {
  constexpr int64_t kRowsBytes = 2 << 20;
  int64_t per_image = 1;
  for (const PositionClass& pc : classes)
    per_image = std::max(per_image, pc.positions * pc.lead * static_cast<int64_t>(element_size));
  const int64_t threads = std::clamp<int64_t>(omp_get_max_threads(), 1, N);
  const int64_t images =
      std::clamp(kRowsBytes / per_image, int64_t{1}, (N + threads - 1) / threads);
  const int64_t chunks = (N + images - 1) / images;
  return {images, chunks, static_cast<int>(std::min(threads, chunks))};
}

// Per-thread scratch of one size each.
template <class T>
struct Scratch {
  Tensor space;
  int64_t each;
  Scratch(int threads, int64_t size)
      : space(Tensor::empty({threads * size}, DTypeOf<T>::value)), each(size) {}
  T* of(int thread) { return space.data<T>() + thread * each; }
};

int64_t largest_rows_matrix(const std::vector<PositionClass>& classes, int64_t images) {
  int64_t size = 0;
  for (const PositionClass& pc : classes) size = std::max(size, images * pc.positions * pc.lead);
  return size;
}

}  // namespace

// When the classes gain, measured with conv_bench on ResNet's shapes (docs/measurements.md):
// below this share of useful products their extra passes (staging, a gather per class, smaller
// GEMMs) cost less than the padding's multiplies; at stride 1 above it, the flipped backward
// (conv2d_flipped_backward.cpp) wins. Strided convs gain from 32 channels, as said below.
constexpr double kPositionClassesBelow = 0.8;
constexpr int64_t kPositionClassesStridedChannels = 32;

bool position_classes_apply(const ConvGeometry& g) {
  // The share of im2col's products that meet the image, per axis: sum over outputs of the taps
  // they read, over outputs x taps.
  auto useful = [](const std::vector<AxisClass>& classes, int64_t outputs, int64_t taps) {
    int64_t read = 0;
    for (const AxisClass& a : classes) read += a.outputs() * a.taps();
    return static_cast<double>(read) / static_cast<double>(outputs * taps);
  };
  const auto hs = axis_classes(g.R, g.pad_h, g.stride_h, g.H, g.P);
  const auto ws = axis_classes(g.S, g.pad_w, g.stride_w, g.W, g.Q);
  for (const auto* axis : {&hs, &ws})
    for (const AxisClass& a : *axis)
      if (a.taps() <= 0) return false;  // outputs that read only padding: tap crop's case
  const double share = useful(hs, g.P, g.R) * useful(ws, g.Q, g.S);
  if (share < kPositionClassesBelow) return true;
  // A strided conv with padding: its im2col copies and col2im adds are strided, which the
  // channels-last runs avoid, once a run (taps x channels) is long enough.
  const bool strided = g.stride_h > 1 || g.stride_w > 1;
  return strided && share < 1 && g.C >= kPositionClassesStridedChannels;
}

template <class T>
void position_classes_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                              const ConvGeometry& g) {
  const std::vector<PositionClass> classes = position_classes(g);
  const int64_t lead_k = sgemm_in_place_stride(g.K);
  Tensor wt_space = Tensor::empty({g.patch_size() * lead_k}, DTypeOf<T>::value);
  T* wt = wt_space.data<T>();  // (RSC x K)
  weights_rsc_transposed(wt, w, g, lead_k);
  const ClassPlan plan = plan_class_chunks(N, classes, sizeof(T));
  Scratch<T> x_space(plan.threads, plan.images * g.image_size());
  Scratch<T> a_space(plan.threads, largest_rows_matrix(classes, plan.images));
  Scratch<T> y_space(plan.threads, plan.images * g.output_plane() * lead_k);
#pragma omp parallel num_threads(plan.threads)
  {
    T* x_cl = x_space.of(omp_get_thread_num());
    T* a = a_space.of(omp_get_thread_num());
    T* yc = y_space.of(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      T* out = y + first * g.output_image_size();
      to_channels_last(x_cl, x + first * g.image_size(), images, g.C, g.input_plane());
      for (const PositionClass& pc : classes) {
        const int64_t rows = images * pc.positions, run = pc.w.taps() * g.C;
        gather_rows(a, x_cl, images, g, pc);
        for (int64_t r = pc.h.t0; r < pc.h.t1; ++r)  // y_c (+)= A_c's block of r times W^T's
          gemm(Op::none, Op::none, rows, g.K, run, T(1), a + (r - pc.h.t0) * run, pc.lead,
               wt + tap_column(g, r, pc.w.t0) * lead_k, lead_k, T(r == pc.h.t0 ? 0 : 1), yc,
               lead_k);
        for_each_row(pc, images, [&](int64_t row, int64_t b, int64_t p, int64_t q) {
          T* o = out + b * g.output_image_size() + p * g.Q + q;
          const T* in = yc + row * lead_k;
          for (int64_t k = 0; k < g.K; ++k)
            o[k * g.output_plane()] = in[k] + (bias ? bias[k] : T(0));
        });
      }
    }
  }
}

template <class T>
void position_classes_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t N,
                               const ConvGeometry& g) {
  const std::vector<PositionClass> classes = position_classes(g);
  const int64_t rsc = g.patch_size(), lead_rsc = sgemm_in_place_stride(rsc);
  Tensor w_space = Tensor::empty({dx ? g.K * lead_rsc : 0}, DTypeOf<T>::value);
  if (dx) weights_rsc(w_space.data<T>(), w, g, lead_rsc);  // (K x RSC)
  const ClassPlan plan = plan_class_chunks(N, classes, sizeof(T));
  int64_t largest_positions = 0;
  for (const PositionClass& pc : classes)
    largest_positions = std::max(largest_positions, pc.positions);
  Scratch<T> x_space(plan.threads, dw ? plan.images * g.image_size() : 0);      // x channels-last
  Scratch<T> dx_space(plan.threads, dx ? plan.images * g.image_size() : 0);     // dx channels-last
  Scratch<T> a_space(plan.threads, largest_rows_matrix(classes, plan.images));  // A_c, dA_c
  Scratch<T> dy_space(plan.threads, g.K * plan.images * largest_positions);     // dY_c
  Scratch<T> dw_space(plan.threads, dw ? g.K * rsc : 0);  // each thread's dw, (K x RSC)
#pragma omp parallel num_threads(plan.threads)
  {
    const int thread = omp_get_thread_num();
    T* x_cl = x_space.of(thread);
    T* dx_cl = dx_space.of(thread);
    T* a = a_space.of(thread);
    T* dyc = dy_space.of(thread);
    T* dw_sum = dw_space.of(thread);
    if (dw) std::fill_n(dw_sum, g.K * rsc, T(0));
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      if (dw) to_channels_last(x_cl, x + first * g.image_size(), images, g.C, g.input_plane());
      if (dx) std::fill_n(dx_cl, images * g.image_size(), T(0));
      for (const PositionClass& pc : classes) {
        const int64_t rows = images * pc.positions, run = pc.w.taps() * g.C;
        gather_output_grad(dyc, dy + first * g.output_image_size(), images, g, pc);
        if (dw) {  // dW (K x RSC) += dY_c A_c, a block of columns per kernel row
          gather_rows(a, x_cl, images, g, pc);
          for (int64_t r = pc.h.t0; r < pc.h.t1; ++r)
            gemm(Op::none, Op::none, g.K, run, rows, T(1), dyc, rows, a + (r - pc.h.t0) * run,
                 pc.lead, T(1), dw_sum + tap_column(g, r, pc.w.t0), rsc);
        }
        if (dx) {  // dA_c = dY_c^T W_c, block by block, added into dx channels-last
          for (int64_t r = pc.h.t0; r < pc.h.t1; ++r)
            gemm(Op::transpose, Op::none, rows, run, g.K, T(1), dyc, rows,
                 w_space.data<T>() + tap_column(g, r, pc.w.t0), lead_rsc, T(0),
                 a + (r - pc.h.t0) * run, pc.lead);
          scatter_rows(dx_cl, a, images, g, pc);
        }
      }
      if (dx) from_channels_last(dx + first * g.image_size(), dx_cl, images, g.C, g.input_plane());
    }
    if (dw) {  // every partial is complete: omp for's barrier
      const int team = omp_get_num_threads();
      T* total = dw_space.of(0);
      for (int t = 1; t < team; ++t) {
        const T* partial = dw_space.of(t);
#pragma omp for schedule(static)
        for (int64_t e = 0; e < g.K * rsc; ++e) total[e] += partial[e];
      }
      const int64_t RS = g.R * g.S;  // (K x RSC) -> (K, C, R, S)
#pragma omp for schedule(static)
      for (int64_t kc = 0; kc < g.K * g.C; ++kc) {
        const T* in = total + kc / g.C * rsc + kc % g.C;
        for (int64_t rs = 0; rs < RS; ++rs) dw[kc * RS + rs] = in[rs * g.C];
      }
    }
  }
}

#define RG_INSTANTIATE(T)                                                                   \
  template void position_classes_forward<T>(T*, const T*, const T*, const T*, int64_t,      \
                                            const ConvGeometry&);                           \
  template void position_classes_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, \
                                             const ConvGeometry&);
RG_INSTANTIATE(float)
RG_INSTANTIATE(double)
#undef RG_INSTANTIATE

}  // namespace ringgrad::kernels::cpu
