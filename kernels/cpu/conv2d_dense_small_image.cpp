// The dense path of the CPU convolution (kernels/cpu/conv2d_paths.h): on an image with fewer
// pixels than the kernel has taps, the conv is one matrix product with the image as it is.
//
// Note [Dense small-image convolution]
// A conv is linear in x: y[n][k][o] = sum over (c, i) of x[n][c][i] D[(c, i)][(o, k)], over
// input pixels i and output positions o, where D holds w[k][c][r][s] for the tap (r, s) that
// carries pixel i to output o (i = o * stride - pad + (r, s)) and zero where no tap does.
// Images of a batch are rows of (N, C*H*W), so with dy' (N x PQK) the output gradient with its
// positions outside its channels (dy is (N, K, P*Q)):
//   y' (N x PQK)   = x (N x CHW) D               forward, y' moved into y (N, K, P*Q)
//   dx (N x CHW)   = dy' D^T                     input gradient
//   G  (CHW x PQK) = x^T dy',   dw[k][c][t] = the sum of G over the (i, o) that tap t joins
// with no column matrix and no copy of x. D has C*H*W x K*P*Q entries, against im2col's C*R*S
// per output, so it multiplies no more numbers when H*W <= R*S: ResNet-18's 3x3 convs on 2x2
// images, where every pixel meets every output (no zero in D) and im2col's column matrix is 56%
// padding, and its tap-cropped ones (a 3x3 kernel on a 1x1 image is a 1x1 kernel; stride 2 on
// a 2x2 image a 2x2 kernel), where the column matrix would be a copy of x. Columns run over (o, k), k fastest, so that a run of D is K weights of one
// (c, tap) taken from the kernel transposed to (C*R*S, K), and the fold of G into dw adds whole
// runs of K: every pass reads and writes along rows. Held to conv2d_reference.cpp by the tests'
// bf16 sweep.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/gemm.h"

namespace ringgrad::kernels::cpu {

namespace {

// The largest D built (entries): 16 MiB of bf16. Larger ones go to im2col.
constexpr int64_t kMaxDenseEntries = int64_t{8} << 20;

// tap[i * PQ + o]: the kernel tap (r * S + s) that carries input pixel i to output position o,
// or -1.
std::vector<int64_t> tap_map(const ConvGeometry& g) {
  std::vector<int64_t> taps(g.input_plane() * g.output_plane(), -1);
  for (int64_t h = 0; h < g.H; ++h)
    for (int64_t wi = 0; wi < g.W; ++wi)
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q) {
          const int64_t r = h - p * g.stride_h + g.pad_h, s = wi - q * g.stride_w + g.pad_w;
          if (r >= 0 && r < g.R && s >= 0 && s < g.S)
            taps[(h * g.W + wi) * g.output_plane() + p * g.Q + q] = r * g.S + s;
        }
  return taps;
}

// out (cols x rows) = in (rows x cols) transposed, through 32 x 32 tiles. An orphaned omp for.
template <class T>
void transpose(T* out, const T* in, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
#pragma omp for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
          out[c * rows + r] = in[r * cols + c];
}

// D (CHW x PQK) from w (K, C, R, S).
Tensor dense_weights(const BFloat16* w, const ConvGeometry& g, const std::vector<int64_t>& taps) {
  const int64_t HW = g.input_plane(), PQ = g.output_plane(), K = g.K, kernel = g.R * g.S;
  Tensor wt = Tensor::empty({g.patch_size(), K}, DType::bf16);  // (C * R * S, K)
  Tensor dense = Tensor::empty({g.image_size(), PQ * K}, DType::bf16);
  BFloat16* t_w = wt.data<BFloat16>();
  BFloat16* d = dense.data<BFloat16>();
#pragma omp parallel
  {
    transpose(t_w, w, K, g.patch_size());
#pragma omp for schedule(static)
    for (int64_t ci = 0; ci < g.image_size(); ++ci) {
      const int64_t c = ci / HW, i = ci % HW;
      for (int64_t o = 0; o < PQ; ++o) {
        const int64_t t = taps[i * PQ + o];
        BFloat16* run = d + (ci * PQ + o) * K;
        if (t < 0)
          std::fill_n(run, K, BFloat16{});
        else
          std::copy_n(t_w + (c * kernel + t) * K, K, run);
      }
    }
  }
  return dense;
}

}  // namespace

