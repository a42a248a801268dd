// Tests for nn/serialize/safetensors: a file built byte by byte from the format description,
// round trips of every dtype, each kind of corrupt input, and the atomic replace on save.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "core/cuda_memory.h"
#include "nn/serialize/safetensors.h"
#include "tests/nn/temp_dir.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::nn;
using namespace ringgrad::nn::testing;  // TempDir, read_bytes, write_bytes, message_of

namespace {

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

template <class T>
std::string raw_bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A file as the format description spells it: u64 header length, header, data section.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

// fc.weight (2, 3) F32 at [0, 24), fc.bias (2) F32 at [24, 32): 32 data bytes.
const std::string kTwoTensorHeader =
    R"({"fc.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("fc.bias":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}})";
const std::string kTwoTensorData = raw_bytes(std::vector<float>{1, 2, 3, 4, 5, 6, -1, -2});

// Loads `bytes` written to a file and returns the IoError message, which must name the file.
std::string load_error(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("corrupt.safetensors");
  write_bytes(path, bytes);
  std::string message = message_of<IoError>([&] { load_safetensors(path); });
  CHECK_MESSAGE(message.find(path) != std::string::npos, message);
  return message;
}

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

}  // namespace

TEST_CASE(
    "safetensors: a file written byte by byte from the spec loads with names, shapes, values") {
  TempDir dir;
  // Header listed out of data order, not 8-aligned, with trailing space padding and metadata.
  const std::string header = R"({"__metadata__":{"format":"pt","epoch":"3"},)"
                             R"("bias":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
                             R"("weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("step":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)"
                             R"("empty":{"dtype":"F16","shape":[0,4],"data_offsets":[40,40]}}   )";
  const std::string data = raw_bytes(std::vector<float>{0.5f, -1.25f, 3, 4, 5, 6, 7.5f, -8}) +
                           raw_bytes(std::vector<int64_t>{1234567890123});
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, safetensors_bytes(header, data));

  TensorFile file = load_safetensors(path);
  REQUIRE(file.tensors.size() == 4);
  CHECK(file.tensors[0].first == "weight");  // data order, not header order
  CHECK(file.tensors[1].first == "bias");
  CHECK(file.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"epoch", "3"}});

  const Tensor& weight = file.at("weight");
  CHECK(weight.dtype() == DType::f32);
  CHECK(weight.shape() == Shape{2, 3});
  CHECK(weight.to_vector<float>() == std::vector<float>{0.5f, -1.25f, 3, 4, 5, 6});
  CHECK(file.at("bias").to_vector<float>() == std::vector<float>{7.5f, -8});
  CHECK(file.at("step").shape() == Shape{});
  CHECK(file.at("step").to_vector<int64_t>() == std::vector<int64_t>{1234567890123});
  CHECK(file.at("empty").shape() == Shape{0, 4});
  CHECK(file.at("empty").dtype() == DType::f16);

  const std::string missing = message_of<Error>([&] { file.at("fc.weight"); });
  CHECK(contains(missing, "'fc.weight'"));
  CHECK(contains(missing, path));
}

TEST_CASE("safetensors: every dtype round-trips bit for bit with metadata") {
  TempDir dir;
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                          DType::i32, DType::i64, DType::u8};
  const Shape shapes[] = {Shape{2, 3},       Shape{5},    Shape{}, Shape{0, 4},
                          Shape{1, 2, 3, 1}, Shape{3, 1}, Shape{7}};
  NamedTensors saved;
  for (size_t k = 0; k < std::size(dtypes); ++k) {
    Tensor t = Tensor::empty(shapes[k], dtypes[k]);
    auto* bytes = static_cast<unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i)
      bytes[i] = static_cast<unsigned char>(k * 31 + i * 7 + 1);
    saved.emplace_back(str_cat("layer", k, ".", dtype_name(dtypes[k])), t);
  }
  const std::map<std::string, std::string> metadata{{"epoch", "7"}, {"note", "\"quoted\" ü"}};
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, saved, metadata);

  const std::string bytes = read_bytes(path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  CHECK(header_bytes % 8 == 0);  // data section 8-byte aligned
  CHECK(bytes[8] == '{');

  TensorFile loaded = load_safetensors(path);
  CHECK(loaded.metadata == metadata);
  REQUIRE(loaded.tensors.size() == saved.size());
  for (size_t k = 0; k < saved.size(); ++k) {
    CAPTURE(saved[k].first);
    const auto& [name, t] = loaded.tensors[k];  // writer order is data order
    CHECK(name == saved[k].first);
    CHECK(t.dtype() == saved[k].second.dtype());
    CHECK(t.shape() == saved[k].second.shape());
    REQUIRE(t.nbytes() == saved[k].second.nbytes());
    CHECK(std::memcmp(t.raw_data(), saved[k].second.raw_data(), t.nbytes()) == 0);
  }
}

TEST_CASE("safetensors: CUDA tensors are saved from host copies") {
  if (cuda_device_count() == 0) {
    return ringgrad::testing::skip_test("no CUDA device: " + cuda_unavailable_reason());
  }
  TempDir dir;
  Tensor host = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  save_safetensors(dir.file("gpu.safetensors"), {{"w", host.to(Device::cuda())}});
  CHECK(load_safetensors(dir.file("gpu.safetensors")).at("w").to_vector<float>() ==
        host.to_vector<float>());
}

