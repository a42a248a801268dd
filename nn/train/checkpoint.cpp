// Checkpoint save and load, and the checks that a resumed run is the run that was saved.
#include "nn/train/checkpoint.h"

#include <charconv>
#include <cstdio>

#include "kernels/ops.h"
#include "nn/serialize/safetensors.h"

namespace ringgrad::nn {

namespace {

const char kMomentumPrefix[] = "optimizer.momentum_buffer.";
const char kOptimizerPrefix[] = "optimizer.";
const char kScaleKey[] = "grad_scaler.scale";
const char kGrowthTrackerKey[] = "grad_scaler.growth_tracker";
// Hex CRC32 of the training images and labels. (The earlier "dataset_crc32" covered the labels
// alone; files holding only that key are not checked for their data.)
const char kDataCrcKey[] = "data_crc32";
const char kFormat[] = "ringgrad-checkpoint-1";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// 17 significant digits: the double reads back bit for bit.
std::string exact_double(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", v);
  return text;
}

// The whole value must be the number ("12abc" is not 12), in the range of Int (a uint64 seed
// above 2^63 included).
template <class Int>
Int metadata_number(const TensorFile& file, const std::string& key, int base = 10) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end())
    RG_THROW(IoError, "checkpoint ", file.path, " has no '", key,
             "' in its metadata: it was not written by ringgrad-train");
  const std::string& text = it->second;
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    RG_THROW(IoError, "checkpoint ", file.path, ": metadata '", key, "' = '", text,
             "' is not a valid number");
  return value;
}

// A setting the file records that this run does not share: an error naming both values.
// Keys a file does not have (written before they existed) are not checked.
void check_same(const TensorFile& file, const char* key, const std::string& here,
                const std::string& what, int base = 10) {
  if (!file.metadata.count(key)) return;
  const auto there = metadata_number<uint64_t>(file, key, base);
  const std::string there_text =
      base == 16 ? hex32(static_cast<uint32_t>(there)) : std::to_string(there);
  if (there_text != here)
    RG_THROW(InvalidArgument, "checkpoint ", file.path, " was written with ", what, " ", there_text,
             ", this run has ", here,
             ": it would continue at another place in "
             "another data order. Use the same setting, or start a new run from its weights "
             "with --init-from");
}

void check_same_run(const TensorFile& file, const CheckpointInfo& expected) {
  auto format = file.metadata.find("format");
  if (format == file.metadata.end())
    RG_THROW(InvalidArgument, file.path,
             " is not a ringgrad-train checkpoint (it has weights "
             "but no training state: saved from PyTorch?); to start a new run from its weights "
             "use --init-from ",
             file.path);
  if (format->second != kFormat)
    RG_THROW(InvalidArgument, "checkpoint ", file.path, " has format '",
             format->second.substr(0, 64), "', not '", kFormat,
             "' (written by another version, or damaged): this ringgrad-train cannot tell what "
             "its training state means; use --init-from to start a new run from its weights");
  auto model_it = file.metadata.find("model");
  if (model_it == file.metadata.end() || model_it->second != expected.model)
    RG_THROW(InvalidArgument, "checkpoint ", file.path, " holds model '",
             model_it == file.metadata.end() ? "?" : model_it->second, "', not '", expected.model,
             "': pass the same --model as the run that wrote it");
  check_same(file, "seed", std::to_string(expected.seed), "--seed");
  check_same(file, "global_batch", std::to_string(expected.global_batch),
             "a global batch (--batch-size x processes) of");
  check_same(file, "dataset_size", std::to_string(expected.dataset_size), "a training set of size");
  check_same(file, kDataCrcKey, hex32(expected.data_crc32),
             "a training set (images and labels) of CRC32", 16);
}

