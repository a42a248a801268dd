// safetensors reader and writer (format in safetensors.h). The writer streams each tensor's bytes
// straight from its storage into a temp file that is renamed into place; the reader validates the
// header completely before it allocates or reads any tensor data.
#include "nn/serialize/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/unique_fd.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error \
    "safetensors data is little-endian; this reader copies it raw, so it needs a little-endian host"
#endif

namespace ringgrad::nn {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) RG_THROW(IoError, "cannot write ", path, ": ", errno_text());
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

// Reads exactly `bytes` or throws; the sizes were checked against fstat, so a short read means
// the file shrank while we read it.
void read_all(int fd, void* data, size_t bytes, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::read(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) RG_THROW(IoError, "cannot read ", path, ": ", errno_text());
    if (n == 0)
      RG_THROW(IoError, path, " ended early while reading (was it modified concurrently?)");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

// The temp file a save writes; removed on scope exit unless it was renamed into place.
class TempFile {
 public:
  explicit TempFile(const std::string& target) {
    static std::atomic<uint64_t> counter{0};
    path_ = str_cat(target, ".tmp.", ::getpid(), ".", counter++);
  }
  ~TempFile() {
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void rename_to(const std::string& target) {
    if (::rename(path_.c_str(), target.c_str()) != 0)
      RG_THROW(IoError, "cannot rename ", path_, " to ", target, ": ", errno_text());
    committed_ = true;
  }

 private:
  std::string path_;
  bool committed_ = false;
};

void fsync_directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY));
  if (fd.get() < 0)
    RG_THROW(IoError, "cannot open directory ", dir, " to fsync it: ", errno_text());
  if (::fsync(fd.get()) != 0) RG_THROW(IoError, "cannot fsync directory ", dir, ": ", errno_text());
}

// Header JSON padded with spaces to a multiple of 8, so the data section (at 8 + N) is aligned.
std::string encode_header(const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", dtype_safetensors_name(t.dtype())},
                    {"shape", t.shape().vec()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

// Parses the header, rejecting duplicate top-level keys (nlohmann would keep only the last).
nlohmann::json parse_header(const std::string& text, const std::string& path) {
  std::set<std::string> seen;
  auto reject_duplicates = [&](int depth, nlohmann::json::parse_event_t event,
                               nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
        !seen.insert(parsed.get<std::string>()).second)
      RG_THROW(IoError, path, ": header names '", parsed.get<std::string>(), "' twice");
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, reject_duplicates);
  } catch (const nlohmann::json::exception& e) {
    RG_THROW(IoError, path, ": header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) RG_THROW(IoError, path, ": header is JSON but not an object");
  return header;
}

Entry parse_entry(const std::string& name, const nlohmann::json& j, const std::string& path) {
  auto where = [&] { return str_cat(path, ": tensor '", name, "'"); };
  if (!j.is_object()) RG_THROW(IoError, where(), " is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) RG_THROW(IoError, where(), " has no \"", key, "\"");

  Entry e{name, DType::f32, Shape{}, 0, 0};
  if (!j["dtype"].is_string()) RG_THROW(IoError, where(), ": \"dtype\" is not a string");
  try {
    e.dtype = dtype_from_safetensors_name(j["dtype"].get<std::string>());
  } catch (const InvalidArgument& err) {
    RG_THROW(IoError, where(), ": ", err.what());
  }

  const auto& shape = j["shape"];
  if (!shape.is_array()) RG_THROW(IoError, where(), ": \"shape\" is not an array");
  if (shape.size() > static_cast<size_t>(Shape::kMaxDims))
    RG_THROW(IoError, where(), " has ", shape.size(), " dimensions; at most ", Shape::kMaxDims,
             " are supported");
  std::vector<int64_t> dims;
  uint64_t bytes = dtype_size(e.dtype);
  for (const auto& d : shape) {
    if (!d.is_number_unsigned())
      RG_THROW(IoError, where(), ": shape ", shape.dump(),
               " is not a list of non-negative integers");
    const uint64_t extent = d.get<uint64_t>();
    if (extent > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, extent, &bytes))
      RG_THROW(IoError, where(), ": shape ", shape.dump(), " is too large");
    dims.push_back(static_cast<int64_t>(extent));
  }
  e.shape = Shape(dims);

  const auto& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    RG_THROW(IoError, where(), ": \"data_offsets\" ", offsets.dump(),
             " is not [begin, end] with non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end < e.begin)
    RG_THROW(IoError, where(), " has reversed data_offsets [", e.begin, ", ", e.end, "]");
  if (e.end - e.begin != bytes)
    RG_THROW(IoError, where(), ": dtype ", dtype_safetensors_name(e.dtype), " and shape ",
             e.shape.str(), " need ", bytes, " bytes but data_offsets [", e.begin, ", ", e.end,
             "] span ", e.end - e.begin);
  return e;
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& j,
                                                  const std::string& path) {
  if (!j.is_object()) RG_THROW(IoError, path, ": \"__metadata__\" is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      RG_THROW(IoError, path, ": metadata value of '", key, "' is not a string");
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// The reference format requires the tensors to tile the data section exactly: no holes, no
// overlaps, nothing after the last one (so a file cannot hide a second payload).
void check_layout(std::vector<Entry>& entries, uint64_t data_bytes, const std::string& path) {
  for (const Entry& e : entries)
    if (e.end > data_bytes)
      RG_THROW(IoError, path, " is truncated: tensor '", e.name, "' needs bytes [", e.begin, ", ",
               e.end, ") of the data section but the file has only ", data_bytes);
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t cursor = 0;
  for (const Entry& e : entries) {
    if (e.begin != cursor)
      RG_THROW(IoError, path, ": tensor '", e.name, "' starts at byte ", e.begin,
               " of the data section but the previous tensor ends at ", cursor,
               " (tensors must cover the data without holes or overlaps)");
    cursor = e.end;
  }
  if (cursor != data_bytes)
    RG_THROW(IoError, path, ": ", data_bytes - cursor, " bytes after the last tensor (ends at ",
             cursor, " of a ", data_bytes, "-byte data section)");
}

}  // namespace

bool TensorFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const auto& p) { return p.first == name; });
}

