// The stride-1 backward of the CPU convolution (kernels/cpu/conv2d_paths.h): the input
// gradient is itself a convolution, of dy with the flipped kernel, so it runs as im2col + GEMM
// straight into dx, and the weight gradient reuses that conv's column matrix.
#include <omp.h>

#include <algorithm>

#include "core/tensor.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/im2col.h"

namespace ringgrad::kernels::cpu {

// With stride 1 the input gradient is itself a convolution. From
//   dx[c][i][j] = sum_{k,r,s} w[k][c][r][s] dy[k][i + pad_h - r][j + pad_w - s]
// and r' = R-1-r, s' = S-1-s: dx = conv(dy, w') with w'[c][k][r'][s'] = w[k][c][R-1-r'][S-1-s']
// and padding R-1-pad_h, S-1-pad_w (a real padding while pad <= kernel - 1). That runs the
// forward path (im2col + GEMM straight into dx) instead of GEMM into a column matrix nine
// times the size of dx, from a product with inner dimension K only, and col2im. A 1x1 kernel
// gains nothing (its column matrix is no larger than dx) and keeps the direct path.
bool input_grad_is_conv(const ConvGeometry& g) {
  return g.R * g.S > 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h <= g.R - 1 &&
         g.pad_w <= g.S - 1;
}

namespace {

ConvGeometry input_grad_geometry(const ConvGeometry& g) {
  return {g.K, g.P, g.Q, g.C, g.R, g.S, g.H, g.W, 1, 1, g.R - 1 - g.pad_h, g.S - 1 - g.pad_w};
}

// w' (C, K, R, S) from w (K, C, R, S), as above; parallel, since ResNet-18's kernels reach 9 MB.
template <class T>
Tensor flipped_transposed_kernel(const T* w, const ConvGeometry& g) {
  Tensor flipped = Tensor::empty({g.C, g.K, g.R, g.S}, DTypeOf<T>::value);
  T* f = flipped.data<T>();
  const int64_t RS = g.R * g.S;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t rs = 0; rs < RS; ++rs)
        f[(c * g.K + k) * RS + RS - 1 - rs] = w[(k * g.C + c) * RS + rs];
  return flipped;
}

}  // namespace

// Stride-1 backward when dx is wanted: dx = conv(dy, w') as above, and dw from the same
// column matrix of dy. With h = p + r - pad_h (and likewise w),
//   dw[k][c][r][s] = sum_{n,p,q} dy[n][k][p][q] x[n][c][p + r - pad_h][q + s - pad_w]
//                  = sum_{n,h,w} col(dy)[(k, R-1-r, S-1-s)][(n, h, w)] x[n][c][h][w]
// (col(dy) is the flipped conv's column matrix, zero exactly where dy's index leaves the image),
// so per chunk dw^T (C, KRS) += X col(dy)^T with X the chunk's x as (C, columns), and one im2col
// serves both products instead of one of dy and another of x.
template <class T>
void flipped_conv_backward(T* dx, GemmResult<T>* dw, const T* dy, const T* x, const T* w, int64_t N,
                           const ConvGeometry& g) {
  using R = GemmResult<T>;
  const ConvGeometry f = input_grad_geometry(g);  // the conv over dy: f.K == g.C, f.C == g.K
  const Tensor flipped = flipped_transposed_kernel(w, g);
  // dx straight from dy where Winograd or the direct path takes the flipped conv (Note [Winograd
  // convolution], Note [Direct convolution]); the loop below then only builds dy's column
  // matrix for dw.
  bool dx_done = false;
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_applies(f)) {  // Note [Winograd convolution]
      winograd_forward(dx, dy, flipped.data<T>(), nullptr, N, f);
      if (!dw) return;
      dx_done = true;
    }
  }
  if constexpr (kHasDirectPath<T>) {
    if (!dx_done && direct_conv_applies<T>(f)) {
      direct_conv_forward<T>(dx, dy, flipped.data<T>(), nullptr, N, f);
      if (!dw) return;
      dx_done = true;
    }
  }
  const GemmA<T> weights(Op::none, flipped.data<T>(), f.patch_size(), g.C, f.patch_size());
  const ChunkPlan plan = plan_chunks(N, f, sizeof(T));
  const bool batched = plan.images > 1;  // dx and x then need moving to and from (C, columns)
  const bool gemm_into_dx = !batched && std::is_same_v<T, R>;
  const int64_t columns = plan.images * f.output_plane(), KRS = f.patch_size();
  const int64_t col_size = KRS * columns;
  const int64_t x_moved_size = batched && dw ? g.C * columns : 0;
  const int64_t result_size = gemm_into_dx ? 0 : g.C * columns;  // dx as (C, columns)
  const int64_t dw_size = dw ? g.C * KRS : 0;
  Tensor t_space = Tensor::empty({plan.threads * (col_size + x_moved_size)}, DTypeOf<T>::value);
  Tensor r_space = Tensor::empty({plan.threads * (result_size + dw_size)}, DTypeOf<R>::value);
  R* partials = r_space.data<R>() + plan.threads * result_size;  // dw^T of each thread
