// The 2-D convolution straight from its definition, in plain loops: what to read before
// conv2d.cpp, and what the tests hold conv2d's im2col, tap-crop and flipped paths to.
// With ih = p*sh - ph + r, iw = q*sw - pw + s, and x read as 0 outside the image:
//   y[n][k][p][q] = bias[k] + sum over c, r, s of w[k][c][r][s] x[n][c][ih][iw]
// Backward runs over the same terms, each adding its share to the gradients:
//   dx[n][c][ih][iw] += w[k][c][r][s] dy[n][k][p][q]
//   dw[k][c][r][s]   += x[n][c][ih][iw] dy[n][k][p][q]
//   dbias[k]         += dy[n][k][p][q]
// Single-threaded, f32 and f64: slow by design.
#include "kernels/conv_geometry.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"

namespace ringgrad::kernels::cpu {

namespace {

// Calls term(n, k, p, q, c, r, s, ih, iw) for every term of the sum above whose input pixel
// (ih, iw) = (p*sh - ph + r, q*sw - pw + s) lies inside the image; the others multiply zero.
template <class F>
void for_each_term(int64_t N, const ConvGeometry& g, F&& term) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q)
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.R; ++r)
              for (int64_t s = 0; s < g.S; ++s) {
                const int64_t ih = p * g.stride_h - g.pad_h + r;
                const int64_t iw = q * g.stride_w - g.pad_w + s;
                if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) term(n, k, p, q, c, r, s, ih, iw);
              }
}

// Flat indices into x (N, C, H, W), w (K, C, R, S) and y (N, K, P, Q).
struct Index {
  const ConvGeometry& g;
  int64_t x(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return ((n * g.C + c) * g.H + h) * g.W + w;
  }
  int64_t w(int64_t k, int64_t c, int64_t r, int64_t s) const {
    return ((k * g.C + c) * g.R + r) * g.S + s;
  }
  int64_t y(int64_t n, int64_t k, int64_t p, int64_t q) const {
    return ((n * g.K + k) * g.P + p) * g.Q + q;
  }
};

}  // namespace

void conv2d_reference_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Conv2dParams& params) {
  constexpr const char* op = "conv2d_reference_forward";
  const ConvGeometry g = checked_forward_geometry(y, x, w, bias, params, op);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *wp = w.data<T>();
    T* yp = y.data<T>();
    const Index at{g};
    for (int64_t i = 0; i < y.numel(); ++i)
      yp[i] = bias.defined() ? bias.data<T>()[i / g.output_plane() % g.K] : T(0);
    for_each_term(x.size(0), g,
                  [&](auto n, auto k, auto p, auto q, auto c, auto r, auto s, auto ih, auto iw) {
                    yp[at.y(n, k, p, q)] += wp[at.w(k, c, r, s)] * xp[at.x(n, c, ih, iw)];
                  });
  });
}

void conv2d_reference_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Conv2dParams& params) {
  constexpr const char* op = "conv2d_reference_backward";
  const ConvGeometry g = checked_backward_geometry(dx, dw, dbias, dy, x, w, params, op);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *wp = w.data<T>(), *dyp = dy.data<T>();
    T* dxp = dx.defined() ? dx.data<T>() : nullptr;
    T* dwp = dw.defined() ? dw.data<T>() : nullptr;
    T* dbp = dbias.defined() ? dbias.data<T>() : nullptr;
    if (dxp) dx.zero_();
    if (dwp) dw.zero_();
    if (dbp) dbias.zero_();
    const Index at{g};
    for_each_term(x.size(0), g,
                  [&](auto n, auto k, auto p, auto q, auto c, auto r, auto s, auto ih, auto iw) {
                    const T d = dyp[at.y(n, k, p, q)];
                    if (dxp) dxp[at.x(n, c, ih, iw)] += wp[at.w(k, c, r, s)] * d;
                    if (dwp) dwp[at.w(k, c, r, s)] += xp[at.x(n, c, ih, iw)] * d;
                  });
    if (dbp)
      for (int64_t i = 0; i < dy.numel(); ++i) dbp[i / g.output_plane() % g.K] += dyp[i];
  });
}

}  // namespace ringgrad::kernels::cpu