const Tensor& TensorFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::string some;
  for (size_t i = 0; i < tensors.size() && i < 8; ++i) some += (i ? ", " : "") + tensors[i].first;
  RG_THROW(Error, "no tensor '", name, "' in ", path, " (it holds ", tensors.size(), " tensors",
           tensors.empty() ? "" : ": ", some, tensors.size() > 8 ? ", ..." : "", ")");
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  NamedTensors host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == kMetadataKey)
      RG_THROW(InvalidArgument, "save_safetensors(", path, "): tensor name '", name,
               "' is empty or reserved");
    if (!names.insert(name).second)
      RG_THROW(InvalidArgument, "save_safetensors(", path, "): tensor name '", name,
               "' appears twice");
    RG_CHECK(t.defined(), "save_safetensors(", path, "): tensor '", name, "' is undefined");
    host.emplace_back(name, t.to(Device::cpu()));
  }

  const std::string header = encode_header(host, metadata);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));

  // The rename below would put a regular file in the place of whatever `path` is.
  struct stat target {};
  if (::stat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode))
    RG_THROW(IoError, "not writing ", path, ": it exists and is not a regular file (a device, ",
             "a FIFO, a folder?), which a file written in its place would replace");
  TempFile tmp(path);
  UniqueFd fd(::open(tmp.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) RG_THROW(IoError, "cannot create ", tmp.path(), ": ", errno_text());
  write_all(fd.get(), length, sizeof(length), tmp.path());
  write_all(fd.get(), header.data(), header.size(), tmp.path());
  for (const auto& [name, t] : host) write_all(fd.get(), t.raw_data(), t.nbytes(), tmp.path());
  if (::fsync(fd.get()) != 0) RG_THROW(IoError, "cannot fsync ", tmp.path(), ": ", errno_text());
  if (fd.close() != 0) RG_THROW(IoError, "cannot close ", tmp.path(), ": ", errno_text());
  tmp.rename_to(path);
  fsync_directory_of(path);
}

TensorFile load_safetensors(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) RG_THROW(IoError, "cannot open ", path, ": ", errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) RG_THROW(IoError, "cannot stat ", path, ": ", errno_text());
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8)
    RG_THROW(IoError, path, " has ", file_bytes,
             " bytes, fewer than the 8-byte header length of a safetensors file");

  unsigned char length[8];
  read_all(fd.get(), length, sizeof(length), path);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (header_bytes > kMaxHeaderBytes)
    RG_THROW(IoError, path, ": header length ", header_bytes, " exceeds the ", kMaxHeaderBytes,
             "-byte limit (not a safetensors file?)");
  if (header_bytes > file_bytes - 8)
    RG_THROW(IoError, path, ": header length ", header_bytes, " is larger than the ",
             file_bytes - 8, " bytes after it (truncated, or not a safetensors file)");

  std::string text(header_bytes, '\0');
  read_all(fd.get(), text.data(), text.size(), path);
  const nlohmann::json header = parse_header(text, path);

  TensorFile file;
  file.path = path;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey)
      file.metadata = parse_metadata(value, path);
    else
      entries.push_back(parse_entry(name, value, path));
  }
  check_layout(entries, file_bytes - 8 - header_bytes, path);

  file.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    read_all(fd.get(), t.raw_data(), t.nbytes(), path);
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

}  // namespace ringgrad::nn
