// ringgrad-train: trains a ResNet on MNIST-format data. Flag parsing only, into a typed
// TrainConfig (each named choice becomes its enum here); the loop is nn/train/trainer.cpp
// (its outline) and training_run.cpp (its steps).
// Exit codes: 0 success, 1 runtime failure, 2 bad flags.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "apps/cli_checks.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "nn/amp/autocast.h"
#include "nn/models/resnet.h"
#include "nn/train/trainer.h"

using ringgrad::nn::TrainConfig;

int main(int argc, char** argv) {
  TrainConfig c;
  CLI::App app{"ringgrad-train: train a ResNet on MNIST-format data"};
  app.option_defaults()->always_capture_default();
  using ringgrad::cli::add_choice;
  using ringgrad::cli::whole_number_in;
  constexpr auto kMaxInt = std::numeric_limits<int>::max();
  constexpr auto kMaxInt64 = std::numeric_limits<int64_t>::max();
  app.add_option("--data", c.data_dir,
                 "directory with the four MNIST-format IDX files (raw or .gz)");
  app.add_flag("--synthetic", c.synthetic,
               "random data of MNIST shape instead of --data (throughput runs)");
  app.add_option("--model", c.model, "resnet8, resnet18 or resnet20")
      ->check(CLI::IsMember(ringgrad::nn::model_names()));
  app.add_option("--epochs", c.epochs, "passes over the training set")
      ->check(whole_number_in(1, kMaxInt));
  app.add_option("--batch-size", c.batch_size, "images per step, per process")
      ->check(whole_number_in(1, kMaxInt));
  app.add_option("--eval-batch-size", c.eval_batch_size, "images per evaluation batch")
      ->check(whole_number_in(1, kMaxInt));
  app.add_option("--lr", c.lr, "peak learning rate")->check(ringgrad::cli::non_negative());
  app.add_option("--momentum", c.momentum,
                 "SGD momentum (onecycle cycles it between 0.85 and 0.95, as PyTorch)")
      ->check(ringgrad::cli::number_in(0, 1));
  app.add_option("--weight-decay", c.weight_decay, "L2 weight decay")
      ->check(ringgrad::cli::non_negative());
  app.add_flag("--nesterov", c.nesterov, "Nesterov momentum");
  add_choice(app, "--lr-schedule", c.lr_schedule, ringgrad::nn::kLrSchedules,
             "learning-rate schedule");
  app.add_option(
         "--warmup-steps", c.warmup_steps,
         "linear warm-up steps (constant, cosine); onecycle: steps of its rising phase (0: 30%)")
      ->check(whole_number_in(0, kMaxInt64));
  app.add_option("--seed", c.seed, "seed for initialisation and data order")
      ->check(whole_number_in(0, std::numeric_limits<uint64_t>::max()));
  app.add_option(
         "--threads", c.threads,
         "CPU threads per process (0: OMP_NUM_THREADS, else cores / processes on this node)")
      ->check(
          whole_number_in(0, ringgrad::kernels::max_num_threads(), "4 per core of this machine"));
  app.add_option("--max-steps", c.max_steps, "stop after this many steps (0: no limit)")
      ->check(whole_number_in(0, kMaxInt64));
  app.add_option("--save", c.save_path, "write a checkpoint (safetensors) here at the end");
  auto* resume = app.add_option("--resume", c.resume_path, "continue from this checkpoint")
                     ->check(CLI::ExistingFile);
  app.add_option("--init-from", c.init_from,
                 "start a new run from the weights in this safetensors file (one ringgrad "
                 "wrote, or one saved from PyTorch); the optimiser and the schedule start afresh")
      ->check(CLI::ExistingFile)
      ->excludes(resume);
  app.add_flag("--auto-resume", c.auto_resume,
               "continue from --save when it exists (for ringgrad-run --max-restarts)")
      ->needs("--save");
  app.add_option("--log-json", c.log_json_path,
                 "write one JSON object per logged step and per epoch");
  app.add_option("--log-every", c.log_every, "steps between progress lines and JSON step records")
      ->check(whole_number_in(1, kMaxInt));
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "steps between checkpoints written to --save (0: only at the end)")
      ->check(whole_number_in(0, kMaxInt64));
  add_choice(app, "--device", c.device, ringgrad::kDeviceTypes,
             "where the parameters, batches and loss live (cuda under ringgrad-run: GPU "
             "LOCAL_RANK)");
  add_choice(app, "--backend", c.backend, ringgrad::comm::kBackends,
             "collectives for multi-process runs");
  app.add_option("--bucket-cap-mb", c.bucket_cap_mb, "DDP gradient bucket size in MiB")
      ->check(ringgrad::cli::number_in(0, 1 << 20, /*low_open=*/true));
  app.add_flag("--sync-bn", c.sync_bn, "BatchNorm statistics over all ranks (SyncBatchNorm)");
  add_choice(app, "--grad-compression", c.grad_compression, ringgrad::comm::kGradCompressions,
             "the dtype gradients are all-reduced in");
  add_choice(app, "--amp", c.amp, ringgrad::nn::amp::kAmpModes,
             "mixed precision as PyTorch's autocast (fp16 with loss scaling): convolutions and "
             "linears in half precision, the loss in fp32, fp32 master weights; batch norm in "
             "fp32, but bf16 on the CPU");
  app.add_option("--amp-init-scale", c.amp_init_scale,
                 "--amp fp16: the first loss scale (halved on every overflowing step)")
      ->check(ringgrad::cli::positive());
  auto conv_impl = ringgrad::kernels::ConvImpl::im2col;
  add_choice(app, "--conv-impl", conv_impl, ringgrad::kernels::kConvImpls,
             "CUDA convolutions, hand-written (im2col + cuBLAS) or cuDNN's (for comparison)");
  double timeout_s = 0;
  app.add_option("--timeout", timeout_s,
                 "seconds any collective may wait for the other ranks before the run fails "
                 "naming the missing rank (0: RINGGRAD_TIMEOUT_S, else 600)")
      ->check(ringgrad::cli::number_in(0, 1e7));
  bool no_eval = false;
  app.add_flag("--no-eval", no_eval, "skip the test-set evaluation after each epoch");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ringgrad-train: %s (see --help)\n", e.what());
    return 2;
  }
  c.eval = !no_eval;
  if (timeout_s > 0) ::setenv("RINGGRAD_TIMEOUT_S", std::to_string(timeout_s).c_str(), 1);
  try {
    ringgrad::kernels::set_conv_impl(conv_impl);
    ringgrad::nn::train(c);
  } catch (
      const ringgrad::InvalidArgument& e) {  // a setting that cannot work, found before training
    std::fprintf(stderr, "ringgrad-train: %s\n", ringgrad::user_message(e).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringgrad-train: error: %s\n", ringgrad::user_message(e).c_str());
    return 1;
  }
  return 0;
}
