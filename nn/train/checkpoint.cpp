// Checkpoint save and load.
#include "nn/train/checkpoint.h"

#include <zlib.h>

#include <cstdio>

#include "kernels/ops.h"
#include "nn/serialize/safetensors.h"

namespace ringgrad::nn {

namespace {

const char kMomentumPrefix[] = "optimizer.momentum_buffer.";
const char kScaleKey[] = "grad_scaler.scale";
const char kGrowthTrackerKey[] = "grad_scaler.growth_tracker";

// 17 significant digits: the double reads back bit for bit.
std::string exact_double(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

int64_t metadata_int(const TensorFile& file, const std::string& key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end())
    RG_THROW(IoError, "checkpoint ", file.path, " has no '", key,
             "' in its metadata: it was not written by ringgrad-train");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    RG_THROW(IoError, "checkpoint ", file.path, ": metadata '", key, "' = '", it->second,
             "' is not an integer");
  }
}

}  // namespace

void save_checkpoint(const std::string& path, Module& model, Sgd& optimizer,
                     const TrainingPosition& position, const CheckpointInfo& info,
                     const amp::GradScaler* scaler) {
  NamedTensors entries = model.state_dict();
  auto params = model.named_parameters();
  auto& buffers = optimizer.momentum_buffers();
  for (size_t i = 0; i < params.size() && i < buffers.size(); ++i)
    if (buffers[i].defined()) entries.emplace_back(kMomentumPrefix + params[i].first, buffers[i]);
  std::map<std::string, std::string> meta = {
      {"format", "ringgrad-checkpoint-1"},
      {"model", info.model},
      {"seed", std::to_string(info.seed)},
      {"total_steps", std::to_string(info.total_steps)},
      {"global_batch", std::to_string(info.global_batch)},
      {"dataset_size", std::to_string(info.dataset_size)},
      {"dataset_crc32", std::to_string(info.dataset_crc32)},
      {"epoch", std::to_string(position.epoch)},
      {"batch_in_epoch", std::to_string(position.batch_in_epoch)},
      {"step", std::to_string(position.global_step)},
  };
  // A checkpoint with NaN or inf in it would poison every run resumed from it: keep the old one.
  for (const auto& [name, tensor] : entries)
    if (const int64_t bad = dtype_is_floating(tensor.dtype()) ? kernels::count_nonfinite(tensor) : 0)
      RG_THROW(Error, "not writing checkpoint ", path, ": '", name, "' holds ", bad,
               " NaN or inf values (the file there, if any, is left as it was)");
  if (scaler && scaler->enabled()) {
    meta[kScaleKey] = exact_double(scaler->state().scale);
    meta[kGrowthTrackerKey] = std::to_string(scaler->state().growth_tracker);
  }
  save_safetensors(path, entries, meta);
}

namespace {

void load_model_entries(const TensorFile& file, Module& model) {
  NamedTensors weights;
  for (auto& [name, t] : file.tensors)
    if (name.rfind(kMomentumPrefix, 0) != 0) weights.emplace_back(name, t);
  try {
    model.load_state_dict(weights);
  } catch (const Error& e) {
    RG_THROW(InvalidArgument, file.path, ": ", e.message());
  }
}

// A setting the file records that this run does not share: an error naming both values.
void check_same(const TensorFile& file, const char* key, int64_t here, const char* flag) {
  if (!file.metadata.count(key)) return;  // written before the key existed
  const int64_t there = metadata_int(file, key);
  if (there != here)
    RG_THROW(InvalidArgument, "checkpoint ", file.path, " was written with ", flag, " ", there,
             ", this run has ", here, ": it would continue at another place in another data "
             "order. Use the same setting, or start a new run from its weights with --init-from");
}

}  // namespace

uint32_t labels_fingerprint(const Tensor& labels) {
  return static_cast<uint32_t>(
      ::crc32(0L, static_cast<const Bytef*>(labels.raw_data()), static_cast<uInt>(labels.nbytes())));
}

void load_weights(const std::string& path, Module& model) {
  load_model_entries(load_safetensors(path), model);
}

TrainingPosition load_checkpoint(const std::string& path, Module& model, Sgd& optimizer,
                                 const CheckpointInfo& expected, amp::GradScaler* scaler) {
  TensorFile file = load_safetensors(path);
  if (!file.metadata.count("format"))
    RG_THROW(InvalidArgument, path, " is not a ringgrad-train checkpoint (it has weights but no "
             "training state: saved from PyTorch?); to start a new run from its weights use "
             "--init-from ", path);
  auto model_it = file.metadata.find("model");
  if (model_it == file.metadata.end() || model_it->second != expected.model)
    RG_THROW(InvalidArgument, "checkpoint ", path, " holds model '",
             model_it == file.metadata.end() ? "?" : model_it->second, "', not '",
             expected.model, "': pass the same --model as the run that wrote it");
  check_same(file, "seed", static_cast<int64_t>(expected.seed), "--seed");
  check_same(file, "global_batch", expected.global_batch, "a global batch (--batch-size x processes) of");
  check_same(file, "dataset_size", expected.dataset_size, "a training set of size");
  check_same(file, "dataset_crc32", expected.dataset_crc32, "a training set (labels CRC32)");
  load_model_entries(file, model);
  auto params = model.named_parameters();
  auto& buffers = optimizer.momentum_buffers();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = kMomentumPrefix + params[i].first;
    if (!file.contains(key)) {
      if (optimizer.options().momentum == 0) continue;  // plain SGD keeps no buffers
      RG_THROW(InvalidArgument, "checkpoint ", path, " has no momentum buffer for '",
               params[i].first, "' (saved without momentum?): resuming would restart the "
               "momentum from zero; use --init-from to start a new run from its weights");
    }
    // Own copy on the parameter's device (a host entry may be a view into the file's bytes).
    const Device device = params[i].second.value().device();
    buffers[i] = device.is_cpu() ? file.at(key).clone() : file.at(key).to(device);
  }
  TrainingPosition pos;
  pos.epoch = metadata_int(file, "epoch");
  pos.batch_in_epoch = metadata_int(file, "batch_in_epoch");
  pos.global_step = metadata_int(file, "step");
  if (pos.epoch < 0 || pos.batch_in_epoch < 0 || pos.global_step < 0 ||
      pos.global_step > expected.total_steps)
    RG_THROW(IoError, "checkpoint ", path, ": position epoch ", pos.epoch, ", batch ",
             pos.batch_in_epoch, ", step ", pos.global_step, " is impossible for a run of ",
             expected.total_steps, " steps (a damaged file?)");
  auto scale_it = file.metadata.find(kScaleKey);
  if (scaler && scaler->enabled() && scale_it != file.metadata.end()) {
    amp::GradScalerState state;
    try {
      state.scale = std::stod(scale_it->second);
    } catch (const std::exception&) {
      RG_THROW(IoError, "checkpoint ", path, ": metadata '", kScaleKey, "' = '", scale_it->second,
               "' is not a number");
    }
    state.growth_tracker = metadata_int(file, kGrowthTrackerKey);
    scaler->load_state(state);
  }
  return pos;
}

}  // namespace ringgrad::nn
