// f32 convolutions of stride 1 that keep the image's size, on CPUs where our AVX-512 SGEMM runs:
// the forward product without the column matrix (Note [Implicit columns]). Tested against
// conv2d_reference.cpp by the conv sweep in tests/kernels/test_conv2d.cpp.
//
// Note [Implicit columns]
// With stride 1 and P == H, Q == W (ResNet's 3x3 convs with padding 1), entry (c, r, s) of
// output position o = p*W + q in the column matrix is x[c][o + shift(r, s)], shift = (r - pad_h)
// * W + s - pad_w, or 0 where row p + r - pad_h or column q + s - pad_w leaves the image: whether
// it does depends on the tap and the position only, not on the channel. So the GEMM's B operand
// needs no matrix: a step of the micro-kernel (one row of B, 16 columns a vector) loads x at
// the channel's row plus the tap's shift, under a 16-bit mask kept per (vector of columns, tap).
// A chunk of several images is first laid out channel by channel, (C, images*H*W), the layout of
// the column matrix's rows, so that a vector running from one image into the next reads on in
// the same channel; the masks zero the lanes whose tap would cross an image's edge. The products
// run tap by tap, each tap over all channels (the weights permuted to match, once per call), so
// a tap's masks are loaded once for C steps. What this saves is im2col's pass, a column matrix
// R*S times the image written and read back, for a copy of x the image's size.

#include <omp.h>

#include <algorithm>

#include "kernels/cpu/conv2d_paths.h"

namespace ringgrad::kernels::cpu {

bool implicit_columns_apply(const ConvGeometry& g) {
  return avx512_sgemm_enabled() && g.stride_h == 1 && g.stride_w == 1 && g.P == g.H && g.Q == g.W &&
         g.R * g.S > 1;
}

void implicit_columns_forward(float* y, const float* x, const float* w, const float* bias,
                              int64_t N, const ConvGeometry& g) {
  const ChunkPlan plan = plan_chunks(N, g, sizeof(float));
  const ImplicitColumns columns(g.C, g.H, g.W, g.R, g.S, g.pad_h, g.pad_w, plan.images);
  const int64_t taps = g.R * g.S, plane = g.output_plane(), chunk_columns = plan.images * plane;
  Tensor tap_major = Tensor::empty({g.K, taps, g.C}, DType::f32);  // w[k][c][tap] at [k][tap][c]
  float* permuted = tap_major.data<float>();
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t t = 0; t < taps; ++t)
        permuted[(k * taps + t) * g.C + c] = w[(k * g.C + c) * taps + t];
  const PackedSgemmA weights(Op::none, permuted, g.patch_size(), g.K, g.patch_size());
  // Per thread: the chunk's x channel by channel (unless it is one image, already so), and its
  // product, (K, columns).
  const int64_t x_size = plan.images > 1 ? g.C * chunk_columns : 0;
  const int64_t per_thread = x_size + g.K * chunk_columns;
  Tensor space = Tensor::empty({plan.threads * per_thread}, DType::f32);
#pragma omp parallel num_threads(plan.threads)
  {
    float* x_moved = space.data<float>() + omp_get_thread_num() * per_thread;
    float* result = x_moved + x_size;
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      const int64_t n = images * plane;
      const float* xc = x + first * g.image_size();
      if (images > 1) {
        planes_by_channel(x_moved, xc, images, g.C, plane);
        xc = x_moved;
      }
      sgemm_avx512_implicit(weights, columns, xc, n, result, n);
      store_output(y + first * g.output_image_size(), result, bias, images, g);
    }
  }
}

}  // namespace ringgrad::kernels::cpu
