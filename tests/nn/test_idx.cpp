// Tests for nn/data/idx and nn/data/mnist: IDX files written here (raw and gzip), each malformed
// case, MNIST-format directories and normalisation, the synthetic set, and the real datasets
// when they are installed.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>

#include "nn/data/idx.h"
#include "nn/data/mnist.h"
#include "tests/nn/temp_dir.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::nn;
using namespace ringgrad::nn::testing;  // TempDir, read_bytes, write_bytes, message_of

namespace {

// IDX bytes as the format spells them: 0 0 type ndims, big-endian u32 extents, data.
std::string idx_bytes(const std::vector<uint32_t>& dims, const std::string& data,
                      uint8_t type = 0x08) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  return s + data;
}

// Element i is (i * 7 + seed) mod 256.
std::string pattern(size_t n, int seed = 0) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + seed) & 0xff);
  return s;
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

std::string idx_error(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("bad-idx3-ubyte");
  write_bytes(path, bytes);
  std::string message = message_of<IoError>([&] { read_idx(path); });
  CHECK_MESSAGE(contains(message, path), message);
  return message;
}

// A split of `n` images of h x w with labels i % 10, in `dir`, raw or gzipped.
void write_split(const TempDir& dir, const std::string& prefix, uint32_t n, uint32_t h, uint32_t w,
                 bool gzip, uint32_t label_count) {
  std::string labels(label_count, '\0');
  for (uint32_t i = 0; i < label_count; ++i) labels[i] = static_cast<char>(i % 10);
  const std::string images_path = dir.file(prefix + "-images-idx3-ubyte" + (gzip ? ".gz" : ""));
  const std::string labels_path = dir.file(prefix + "-labels-idx1-ubyte" + (gzip ? ".gz" : ""));
  const std::string images = idx_bytes({n, h, w}, pattern(size_t{n} * h * w, 3));
  const std::string label_file = idx_bytes({label_count}, labels);
  if (gzip) {
    write_gzip(images_path, images);
    write_gzip(labels_path, label_file);
  } else {
    write_bytes(images_path, images);
    write_bytes(labels_path, label_file);
  }
}

}  // namespace

TEST_CASE("idx: raw and gzip files read to the same u8 tensor") {
  TempDir dir;
  const std::string bytes = idx_bytes({3, 2, 4}, pattern(24));
  write_bytes(dir.file("raw-idx3-ubyte"), bytes);
  write_gzip(dir.file("packed-idx3-ubyte.gz"), bytes);
  for (const char* name : {"raw-idx3-ubyte", "packed-idx3-ubyte.gz"}) {
    CAPTURE(name);
    Tensor t = read_idx(dir.file(name));
    CHECK(t.dtype() == DType::u8);
    CHECK(t.shape() == Shape{3, 2, 4});
    const std::string expected = pattern(24);
    CHECK(t.to_vector<uint8_t>() == std::vector<uint8_t>(expected.begin(), expected.end()));
  }
  write_bytes(dir.file("labels-idx1-ubyte"), idx_bytes({5}, "\x01\x02\x03\x04\x05"));
  CHECK(read_idx(dir.file("labels-idx1-ubyte")).to_vector<uint8_t>() ==
        std::vector<uint8_t>{1, 2, 3, 4, 5});
}

