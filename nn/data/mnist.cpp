// MNIST-format loading (file lookup, validation, normalisation) and the synthetic dataset.
#include "nn/data/mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "core/rng.h"
#include "nn/data/idx.h"

namespace ringgrad::nn {

namespace {

// `dir`/`name`, or `dir`/`name`.gz when only that exists.
std::string find_idx_file(const std::string& dir, const std::string& name) {
  const std::filesystem::path base = std::filesystem::path(dir) / name;
  for (const std::string& candidate : {base.string(), base.string() + ".gz"})
    if (std::filesystem::is_regular_file(candidate)) return candidate;
  RG_THROW(IoError, "no ", name, "[.gz] in ", dir,
           ": install Debian's dataset-fashion-mnist (it fills /usr/share/datasets/fashion-mnist)"
           " or pass --data DIR");
}

}  // namespace

RawSplit read_mnist_split(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "test")
    RG_THROW(InvalidArgument, "unknown MNIST split '", split, "' (use \"train\" or \"test\")");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string images_path = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(dir, prefix + "-labels-idx1-ubyte");

  RawSplit raw{read_idx(images_path), read_idx(labels_path)};
  if (raw.images.dim() != 3)
    RG_THROW(IoError, images_path, " holds extents ", raw.images.shape().str(),
             "; MNIST images are 3-dimensional (count, height, width)");
  if (raw.labels.dim() != 1)
    RG_THROW(IoError, labels_path, " holds extents ", raw.labels.shape().str(),
             "; MNIST labels are 1-dimensional (count)");
  if (raw.images.size(0) != raw.labels.size(0))
    RG_THROW(IoError, images_path, " holds ", raw.images.size(0), " images but ", labels_path,
             " holds ", raw.labels.size(0), " labels");
  const uint8_t* labels = raw.labels.data<uint8_t>();
  for (int64_t i = 0; i < raw.labels.numel(); ++i)
    if (labels[i] >= kMnistClasses)
      RG_THROW(IoError, labels_path, ": label ", int{labels[i]}, " of sample ", i,
               " is outside [0, ", kMnistClasses, ")");
  return raw;
}

// Exact in double via a 256-bin histogram: mean = sum_v c_v v / n, var = sum_v c_v (v - mean)^2 /
// n.
Normalization compute_normalization(const Tensor& images) {
  RG_CHECK(images.dtype() == DType::u8 && images.is_cpu(),
           "compute_normalization needs uint8 CPU pixels, got ", dtype_name(images.dtype()));
  RG_CHECK_GT(images.numel(), 0, "compute_normalization of an empty image set");
  int64_t count[256] = {};
  const uint8_t* pixels = images.data<uint8_t>();
  for (int64_t i = 0; i < images.numel(); ++i) ++count[pixels[i]];

  const double n = static_cast<double>(images.numel());
  double mean = 0.0;
  for (int v = 0; v < 256; ++v) mean += count[v] * (v / 255.0);
  mean /= n;
  double var = 0.0;
  for (int v = 0; v < 256; ++v) var += count[v] * (v / 255.0 - mean) * (v / 255.0 - mean);
  var /= n;
  RG_CHECK_GT(var, 0.0, "compute_normalization: every pixel has the same value, std would be 0");
  return Normalization{mean, std::sqrt(var)};
}

Dataset to_dataset(const RawSplit& raw, const Normalization& norm) {
  RG_CHECK(raw.images.dtype() == DType::u8 && raw.images.dim() == 3,
           "to_dataset needs (N, H, W) uint8 images, got ", raw.images.shape().str(), " ",
           dtype_name(raw.images.dtype()));
  RG_CHECK(raw.labels.dtype() == DType::u8 && raw.labels.dim() == 1,
           "to_dataset needs (N) uint8 labels, got ", raw.labels.shape().str());
  RG_CHECK_EQ(raw.images.size(0), raw.labels.size(0), "to_dataset: image vs label count");
  RG_CHECK_GT(norm.std, 0.0, "to_dataset: normalisation std must be positive");

  float value_of[256];
  for (int v = 0; v < 256; ++v)
    value_of[v] = static_cast<float>((v / 255.0 - norm.mean) / norm.std);

  const int64_t n = raw.images.size(0);
  Dataset d;
  d.images = Tensor::empty({n, 1, raw.images.size(1), raw.images.size(2)}, DType::f32);
  d.labels = Tensor::empty({n}, DType::i64);
  const uint8_t* pixels = raw.images.data<uint8_t>();
  float* images = d.images.data<float>();
  for (int64_t i = 0; i < raw.images.numel(); ++i) images[i] = value_of[pixels[i]];
  const uint8_t* labels = raw.labels.data<uint8_t>();
  int64_t* out_labels = d.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) out_labels[i] = labels[i];
  return d;
}

Dataset load_mnist(const std::string& dir, const std::string& split, const Normalization& norm) {
  return to_dataset(read_mnist_split(dir, split), norm);
}

Dataset synthetic_mnist(int64_t n, uint64_t seed, int64_t height, int64_t width) {
  RG_CHECK(n >= 0 && height > 0 && width > 0, "synthetic_mnist(n=", n, ", ", height, "x", width,
           "): sizes must be positive");
  const int64_t pixels = height * width;
  Generator gen(seed);
  std::vector<float> prototypes(static_cast<size_t>(kMnistClasses * pixels));
  for (float& p : prototypes) p = gen.normal();

  Dataset d;
  d.images = Tensor::empty({n, 1, height, width}, DType::f32);
  d.labels = Tensor::empty({n}, DType::i64);
  float* images = d.images.data<float>();
  int64_t* labels = d.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = static_cast<int64_t>(gen.below(kMnistClasses));
    const float* prototype = prototypes.data() + labels[i] * pixels;
    float* image = images + i * pixels;
    for (int64_t p = 0; p < pixels; ++p) image[p] = prototype[p] + gen.normal();
  }
  return d;
}

uint32_t fingerprint(const Dataset& d) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const Tensor* t : {&d.images, &d.labels}) {
    const Tensor host = t->to(Device::cpu());
    auto bytes = static_cast<const Bytef*>(host.raw_data());
    // zlib takes at most 4 GiB (uInt) per call.
    for (size_t done = 0, left = host.nbytes(); left > 0;) {
      const size_t n = std::min<size_t>(left, 1u << 30);
      crc = crc32(crc, bytes + done, static_cast<uInt>(n));
      done += n;
      left -= n;
    }
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace ringgrad::nn