#pragma omp parallel num_threads(plan.threads)
  {
    const int thread = omp_get_thread_num();
    T* col = t_space.data<T>() + thread * (col_size + x_moved_size);
    T* x_moved = col + col_size;
    R* result = r_space.data<R>() + thread * result_size;
    R* dw_sum = partials + thread * dw_size;
    R beta = 0;  // the first chunk of each thread overwrites its dw_sum
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      const int64_t cols = images * f.output_plane();
      const T* dyc = dy + first * g.output_image_size();
      // bf16's dw product builds col(dy) into its own tiles when dx did not need it.
      if (!dx_done || !kWeightSumTransposed<T>) im2col(col, dyc, images, f);
      if (!dx_done) {
        T* dxc = dx + first * g.image_size();
        R* out = result;
        if constexpr (std::is_same_v<T, R>)
          if (gemm_into_dx) out = dxc;
        weights.multiply(Op::none, cols, col, cols, R(0), out, cols);
        store_output(dxc, out, static_cast<const T*>(nullptr), images, f);
      }
      if (!dw) continue;
      const T* xc = x + first * g.image_size();
      if (batched) {  // x (images, C, H*W) is laid out as the flipped conv's output
        planes_by_channel(x_moved, xc, images, g.C, g.input_plane());
        xc = x_moved;
      }
      bool summed = false;
      if constexpr (kWeightSumTransposed<T>) {
        if (dx_done) {
          accumulate_outer_im2col(g.C, KRS, cols, xc, dyc, images, f, beta, dw_sum);
          summed = true;
        }
      }
      if (!summed) accumulate_outer(g.C, KRS, cols, xc, col, beta, dw_sum);
      beta = 1;
    }
    // dw[k][c][r][s] = sum over threads of dw^T[c][(k, R-1-r, S-1-s)], read along the sums'
    // rows: (k, tap) by c when they are transposed (bf16), else by tap for each (k, c).
    if (dw) {
      const int team = omp_get_num_threads();
      const int64_t RS = g.R * g.S;
      auto sum_at = [&](int64_t c, int64_t k, int64_t rs) {
        const int64_t from = outer_at<T>(c, k * RS + (RS - 1 - rs), g.C, KRS);
        R sum = 0;
        for (int t = 0; t < team; ++t) sum += partials[t * dw_size + from];
        return sum;
      };
      if constexpr (kWeightSumTransposed<T>) {
#pragma omp for schedule(static)
        for (int64_t k = 0; k < g.K; ++k)
          for (int64_t rs = 0; rs < RS; ++rs)
            for (int64_t c = 0; c < g.C; ++c) dw[(k * g.C + c) * RS + rs] = sum_at(c, k, rs);
      } else {
#pragma omp for schedule(static)
        for (int64_t kc = 0; kc < g.K * g.C; ++kc)
          for (int64_t rs = 0; rs < RS; ++rs) dw[kc * RS + rs] = sum_at(kc % g.C, kc / g.C, rs);
      }
    }
  }
}

#define RG_INSTANTIATE(T)                                                                  \
  template void flipped_conv_backward<T>(T*, GemmResult<T>*, const T*, const T*, const T*, \
                                         int64_t, const ConvGeometry&);
RG_INSTANTIATE(float)
RG_INSTANTIATE(double)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

}  // namespace ringgrad::kernels::cpu