TEST_CASE("idx: malformed files fail naming the file") {
  TempDir dir;
  std::string wrong_magic = idx_bytes({4}, pattern(4));
  wrong_magic[0] = 0x1f;
  CHECK(contains(idx_error(dir, wrong_magic), "not an IDX file"));
  CHECK(contains(idx_error(dir, idx_bytes({4}, pattern(16), 0x0d)), "type 0xd is not supported"));
  CHECK(contains(idx_error(dir, idx_bytes({}, "")), "declares 0 dimensions"));
  CHECK(contains(idx_error(dir, std::string("\0\0", 2)), "fewer than the 4-byte IDX magic"));
  // Three dimensions declared, two extents present.
  CHECK(contains(idx_error(dir, idx_bytes({2, 3, 4}, "").substr(0, 12)),
                 "declares 3 dimensions (12 bytes of extents) but only 8 bytes"));
  CHECK(contains(idx_error(dir, idx_bytes({2, 3, 4}, pattern(20))),
                 "need 24 data bytes but only 20 follow"));
  CHECK(contains(idx_error(dir, idx_bytes({2, 3, 4}, pattern(25))), "has bytes after the 24"));
  CHECK(contains(message_of<IoError>([&] { read_idx(dir.file("absent")); }), "cannot open"));

  // A gzip stream cut in half: either truncated data or a gzip error, never a silent success.
  write_gzip(dir.file("whole.gz"), idx_bytes({64, 64}, pattern(4096)));
  const std::string packed = read_bytes(dir.file("whole.gz"));
  idx_error(dir, packed.substr(0, packed.size() / 2));
}

TEST_CASE("mnist: splits are read from raw and .gz files and validated") {
  TempDir dir;
  write_split(dir, "train", 12, 4, 3, /*gzip=*/false, 12);
  write_split(dir, "t10k", 5, 4, 3, /*gzip=*/true, 5);

  RawSplit train = read_mnist_split(dir.path().string(), "train");
  CHECK(train.images.shape() == Shape{12, 4, 3});
  CHECK(train.labels.to_vector<uint8_t>()[11] == 1);
  RawSplit test = read_mnist_split(dir.path().string(), "test");
  CHECK(test.images.shape() == Shape{5, 4, 3});

  const Normalization norm{0.25, 0.5};
  Dataset d = to_dataset(test, norm);
  CHECK(d.size() == 5);
  CHECK(d.images.shape() == Shape{5, 1, 4, 3});
  CHECK(d.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  const auto pixels = test.images.to_vector<uint8_t>();
  const auto values = d.images.to_vector<float>();
  for (size_t i = 0; i < pixels.size(); ++i)
    REQUIRE(values[i] == doctest::Approx((pixels[i] / 255.0 - 0.25) / 0.5));

  CHECK_THROWS_AS(read_mnist_split(dir.path().string(), "validation"), InvalidArgument);
}

TEST_CASE("mnist: inconsistent or missing files fail with what to do") {
  TempDir dir;
  const std::string root = dir.path().string();
  std::string missing = message_of<IoError>([&] { read_mnist_split(root, "test"); });
  CHECK(contains(missing, "no t10k-images-idx3-ubyte[.gz] in " + root));
  CHECK(contains(missing, "dataset-fashion-mnist"));

  write_split(dir, "train", 6, 2, 2, false, 5);
  CHECK(contains(message_of<IoError>([&] { read_mnist_split(root, "train"); }),
                 "holds 6 images but"));

  write_split(dir, "train", 3, 2, 2, false, 3);
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_bytes({3}, "\x01\x0a\x02"));
  CHECK(contains(message_of<IoError>([&] { read_mnist_split(root, "train"); }),
                 "label 10 of sample 1 is outside [0, 10)"));

  write_bytes(dir.file("train-images-idx3-ubyte"), idx_bytes({3, 4}, pattern(12)));
  CHECK(contains(message_of<IoError>([&] { read_mnist_split(root, "train"); }), "3-dimensional"));
}

TEST_CASE("mnist: normalisation statistics are the population mean and std of x / 255") {
  // Pixels 0, 0, 255, 255 -> x/255 = 0, 0, 1, 1: mean 0.5, std 0.5.
  Normalization n =
      compute_normalization(Tensor::from_vector<uint8_t>({0, 255, 0, 255}, {1, 2, 2}));
  CHECK(n.mean == doctest::Approx(0.5));
  CHECK(n.std == doctest::Approx(0.5));
  // 51 = 0.2 * 255: values 0.2 and 0.6 -> mean 0.4, std 0.2.
  n = compute_normalization(Tensor::from_vector<uint8_t>({51, 153}, {1, 1, 2}));
  CHECK(n.mean == doctest::Approx(0.4));
  CHECK(n.std == doctest::Approx(0.2));
  CHECK_THROWS_AS(compute_normalization(Tensor::full({1, 2, 2}, 7, DType::u8)), Error);
}

