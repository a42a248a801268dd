// safetensors files: named tensors plus string metadata, the checkpoint format of ringgrad and
// the one PyTorch / Hugging Face read, so weights move between them. Layout: u64 little-endian
// header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {str: str}}, then the raw little-endian data (offsets relative to byte 8 + N).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ringgrad::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What load_safetensors returns. Tensors are CPU tensors in the order of their data offsets.
struct TensorFile {
  std::string path;  // the file they were read from, for error messages
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  // Throws Error naming the missing key and the file.
  const Tensor& at(const std::string& name) const;
};

// Writes `tensors` in the given order, the header padded with spaces so the data section starts
// 8-byte aligned (as the reference writer does). CUDA tensors are copied to the host first.
// Atomic: the bytes go to "<path>.tmp.<pid>.<n>" in the same directory, are fsync'ed, renamed
// over `path`, and the directory is fsync'ed; readers see the old file or the new one, never a
// mix. Throws InvalidArgument for empty, duplicate or reserved ("__metadata__") names, and
// IoError naming the path and errno text on any I/O failure (the temp file is removed).
// Blocking; safe to call from several threads on different paths.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates the whole file. Any problem — missing or short file, absurd header length
// (> 100 MB), JSON that is invalid or not an object, an entry without dtype/shape/data_offsets,
// an unknown dtype, offsets reversed, overlapping, leaving holes or past the end ("is
// truncated"), shape*dtype size differing from the offsets, duplicate names, bytes after the last
// tensor — throws IoError whose message names the file and the tensor. Blocking.
TensorFile load_safetensors(const std::string& path);

}  // namespace ringgrad::nn
