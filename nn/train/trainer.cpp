// Training loop. Each step: set the scheduled learning rate (and momentum for onecycle),
// forward, cross-entropy, backward, SGD step. Resume restores weights, BN buffers, momentum
// buffers and the position (epoch, batch), and the sampler's order is a function of
// (seed, epoch), so the continued run sees exactly the batches the uninterrupted one would.
#include "nn/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "kernels/ops.h"
#include "nn/autograd/ops.h"
#include "nn/data/dataloader.h"
#include "nn/models/resnet.h"
#include "nn/optim/lr_schedule.h"
#include "nn/train/checkpoint.h"
#include "nn/train/progress.h"

namespace ringgrad::nn {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Splits {
  Dataset train, test;
};

Splits load_data(const TrainConfig& c) {
  if (c.synthetic) return {synthetic_mnist(60000, c.seed), synthetic_mnist(10000, c.seed + 1)};
  RawSplit raw_train = read_mnist_split(c.data_dir, "train");
  RawSplit raw_test = read_mnist_split(c.data_dir, "test");
  Normalization norm = compute_normalization(raw_train.images);
  return {to_dataset(raw_train, norm), to_dataset(raw_test, norm)};
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

EvalResult evaluate(Module& model, const Dataset& test, int64_t batch_size) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t n = test.size();
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t rows = std::min(batch_size, n - start);
    Tensor labels = test.labels.narrow(start, rows);
    Variable logits = model.forward(Variable(test.images.narrow(start, rows)));
    loss_sum += cross_entropy(logits, labels).value().item() * static_cast<double>(rows);
    correct += kernels::count_correct(logits.value(), labels);
  }
  model.train();
  return {n ? loss_sum / n : 0, n ? static_cast<double>(correct) / n : 0};
}

}  // namespace

