// The sizes of one convolution, x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q), shared by the
// CPU kernels (kernels/cpu/conv2d*.cpp, im2col) and the CUDA kernels (kernels/cuda/conv2d.cu,
// which pass it to the device by value: hence the RG_HD methods). Not part of the kernels API.
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "kernels/ops.h"

namespace ringgrad::kernels {

struct ConvGeometry {
  int64_t C, H, W;
  int64_t K, R, S;
  int64_t P, Q;
  int64_t stride_h, stride_w, pad_h, pad_w;

  RG_HD int64_t input_plane() const { return H * W; }
  RG_HD int64_t output_plane() const { return P * Q; }
  RG_HD int64_t image_size() const { return C * H * W; }
  RG_HD int64_t output_image_size() const { return K * P * Q; }
  RG_HD int64_t patch_size() const { return C * R * S; }  // rows of the column matrix
  // A 1x1 stride-1 unpadded conv reads x itself as its column matrix (per image).
  RG_HD bool is_pointwise() const {
    return R == 1 && S == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 && pad_w == 0;
  }
};

// The geometry of conv(x, w) under p, after conv2d_output_shape's checks of the two shapes.
inline ConvGeometry conv_geometry(const Shape& x, const Shape& w, const Conv2dParams& p) {
  const Shape y = conv2d_output_shape(x, w, p);
  return {x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}

}  // namespace ringgrad::kernels