TEST_CASE("mnist: the synthetic set is deterministic, in range and learnable") {
  Dataset a = synthetic_mnist(1000, 42);
  Dataset b = synthetic_mnist(1000, 42);
  Dataset c = synthetic_mnist(1000, 43);
  CHECK(a.images.shape() == Shape{1000, 1, 28, 28});
  CHECK(a.images.to_vector<float>() == b.images.to_vector<float>());
  CHECK(a.labels.to_vector<int64_t>() == b.labels.to_vector<int64_t>());
  CHECK(a.images.to_vector<float>() != c.images.to_vector<float>());

  // Nearest class mean, fitted on the first half, must classify the second half well.
  const int64_t pixels = 28 * 28, half = 500;
  const float* x = a.images.data<float>();
  const int64_t* y = a.labels.data<int64_t>();
  std::vector<double> mean(kMnistClasses * pixels, 0.0);
  std::vector<int> count(kMnistClasses, 0);
  for (int64_t i = 0; i < half; ++i) {
    REQUIRE((y[i] >= 0 && y[i] < kMnistClasses));
    ++count[y[i]];
    for (int64_t p = 0; p < pixels; ++p) mean[y[i] * pixels + p] += x[i * pixels + p];
  }
  for (int64_t k = 0; k < kMnistClasses; ++k)
    for (int64_t p = 0; p < pixels; ++p) mean[k * pixels + p] /= std::max(count[k], 1);
  int correct = 0;
  for (int64_t i = half; i < 2 * half; ++i) {
    int64_t best = 0;
    double best_distance = INFINITY;
    for (int64_t k = 0; k < kMnistClasses; ++k) {
      double distance = 0;
      for (int64_t p = 0; p < pixels; ++p)
        distance += std::pow(x[i * pixels + p] - mean[k * pixels + p], 2);
      if (distance < best_distance) best_distance = distance, best = k;
    }
    correct += best == y[i];
  }
  CHECK(correct > 0.9 * half);
}

namespace {
// Real datasets: their published sizes, and for MNIST the well-known (0.1307, 0.3081) statistics.
void check_real_dataset(const std::string& dir, double mean, double std) {
  if (!std::filesystem::is_directory(dir))
    return ringgrad::testing::skip_test("no MNIST-format data in " + dir);
  RawSplit train = read_mnist_split(dir, "train");
  RawSplit test = read_mnist_split(dir, "test");
  CHECK(train.images.shape() == Shape{60000, 28, 28});
  CHECK(test.images.shape() == Shape{10000, 28, 28});
  std::vector<int64_t> per_class(kMnistClasses, 0);
  for (uint8_t label : test.labels.to_vector<uint8_t>()) ++per_class[label];
  for (int64_t k = 0; k < kMnistClasses; ++k) CHECK(per_class[k] > 800);
  const Normalization n = compute_normalization(train.images);
  CHECK(n.mean == doctest::Approx(mean).epsilon(0.002));
  CHECK(n.std == doctest::Approx(std).epsilon(0.002));
}
}  // namespace

TEST_CASE("mnist: the installed Fashion-MNIST (Debian's dataset-fashion-mnist) loads completely") {
  check_real_dataset("/usr/share/datasets/fashion-mnist", 0.2860, 0.3530);
}

TEST_CASE("mnist: the real MNIST in ../shared/data/mnist loads completely") {
  check_real_dataset("../shared/data/mnist", 0.1307, 0.3081);
}
