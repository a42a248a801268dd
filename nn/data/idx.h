// IDX files, the container of the MNIST family: 0x00 0x00 <type> <ndims>, then ndims big-endian
// u32 extents, then the elements row-major. Only type 0x08 (unsigned byte), which every MNIST-
// format image and label file uses, is supported. Raw and gzip-compressed files read the same.
#pragma once
#include <string>

#include "core/tensor.h"

namespace ringgrad::nn {

// Reads the whole file at `path` (raw or .gz, detected from the content) into a u8 CPU tensor
// shaped like the file's extents. Throws IoError naming the file for: a missing or unreadable
// file, a bad magic, an unsupported element type, 0 or more than Shape::kMaxDims dimensions, a
// header or data section shorter than the extents say (with expected and actual byte counts),
// or bytes after the data. Blocking.
Tensor read_idx(const std::string& path);

}  // namespace ringgrad::nn
