// Training checkpoints as safetensors: the model's state dict under its PyTorch names (so
// PyTorch can load the weights after dropping the "optimizer." entries), the SGD momentum
// buffers as "optimizer.momentum_buffer.<param>", and the position to resume from in
// __metadata__ (model, epoch, batch within the epoch, global step, seed, total steps, global
// batch, the training set's size and CRC32, how many momentum buffers it holds; with fp16 loss
// scaling also the GradScaler's scale and growth tracker).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "nn/amp/grad_scaler.h"
#include "nn/modules/module.h"
#include "nn/optim/sgd.h"

namespace ringgrad::nn {

struct TrainingPosition {
  int64_t epoch = 0;           // epoch to continue in
  int64_t batch_in_epoch = 0;  // batches of that epoch already trained
  int64_t global_step = 0;     // optimiser steps taken so far
};

// What a resumed run must share with the run that wrote the checkpoint, or it would continue
// at another position of another data order (each is compared on resume, when the file has it).
struct CheckpointInfo {
  std::string model;  // model name, checked on resume
  uint64_t seed = 0;
  int64_t total_steps = 0;      // the LR schedule's length (may grow: more --epochs)
  int64_t global_batch = 0;     // images per step over all ranks
  int64_t dataset_size = 0;     // training images
  uint32_t data_crc32 = 0;      // fingerprint() of the training set: tells two data sets apart
  int64_t steps_per_epoch = 1;  // bounds the saved position (not saved: follows from the rest)
};

// About how many bytes save_checkpoint writes for `model`: its weights and buffers, and a
// momentum buffer per parameter.
uint64_t checkpoint_bytes(Module& model);

// Atomic write (see save_safetensors). Blocking. An enabled scaler's state is saved too.
void save_checkpoint(const std::string& path, Module& model, Sgd& optimizer,
                     const TrainingPosition& position, const CheckpointInfo& info,
                     const amp::GradScaler* scaler = nullptr);

// Loads weights, buffers and momentum buffers into the live model and optimiser and returns
// where to continue. Throws InvalidArgument naming the file when it is not a ringgrad
// checkpoint (a weights-only file: use load_weights) or one of an unknown format, holds NaN or
// inf values or a negative BatchNorm running variance, holds another model, disagrees with
// `expected` (naming both values), lacks momentum buffers or holds stray or misshapen ones,
// is at a step past expected.total_steps, or does not fit the model; IoError when it is corrupt
// or its position (epoch, batch, step) is not one of this run. An enabled scaler takes the saved
// scaler state when the file has one (a checkpoint of a run without fp16 has none: the scaler
// then starts afresh).
TrainingPosition load_checkpoint(const std::string& path, Module& model, Sgd& optimizer,
                                 const CheckpointInfo& expected, amp::GradScaler* scaler = nullptr);

// The global batch a ringgrad-train checkpoint was written with (images per step over all
// ranks), if it records one. --auto-resume keeps it when the job resumes on another number of
// processes (an elastic job that lost or gained a node).
std::optional<int64_t> checkpoint_global_batch(const std::string& path);

// Only the weights and buffers of any safetensors file with the model's PyTorch names (one
// ringgrad wrote, or one saved from PyTorch): a fresh run starts from them (--init-from).
// Optimiser entries are ignored; missing, misshapen and unexpected tensors are named, and so are
// NaN or inf values and a negative BatchNorm running variance.
void load_weights(const std::string& path, Module& model);

}  // namespace ringgrad::nn