TEST_CASE("safetensors: truncated files fail naming the file") {
  TempDir dir;
  const std::string whole = safetensors_bytes(kTwoTensorHeader, kTwoTensorData);
  const size_t header_end = 8 + kTwoTensorHeader.size();
  for (size_t cut : {size_t{0}, size_t{5}, size_t{8}, header_end / 2, header_end - 1, header_end,
                     header_end + 10, whole.size() - 1}) {
    CAPTURE(cut);
    const std::string message = load_error(dir, whole.substr(0, cut));
    if (cut < 8) CHECK(contains(message, "fewer than the 8-byte header length"));
    if (cut >= 8 && cut < header_end) CHECK(contains(message, "header length"));
    if (cut >= header_end) CHECK(contains(message, "is truncated: tensor 'f"));
  }
  CHECK(contains(
      load_error(dir, whole.substr(0, whole.size() - 1)),
      "tensor 'fc.bias' needs bytes [24, 32) of the data section but the file has only 31"));
}

TEST_CASE("safetensors: malformed headers and layouts fail with a specific message") {
  TempDir dir;
  auto with_header = [&](const std::string& header) {
    return load_error(dir, safetensors_bytes(header, kTwoTensorData));
  };
  CHECK(contains(load_error(dir, u64_le(uint64_t{1} << 40) + "{}"), "exceeds"));
  CHECK(contains(load_error(dir, u64_le(500) + kTwoTensorHeader), "larger than"));
  CHECK(contains(with_header(R"({"fc.weight": {"dtype": "F32",)"), "not valid JSON"));
  CHECK(contains(with_header("[1, 2, 3]"), "not an object"));
  CHECK(contains(with_header(R"({"w":{"dtype":"Q4","shape":[8],"data_offsets":[0,32]}})"),
                 "unsupported dtype 'Q4'"));
  CHECK(contains(with_header(R"({"w":{"shape":[8],"data_offsets":[0,32]}})"), "has no \"dtype\""));
  CHECK(
      contains(with_header(R"({"w":{"dtype":"F32","data_offsets":[0,32]}})"), "has no \"shape\""));
  CHECK(contains(with_header(R"({"w":{"dtype":"F32","shape":[8]}})"), "has no \"data_offsets\""));
  CHECK(contains(with_header(R"({"w":{"dtype":"F32","shape":[-8],"data_offsets":[0,32]}})"),
                 "non-negative"));
  CHECK(contains(with_header(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[32,0]}})"),
                 "reversed"));
  CHECK(contains(with_header(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,32]}})"),
                 "need 24 bytes but data_offsets [0, 32] span 32"));
  CHECK(contains(with_header(R"({"w":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})"),
                 "is truncated: tensor 'w' needs bytes [0, 1000)"));
  CHECK(contains(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"F32","shape":[6],"data_offsets":[8,32]}})"),
                 "names 'a' twice"));
  CHECK(contains(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[5],"data_offsets":[12,32]}})"),
                 "holes or overlaps"));
  CHECK(contains(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
                 "16 bytes after the last tensor"));
  CHECK(contains(with_header(R"({"__metadata__":{"epoch":3},)"
                             R"("a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})"),
                 "metadata value of 'epoch' is not a string"));
  CHECK(contains(message_of<IoError>([&] { load_safetensors(dir.file("absent.safetensors")); }),
                 "No such file"));
}

TEST_CASE("safetensors: save replaces the file atomically and leaves no temp file") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  save_safetensors(path, {{"big", Tensor::full({1000}, 1.0)}}, {{"epoch", "1"}});

  // A reader that opened the old file keeps reading the old bytes: the save renamed a new inode
  // into place instead of rewriting this one.
  const std::string old_bytes = read_bytes(path);
  const int old_fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(old_fd >= 0);
  save_safetensors(path, {{"small", Tensor::from_vector<float>({2, 3}, {2})}}, {{"epoch", "2"}});
  std::string still_old(old_bytes.size(), '\0');
  CHECK(::pread(old_fd, still_old.data(), still_old.size(), 0) ==
        static_cast<ssize_t>(old_bytes.size()));
  ::close(old_fd);
  CHECK(still_old == old_bytes);

  TensorFile now = load_safetensors(path);  // would fail on leftover bytes of the bigger file
  CHECK(now.metadata.at("epoch") == "2");
  CHECK(now.at("small").to_vector<float>() == std::vector<float>{2, 3});
  CHECK_FALSE(now.contains("big"));

  // A rejected save leaves the previous file untouched.
  CHECK_THROWS_AS(save_safetensors(path, {{"x", Tensor::zeros({1})}, {"x", Tensor::zeros({1})}}),
                  InvalidArgument);
  CHECK(load_safetensors(path).contains("small"));
  // A save that cannot create its temp file names the path and the errno text.
  const std::string nowhere = dir.file("no-such-dir/ckpt.safetensors");
  const std::string message = message_of<IoError>([&] {
    save_safetensors(nowhere, {{"w", Tensor::zeros({1})}});
  });
  CHECK(contains(message, nowhere));
  CHECK(contains(message, "No such file"));

  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    names.push_back(entry.path().filename().string());
  CHECK(names == std::vector<std::string>{"ckpt.safetensors"});
}
