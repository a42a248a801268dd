// MNIST-format datasets (MNIST, Fashion-MNIST, ...): the four IDX files of a directory turned
// into normalised float images and int64 labels, plus a synthetic set of the same shape for
// throughput runs without data. Everything here is CPU-side and blocking; results are owned
// by the caller (Tensors share nothing with the files).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace ringgrad::nn {

constexpr int64_t kMnistClasses = 10;

struct Dataset {
  Tensor images;  // (N, 1, H, W) float32, normalised
  Tensor labels;  // (N) int64 in [0, kMnistClasses)
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// The IDX contents of one split, validated but not yet normalised.
struct RawSplit {
  Tensor images;  // (N, H, W) uint8
  Tensor labels;  // (N) uint8
};

// Pixel statistics of x / 255: images are normalised as (x / 255 - mean) / std.
struct Normalization {
  double mean = 0.0;
  double std = 1.0;
};

// Reads split "train" (train-*-ubyte) or "test" (t10k-*-ubyte) from `dir`, each file raw or
// .gz. Throws IoError for a missing file (naming it and how to get one), a malformed file,
// images that are not 3-dimensional, image and label counts that differ, or a label outside
// [0, kMnistClasses); InvalidArgument for another split name.
RawSplit read_mnist_split(const std::string& dir, const std::string& split);

// Mean and (population) standard deviation of x / 255 over every pixel of `images` (uint8).
// Compute it on the training images and apply it to both splits.
Normalization compute_normalization(const Tensor& images);

// (N, H, W) uint8 images -> (N, 1, H, W) float (x / 255 - mean) / std; labels -> int64.
Dataset to_dataset(const RawSplit& raw, const Normalization& norm);

// read_mnist_split + to_dataset.
Dataset load_mnist(const std::string& dir, const std::string& split, const Normalization& norm);

// `n` samples of shape (1, height, width), a pure function of `seed`. Learnable on purpose, so
// a training run on it must reduce the loss: class c has a fixed random prototype image and a
// sample is its label's prototype plus independent N(0, 1) noise (labels uniform in [0, 10)).
Dataset synthetic_mnist(int64_t n, uint64_t seed, int64_t height = 28, int64_t width = 28);

// CRC32 of the image and label bytes: checkpoints record it so that a run resumed on other data
// (another folder, or the same folder after its files changed) is refused instead of continuing
// at a position that means nothing there.
uint32_t fingerprint(const Dataset& d);

}  // namespace ringgrad::nn