// The position must be one this run passes through: step = epoch x steps per epoch + batch.
TrainingPosition read_position(const TensorFile& file, const CheckpointInfo& run) {
  TrainingPosition pos;
  pos.epoch = metadata_number<int64_t>(file, "epoch");
  pos.batch_in_epoch = metadata_number<int64_t>(file, "batch_in_epoch");
  pos.global_step = metadata_number<int64_t>(file, "step");
  const int64_t per_epoch = run.steps_per_epoch;
  const bool in_range = pos.epoch >= 0 && pos.global_step >= 0 && pos.batch_in_epoch >= 0 &&
                        pos.batch_in_epoch <= per_epoch;
  const int64_t before_epoch = in_range ? pos.global_step - pos.batch_in_epoch : -1;
  if (!in_range || before_epoch % per_epoch != 0 || before_epoch / per_epoch != pos.epoch)
    RG_THROW(IoError, "checkpoint ", file.path, ": position epoch ", pos.epoch, ", batch ",
             pos.batch_in_epoch, ", step ", pos.global_step, " is impossible for a run of ",
             per_epoch, " steps per epoch (a damaged file?)");
  if (pos.global_step > run.total_steps)
    RG_THROW(InvalidArgument, "checkpoint ", file.path, " is at step ", pos.global_step,
             ", past the ", run.total_steps, " steps of this run: raise --epochs to continue it");
  return pos;
}

// A value no training run produces: NaN or inf anywhere (save_checkpoint never writes one), or
// a negative BatchNorm running variance (its square root normalises every evaluation). Caught
// here, the run stops before its first step instead of training on, or scoring, garbage.
void check_values(const TensorFile& file) {
  for (const auto& [name, t] : file.tensors) {
    if (!dtype_is_floating(t.dtype())) continue;
    if (const int64_t bad = kernels::count_nonfinite(t))
      RG_THROW(InvalidArgument, file.path, ": '", name, "' holds ", bad,
               " NaN or inf values; a checkpoint of a healthy run has none");
    if (!ends_with(name, ".running_var")) continue;
    int64_t negative = 0;
    double first = 0;
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.element(i) < 0 && negative++ == 0) first = t.element(i);
    if (negative)
      RG_THROW(InvalidArgument, file.path, ": '", name, "' holds ", negative,
               " negative values (the first ", first,
               "), but a variance is never negative; the file is damaged");
  }
}

void load_model_entries(const TensorFile& file, Module& model) {
  check_values(file);
  NamedTensors weights;
  for (auto& [name, t] : file.tensors)
    if (!starts_with(name, kOptimizerPrefix)) weights.emplace_back(name, t);
  try {
    model.load_state_dict(weights);
  } catch (const Error& e) {
    RG_THROW(InvalidArgument, file.path, ": ", e.message());
  }
}

