// The output shapes of kernels/ops.h: conv2d_output_shape and pool2d_output_shape, with the
// checks of their parameters. Device-neutral arithmetic that callers use to allocate outputs
// and both backends use to check them.
#include "kernels/ops.h"

namespace ringgrad::kernels {

namespace {

// floor((in + 2 pad - kernel) / stride) + 1, with the arguments checked.
int64_t conv_extent(int64_t in, int64_t kernel, int stride, int pad, const char* dim) {
  RG_CHECK(stride >= 1 && pad >= 0, "conv2d: stride_", dim, " ", stride, " and pad_", dim, " ", pad,
           " must satisfy stride >= 1, pad >= 0");
  const int64_t span = in + 2 * static_cast<int64_t>(pad) - kernel;
  RG_CHECK_GE(span, 0, "conv2d: the kernel's ", dim, " extent ", kernel,
              " is larger than the padded input (", in, " + 2*", pad, ")");
  return span / stride + 1;
}

// The same for a pooling window, which may not be more than half padding (as PyTorch).
int64_t pooled_extent(int64_t in, int kernel, int stride, int pad, const char* dim) {
  RG_CHECK(kernel >= 1 && stride >= 1 && pad >= 0, "pool2d: kernel_", dim, " ", kernel, ", stride_",
           dim, " ", stride, " and pad_", dim, " ", pad,
           " must satisfy kernel >= 1, stride >= 1, pad >= 0");
  RG_CHECK_LE(2 * pad, kernel, "pool2d: pad_", dim, " must be at most half of kernel_", dim,
              " (as PyTorch), so no window is all padding");
  const int64_t span = in + 2 * pad - kernel;
  RG_CHECK_GE(span, 0, "pool2d: kernel_", dim, " ", kernel, " is larger than the padded input (",
              in, " + 2*", pad, ")");
  return span / stride + 1;
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  RG_CHECK_EQ(x.size(), 4, "conv2d: x must be (N, C, H, W), got shape ", x.str());
  RG_CHECK_EQ(w.size(), 4, "conv2d: w must be (K, C, R, S), got shape ", w.str());
  RG_CHECK_EQ(x[1], w[1], "conv2d: x has ", x[1], " channels but w expects ", w[1], " (x ", x.str(),
              ", w ", w.str(), ")");
  return {x[0], w[0], conv_extent(x[2], w[2], p.stride_h, p.pad_h, "h"),
          conv_extent(x[3], w[3], p.stride_w, p.pad_w, "w")};
}

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
  RG_CHECK_EQ(x.size(), 4, "pool2d: input must be (N, C, H, W), got shape ", x.str());
  return {x[0], x[1], pooled_extent(x[2], p.kernel_h, p.stride_h, p.pad_h, "h"),
          pooled_extent(x[3], p.kernel_w, p.stride_w, p.pad_w, "w")};
}

}  // namespace ringgrad::kernels