TrainResult train(const TrainConfig& c) {
  RG_CHECK(c.epochs >= 1, "--epochs must be at least 1, got ", c.epochs);
  RG_CHECK(c.batch_size >= 1, "--batch-size must be at least 1, got ", c.batch_size);
  const int threads = c.threads > 0 ? c.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  kernels::set_num_threads(threads);

  Splits data = load_data(c);
  Generator init_rng(c.seed, /*stream=*/0);
  auto model = make_model(c.model, init_rng);
  kernels::SgdParams sgd;
  sgd.lr = c.lr;
  sgd.momentum = c.momentum;
  sgd.weight_decay = c.weight_decay;
  sgd.nesterov = c.nesterov;
  Sgd optimizer(model->parameters(), sgd);

  DataLoader loader(data.train, DistributedSampler(data.train.size(), 1, 0, true, c.seed),
                    c.batch_size);
  const int64_t steps_per_epoch = loader.num_batches();
  const int64_t total_steps = steps_per_epoch * c.epochs;
  LrSchedule schedule(parse_lr_schedule(c.lr_schedule), c.lr, total_steps, c.warmup_steps);
  CheckpointInfo info{c.model, c.seed, total_steps};

  TrainingPosition pos;
  if (!c.resume_path.empty()) {
    pos = load_checkpoint(c.resume_path, *model, optimizer, info);
    log_info("resumed from ", c.resume_path, " at epoch ", pos.epoch + 1, ", step ",
             pos.global_step);
  }

  ProgressReporter progress(true, c.log_every);
  JsonLog json(c.log_json_path);
  progress.line(str_cat("ringgrad-train: ", c.model, " (", model->num_parameters(),
                        " parameters), ", data.train.size(), " training images, batch ",
                        c.batch_size, ", ", threads, " threads"));
  TrainResult result;
  double train_seconds = 0;
  int64_t images_trained = 0;
  bool stop = false;
  for (int64_t epoch = pos.epoch; epoch < c.epochs && !stop; ++epoch) {
    loader.start_epoch(epoch, epoch == pos.epoch ? pos.batch_in_epoch : 0);
    int64_t batch_index = epoch == pos.epoch ? pos.batch_in_epoch : 0;
    double epoch_loss = 0;
    int64_t epoch_correct = 0, epoch_images = 0;
    const auto epoch_start = Clock::now();
    Batch batch;
    while (loader.next(batch)) {
      const auto step_start = Clock::now();
      optimizer.set_lr(schedule.lr(pos.global_step));
      if (auto m = schedule.momentum(pos.global_step)) optimizer.set_momentum(*m);
      optimizer.zero_grad();
      Variable logits = model->forward(Variable(batch.images));
      Variable loss = cross_entropy(logits, batch.labels);
      backward(loss);
      optimizer.step();

      const int64_t rows = batch.labels.size(0);
      const double loss_value = loss.value().item();
      const int64_t correct = kernels::count_correct(logits.value(), batch.labels);
      train_seconds += seconds_since(step_start);
      images_trained += rows;
      epoch_loss += loss_value * static_cast<double>(rows);
      epoch_correct += correct;
      epoch_images += rows;
      ++batch_index;
      ++pos.global_step;
      result.final_train_loss = loss_value;

      StepStats s;
      s.epoch = static_cast<int>(epoch + 1);
      s.epochs = c.epochs;
      s.step_in_epoch = batch_index;
      s.steps_in_epoch = steps_per_epoch;
      s.global_step = pos.global_step;
      s.loss = loss_value;
      s.accuracy = static_cast<double>(epoch_correct) / epoch_images;
      s.lr = optimizer.options().lr;
      s.images_per_second = images_trained / std::max(1e-9, train_seconds);
      s.eta_seconds = (total_steps - pos.global_step) * c.batch_size / std::max(1e-9, s.images_per_second);
      progress.step(s);
      if (pos.global_step % c.log_every == 0 || batch_index == steps_per_epoch)
        json.write(nlohmann::json{{"type", "step"}, {"epoch", s.epoch}, {"step", pos.global_step},
                                  {"loss", loss_value}, {"accuracy", s.accuracy}, {"lr", s.lr},
                                  {"img_per_s", s.images_per_second}}.dump());
      if (c.max_steps > 0 && pos.global_step >= c.max_steps) {
        stop = true;
        break;
      }
    }
    pos.epoch = stop ? epoch : epoch + 1;
    pos.batch_in_epoch = stop ? batch_index : 0;
    nlohmann::json record{{"type", "epoch"}, {"epoch", epoch + 1}, {"step", pos.global_step},
                          {"train_loss", epoch_images ? epoch_loss / epoch_images : 0.0},
                          {"train_accuracy", epoch_images ? double(epoch_correct) / epoch_images : 0.0},
                          {"img_per_s", images_trained / std::max(1e-9, train_seconds)},
                          {"seconds", seconds_since(epoch_start)}};
    if (c.eval && !stop) {
      EvalResult ev = evaluate(*model, data.test, c.eval_batch_size);
      result.test_loss = ev.loss;
      result.test_accuracy = ev.accuracy;
      record["test_loss"] = ev.loss;
      record["test_accuracy"] = ev.accuracy;
      progress.line(str_cat("epoch ", epoch + 1, "/", c.epochs, ": test loss ", ev.loss,
                            ", test accuracy ", 100.0 * ev.accuracy, "% (", data.test.size(),
                            " images)"));
    }
    json.write(record.dump());
  }
  result.steps = pos.global_step;
  result.images_per_second = images_trained / std::max(1e-9, train_seconds);
  progress.line(str_cat("training throughput: ", static_cast<int64_t>(result.images_per_second),
                        " img/s over ", images_trained, " images"));
  if (!c.save_path.empty()) {
    save_checkpoint(c.save_path, *model, optimizer, pos, info);
    progress.line("saved checkpoint " + c.save_path);
  }
  return result;
}

}  // namespace ringgrad::nn