bool dense_small_image_applies(const ConvGeometry& g) {
  return g.input_plane() <= g.R * g.S && g.image_size() * g.output_image_size() <= kMaxDenseEntries;
}

void dense_small_image_forward(BFloat16* y, const BFloat16* x, const BFloat16* w,
                               const BFloat16* bias, int64_t N, const ConvGeometry& g) {
  const int64_t CHW = g.image_size(), KPQ = g.output_image_size(), PQ = g.output_plane();
  const Tensor dense = dense_weights(w, g, tap_map(g));
  Tensor sums = Tensor::empty({N, KPQ}, DType::f32);  // y' (N, P*Q, K)
  const float* s = sums.data<float>();
  parallel_gemm(Op::none, Op::none, N, KPQ, CHW, 1.0f, x, CHW, dense.data<BFloat16>(), KPQ, 0.0f,
                sums.data<float>(), KPQ);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < g.K; ++k) {
      const float add = bias ? widen(bias[k]) : 0.0f;
      for (int64_t o = 0; o < PQ; ++o)
        y[(n * g.K + k) * PQ + o] = narrow<BFloat16>(s[(n * PQ + o) * g.K + k] + add);
    }
}

void dense_small_image_backward(BFloat16* dx, float* dw, const BFloat16* dy, const BFloat16* x,
                                const BFloat16* w, int64_t N, const ConvGeometry& g) {
  const int64_t CHW = g.image_size(), KPQ = g.output_image_size(), K = g.K;
  const int64_t HW = g.input_plane(), PQ = g.output_plane(), kernel = g.R * g.S;
  const std::vector<int64_t> taps = tap_map(g);
  Tensor moved = Tensor::empty({N, KPQ}, DType::bf16);  // dy' (N, P*Q, K)
  BFloat16* dyp = moved.data<BFloat16>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t o = 0; o < PQ; ++o) dyp[(n * PQ + o) * K + k] = dy[(n * K + k) * PQ + o];
  if (dx) {
    const Tensor dense = dense_weights(w, g, taps);
    Tensor sums = Tensor::empty({N, CHW}, DType::f32);
    const float* s = sums.data<float>();
    parallel_gemm(Op::none, Op::transpose, N, CHW, KPQ, 1.0f, dyp, KPQ, dense.data<BFloat16>(), KPQ,
                  0.0f, sums.data<float>(), CHW);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * CHW; ++i) dx[i] = narrow<BFloat16>(s[i]);
  }
  if (!dw) return;
  Tensor grads = Tensor::empty({CHW, KPQ}, DType::f32);            // G = x^T dy'
  Tensor folded = Tensor::empty({g.patch_size(), K}, DType::f32);  // dw transposed
  const float* G = grads.data<float>();
  float* f = folded.data<float>();
  parallel_gemm(Op::transpose, Op::none, CHW, KPQ, N, 1.0f, x, CHW, dyp, KPQ, 0.0f,
                grads.data<float>(), KPQ);
#pragma omp parallel
  {
    // Row (c, t) of the fold is the sum of the runs of K that tap t joins in channel c's rows.
#pragma omp for schedule(static)
    for (int64_t c = 0; c < g.C; ++c) {
      std::fill_n(f + c * kernel * K, kernel * K, 0.0f);
      for (int64_t i = 0; i < HW; ++i)
        for (int64_t o = 0; o < PQ; ++o) {
          const int64_t t = taps[i * PQ + o];
          if (t < 0) continue;
          const float* run = G + ((c * HW + i) * PQ + o) * K;
          float* sum = f + (c * kernel + t) * K;
          for (int64_t k = 0; k < K; ++k) sum[k] += run[k];
        }
    }
    transpose(dw, f, g.patch_size(), K);
  }
}

}  // namespace ringgrad::kernels::cpu