// Exactly the momentum buffers the file says it holds (older files: all of them, unless this
// run uses no momentum), each of its parameter's shape; a missing one would silently restart
// the momentum from zero.
void load_momentum(const TensorFile& file, Module& model, Sgd& optimizer) {
  auto params = model.named_parameters();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[kMomentumPrefix + params[i].first] = i;
  const int64_t all = static_cast<int64_t>(params.size());
  int64_t found = 0;
  for (auto& [name, t] : file.tensors) {
    if (!starts_with(name, kOptimizerPrefix)) continue;
    auto it = index.find(name);
    if (it == index.end())
      RG_THROW(InvalidArgument, "checkpoint ", file.path, ": unexpected optimizer entry '", name,
               "' (the model has no such parameter)");
    const Tensor& param = params[it->second].second.value();
    if (t.shape() != param.shape())
      RG_THROW(InvalidArgument, "checkpoint ", file.path, ": momentum buffer '", name,
               "' has shape ", t.shape().str(), ", its parameter ", param.shape().str());
    ++found;
  }
  const bool counted = file.metadata.count("momentum_buffers") != 0;
  const int64_t wanted = counted ? metadata_number<int64_t>(file, "momentum_buffers")
                                 : (optimizer.options().momentum == 0 ? found : all);
  if (found != wanted || (wanted != 0 && wanted != all))
    RG_THROW(InvalidArgument, "checkpoint ", file.path, " holds ", found, " momentum buffers, ",
             counted ? "its metadata says " : "this run needs ", wanted, " (", all,
             " parameters): resuming would restart the momentum from zero; use --init-from to "
             "start a new run from its weights");
  auto& buffers = optimizer.momentum_buffers();
  for (auto& [key, i] : index) {
    if (!file.contains(key)) continue;
    // Own copy on the parameter's device (a host entry may be a view into the file's bytes).
    const Device device = params[i].second.value().device();
    buffers[i] = device.is_cpu() ? file.at(key).clone() : file.at(key).to(device);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, Module& model, Sgd& optimizer,
                     const TrainingPosition& position, const CheckpointInfo& info,
                     const amp::GradScaler* scaler) {
  NamedTensors entries = model.state_dict();
  auto params = model.named_parameters();
  auto& buffers = optimizer.momentum_buffers();
  int64_t momentum_buffers = 0;
  for (size_t i = 0; i < params.size() && i < buffers.size(); ++i)
    if (buffers[i].defined()) {
      entries.emplace_back(kMomentumPrefix + params[i].first, buffers[i]);
      ++momentum_buffers;
    }
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"model", info.model},
      {"seed", std::to_string(info.seed)},
      {"total_steps", std::to_string(info.total_steps)},
      {"global_batch", std::to_string(info.global_batch)},
      {"dataset_size", std::to_string(info.dataset_size)},
      {kDataCrcKey, hex32(info.data_crc32)},
      // Counted, because none is right too: no momentum, or fp16 skipped every step so far.
      {"momentum_buffers", std::to_string(momentum_buffers)},
      {"epoch", std::to_string(position.epoch)},
      {"batch_in_epoch", std::to_string(position.batch_in_epoch)},
      {"step", std::to_string(position.global_step)},
  };
  // A checkpoint with NaN or inf in it would poison every run resumed from it: keep the old one.
  for (const auto& [name, tensor] : entries)
    if (const int64_t bad =
            dtype_is_floating(tensor.dtype()) ? kernels::count_nonfinite(tensor) : 0)
      RG_THROW(Error, "not writing checkpoint ", path, ": '", name, "' holds ", bad,
               " NaN or inf values (the file there, if any, is left as it was)");
  if (scaler && scaler->enabled()) {
    meta[kScaleKey] = exact_double(scaler->state().scale);
    meta[kGrowthTrackerKey] = std::to_string(scaler->state().growth_tracker);
  }
  save_safetensors(path, entries, meta);
}

uint64_t checkpoint_bytes(Module& model) {
  uint64_t bytes = 0;
  for (const auto& [name, t] : model.state_dict()) bytes += t.nbytes();
  for (const auto& [name, p] : model.named_parameters()) bytes += p.value().nbytes();
  return bytes;
}

std::optional<int64_t> checkpoint_global_batch(const std::string& path) {
  const TensorFile file = load_safetensors(path);
  if (!file.metadata.count("global_batch")) return std::nullopt;
  return metadata_number<int64_t>(file, "global_batch");
}

void load_weights(const std::string& path, Module& model) {
  load_model_entries(load_safetensors(path), model);
}

TrainingPosition load_checkpoint(const std::string& path, Module& model, Sgd& optimizer,
                                 const CheckpointInfo& expected, amp::GradScaler* scaler) {
  TensorFile file = load_safetensors(path);
  check_same_run(file, expected);
  const TrainingPosition pos = read_position(file, expected);
  load_model_entries(file, model);
  load_momentum(file, model, optimizer);
  auto scale_it = file.metadata.find(kScaleKey);
  if (scaler && scaler->enabled() && scale_it != file.metadata.end()) {
    amp::GradScalerState state;
    try {
      state.scale = std::stod(scale_it->second);
    } catch (const std::exception&) {
      RG_THROW(IoError, "checkpoint ", path, ": metadata '", kScaleKey, "' = '", scale_it->second,
               "' is not a number");
    }
    state.growth_tracker = metadata_number<int64_t>(file, kGrowthTrackerKey);
    scaler->load_state(state);
  }
  return pos;
}

}  // namespace ringgrad::nn
