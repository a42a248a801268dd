// Cross-rank checks and broadcasts of named tensors. Each rank describes its entries as text
// ("name dtype [shape]" per line); the descriptions are all-gathered (lengths first, then the
// bytes padded to the longest), so every rank can compare all of them and report the same
// first difference.
#include "comm/reducer/model_sync.h"

#include <sstream>

namespace ringgrad::comm {

namespace {

struct Entry {
  std::string name, description;  // description: "float32 [10, 64]"
};

std::string describe(const NamedTensorRefs& entries) {
  std::string text;
  for (auto& [name, t] : entries)
    text += name + " " + dtype_name(t.dtype()) + " " + t.shape().str() + "\n";
  return text;
}

std::vector<Entry> parse(const std::string& text) {
  std::vector<Entry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    out.push_back(
        {line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1)});
  }
  return out;
}

// All ranks' texts, indexed by rank. They travel on `device` (the model's), since the nccl
// backend moves device tensors only.
std::vector<std::string> allgather_text(ProcessGroup& group, const std::string& mine,
                                        Device device) {
  const int world = group.size();
  Tensor length = Tensor::from_vector<int64_t>({static_cast<int64_t>(mine.size())}, {1}).to(device);
  Tensor lengths = Tensor::empty({world}, DType::i64, device);
  group.allgather(length, lengths)->wait();
  const std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  int64_t longest = 0;
  for (int64_t n : sizes) longest = std::max(longest, n);
  Tensor padded = Tensor::zeros({longest}, DType::u8);
  std::copy(mine.begin(), mine.end(), padded.data<uint8_t>());
  Tensor all = Tensor::empty({world * longest}, DType::u8, device);
  group.allgather(padded.to(device), all)->wait();
  const std::vector<uint8_t> gathered = all.to_vector<uint8_t>();
  std::vector<std::string> texts;
  const char* bytes = reinterpret_cast<const char*>(gathered.data());
  for (int r = 0; r < world; ++r)
    texts.emplace_back(bytes + r * longest, static_cast<size_t>(sizes[r]));
  return texts;
}

}  // namespace

void check_same_across_ranks(ProcessGroup& group, const NamedTensorRefs& entries,
                             const std::string& what) {
  if (group.size() == 1) return;
  std::vector<std::vector<Entry>> ranks;
  const Device device = entries.empty() ? Device::cpu() : entries[0].second.device();
  for (const std::string& text : allgather_text(group, describe(entries), device))
    ranks.push_back(parse(text));
  const std::vector<Entry>& ref = ranks[0];
  for (size_t r = 1; r < ranks.size(); ++r) {
    const std::vector<Entry>& other = ranks[r];
    for (size_t i = 0; i < std::min(ref.size(), other.size()); ++i) {
      if (ref[i].name != other[i].name)
        RG_THROW(InvalidArgument, what, " differ across ranks: entry ", i, " is '", ref[i].name,
                 "' on rank 0 but '", other[i].name, "' on rank ", r,
                 ": every rank must build the same model");
      if (ref[i].description != other[i].description)
        RG_THROW(InvalidArgument, what, " differ across ranks: '", ref[i].name, "' is ",
                 ref[i].description, " on rank 0 but ", other[i].description, " on rank ", r,
                 ": every rank must build the same model");
    }
    if (ref.size() != other.size())
      RG_THROW(InvalidArgument, what, " differ across ranks: rank 0 has ", ref.size(),
               " entries, rank ", r, " has ", other.size(), "; first extra one: '",
               ref.size() > other.size() ? ref[other.size()].name : other[ref.size()].name, "'");
  }
}

void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  if (group.size() == 1) return;
  BroadcastOptions opts;
  opts.root = root;
  std::vector<WorkPtr> works;
  for (const Tensor& t : tensors) works.push_back(group.broadcast(t, opts));
  for (auto& w : works) w->wait();
}

}  // namespace ringgrad::comm
