// IDX reader (format in idx.h) on zlib's gz* API, which reads gzip and plain files alike. The
// header is validated before the data tensor is allocated; the data is read straight into it.
#include "nn/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

namespace ringgrad::nn {

namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;
constexpr uint64_t kMaxDataBytes = uint64_t{1} << 34;  // 16 GiB: more means a corrupt header
constexpr uint64_t kReadPiece = uint64_t{64} << 20;

// A gzFile, closed on scope exit.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_)
      RG_THROW(IoError, "cannot open ", path, ": ", errno ? std::strerror(errno) : "out of memory");
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to `bytes`; returns fewer only at the end of the input. Corrupt gzip data throws.
  uint64_t read_up_to(void* dst, uint64_t bytes) {
    char* p = static_cast<char*>(dst);
    uint64_t done = 0;
    while (done < bytes) {
      const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(bytes - done, INT_MAX));
      const int n = gzread(file_, p + done, chunk);
      if (n < 0) {
        int code = Z_OK;
        const char* message = gzerror(file_, &code);
        RG_THROW(IoError, "cannot read ", path_, ": ",
                 code == Z_ERRNO ? std::strerror(errno) : message);
      }
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    return done;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

uint32_t big_endian_u32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

Tensor read_idx(const std::string& path) {
  GzFile file(path);
  unsigned char magic[4];
  const uint64_t magic_bytes = file.read_up_to(magic, sizeof(magic));
  if (magic_bytes < sizeof(magic))
    RG_THROW(IoError, path, " is truncated: ", magic_bytes,
             " bytes, fewer than the 4-byte IDX magic");
  if (magic[0] != 0 || magic[1] != 0)
    RG_THROW(IoError, path, " is not an IDX file: magic starts with 0x", std::hex, int{magic[0]},
             " 0x", int{magic[1]}, " instead of 0x00 0x00");
  if (magic[2] != kTypeUnsignedByte)
    RG_THROW(IoError, path, ": IDX element type 0x", std::hex, int{magic[2]},
             " is not supported; only 0x08 (unsigned byte) is");
  const int ndims = magic[3];
  if (ndims < 1 || ndims > Shape::kMaxDims)
    RG_THROW(IoError, path, ": IDX header declares ", ndims, " dimensions; 1 to ", Shape::kMaxDims,
             " are supported");

  unsigned char extents[4 * Shape::kMaxDims];
  const uint64_t extent_bytes = file.read_up_to(extents, 4 * ndims);
  if (extent_bytes < 4u * ndims)
    RG_THROW(IoError, path, " is truncated: the header declares ", ndims, " dimensions (",
             4 * ndims, " bytes of extents) but only ", extent_bytes, " bytes follow the magic");
  std::vector<int64_t> dims;
  uint64_t data_bytes = 1;
  for (int d = 0; d < ndims; ++d) {
    dims.push_back(big_endian_u32(extents + 4 * d));
    if (__builtin_mul_overflow(data_bytes, static_cast<uint64_t>(dims.back()), &data_bytes) ||
        data_bytes > kMaxDataBytes)
      RG_THROW(IoError, path, ": IDX extents ", Shape(dims).str(), "... exceed ", kMaxDataBytes,
               " bytes (corrupt header?)");
  }

  // Read in pieces, so that memory follows the bytes that are there, not what a header claims:
  // a few bytes can claim 16 GiB (and gzip's size is not known before the end).
  std::vector<unsigned char> data;
  while (data.size() < data_bytes) {
    const size_t have = data.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(data_bytes - have, kReadPiece));
    data.resize(have + want);
    const uint64_t got = file.read_up_to(data.data() + have, want);
    data.resize(have + got);
    if (got < want) break;
  }
  if (data.size() < data_bytes)
    RG_THROW(IoError, path, " is truncated: extents ", Shape(dims).str(), " need ", data_bytes,
             " data bytes but only ", data.size(), " follow the header");
  Tensor t = Tensor::empty(Shape(dims), DType::u8);
  if (data_bytes) std::memcpy(t.raw_data(), data.data(), data_bytes);
  unsigned char extra;
  if (file.read_up_to(&extra, 1) != 0)
    RG_THROW(IoError, path, " has bytes after the ", data_bytes, " data bytes its extents ",
             t.shape().str(), " describe (wrong file or corrupt header?)");
  return t;
}

}  // namespace ringgrad::nn
