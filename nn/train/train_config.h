// Everything one training run is configured by; ringgrad-train fills it from its flags. A
// setting with named choices is held as its value (its table of names is next to its enum, and
// the flags are parsed with it), so the trainer never reads a name.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "comm/process_group/process_group.h"
#include "comm/reducer/reducer.h"
#include "core/device.h"
#include "core/dtype.h"
#include "nn/optim/lr_schedule.h"

namespace ringgrad::nn {

struct TrainConfig {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  bool synthetic = false;  // random data of MNIST shape, for throughput runs
  std::string model = "resnet20";
  int epochs = 1;
  // Per process. 32 makes the main job (2 processes) train on the tutorial's global batch of
  // 64, which in the one default epoch takes twice the steps of 2 x 64 and ends more accurate.
  int batch_size = 32;
  int eval_batch_size = 500;
  double lr = 0.1;        // peak learning rate
  double momentum = 0.9;  // (onecycle cycles momentum itself, as PyTorch)
  double weight_decay = 5e-4;
  bool nesterov = false;
  LrScheduleKind lr_schedule = LrScheduleKind::onecycle;
  int64_t warmup_steps = 0;
  uint64_t seed = 0;
  int threads = 0;               // 0: OMP_NUM_THREADS, else this node's cores / processes
  int64_t max_steps = 0;         // 0: no limit; stop (and save) after this many steps
  std::string save_path;         // checkpoint written at the end (and on --max-steps)
  std::string resume_path;       // checkpoint to continue from
  std::string init_from;         // weights (any safetensors) a new run starts from
  bool auto_resume = false;      // continue from save_path when it exists (restarts)
  std::string log_json_path;     // one JSON object per logged step and per epoch
  int log_every = 50;            // steps between plain progress lines / JSON step records
  bool eval = true;              // test loss and accuracy after each epoch
  int64_t checkpoint_every = 0;  // steps between checkpoints to save_path (0: only at the end)
  // Mixed precision (amp::kAmpModes): nullopt is none; f16 or bf16: autocast runs convolutions
  // and linears in that dtype with f32 master weights; f16 adds dynamic loss scaling
  // (GradScaler), bf16 needs none.
  std::optional<DType> amp;
  // Where the parameters, buffers, batches and loss live (cuda: GPU LOCAL_RANK).
  DeviceType device = DeviceType::cpu;
  double amp_init_scale = 65536;  // fp16: the GradScaler's first loss scale (PyTorch's default)

  // Data parallel (used when launched with WORLD_SIZE > 1, e.g. by ringgrad-run):
  comm::Backend backend = comm::Backend::automatic;
  double bucket_cap_mb = 25;
  bool sync_bn = false;  // BatchNorm statistics over all ranks (SyncBatchNorm)
  comm::GradCompression grad_compression = comm::GradCompression::none;
};

struct TrainResult {
  int64_t steps = 0;
  double final_train_loss = 0;
  double test_loss = 0, test_accuracy = 0;  // of the last evaluation
  double images_per_second = 0;             // training throughput over the whole run
  int64_t skipped_steps = 0;                // fp16: steps the GradScaler skipped (inf/NaN)
};

}  // namespace ringgrad::nn
