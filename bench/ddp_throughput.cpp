// ddp_throughput: global training img/s of DistributedDataParallel under ringgrad-run (or
// mpirun), on a synthetic batch per rank, with gradient synchronisation or with every step
// under no_sync() — the difference is the communication backward does not hide. Rank 0 prints
// "model world batch sync|no_sync img/s"; compare_ddp.sh runs PyTorch DDP beside it.
// --timeline FILE: rank 0 also writes the Reducer's timeline of the last step, one bucket per
// line (scripts/plot.sh timeline draws it; docs/ddp-buckets.md shows one).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "apps/cli_checks.h"
#include "comm/process_group/from_environment.h"
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/optim/sgd.h"
#include "nn/parallel/distributed_data_parallel.h"

using namespace ringgrad;
using namespace ringgrad::nn;

namespace {

// "bucket params bytes ready_s launched_s done_s" per bucket, seconds since backward began;
// done_s is when finalize_backward found the bucket's all-reduce complete.
void write_timeline(const std::string& path, DistributedDataParallel& ddp, const Module& model) {
  const auto params = model.parameters();
  const auto& timeline = ddp.reducer().timeline();
  const auto& buckets = ddp.reducer().buckets();
  std::ofstream out(path);
  out << "# bucket params bytes ready_s launched_s done_s; last gradient at "
      << timeline.last_grad_s << " s\n";
  for (size_t b = 0; b < buckets.size(); ++b) {
    size_t bytes = 0;
    for (size_t i : buckets[b]) bytes += params[i].value().nbytes();
    const auto& t = timeline.buckets[b];
    out << b << " " << buckets[b].size() << " " << bytes << " " << t.ready_s << " " << t.launched_s
        << " " << t.done_s << "\n";
  }
  RG_CHECK(bool(out), "cannot write --timeline ", path);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "resnet20";
  comm::Backend backend = comm::Backend::ring;
  int batch = 64, threads = 1, warmup = 3, steps = 20;
  bool no_sync = false;
  std::string timeline_path;
  std::optional<DType> amp_dtype;
  double bucket_cap_mb = 25;
  CLI::App app{"ddp_throughput: data-parallel training img/s, with and without gradient sync"};
  // The compare_*.sh scripts pass their defaults first and the user's flags after: last wins.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.option_defaults()->always_capture_default();
  app.add_option("--model", model_name)->check(CLI::IsMember(model_names()));
  cli::add_choice(app, "--backend", backend, comm::kBackends, "collectives");
  app.add_option("--batch-size", batch, "per rank")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "per rank")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_flag("--no-sync", no_sync, "every step under no_sync(): no gradient communication");
  app.add_option("--bucket-cap-mb", bucket_cap_mb, "DDP bucket size in MiB")
      ->check(CLI::PositiveNumber);
  app.add_option("--timeline", timeline_path, "rank 0 writes the last step's bucket timeline here");
  cli::add_choice(app, "--amp", amp_dtype, amp::kAmpModes, "autocast dtype")
      ->check(cli::refuse("fp16", "it needs loss scaling, which this benchmark leaves out"));
  CLI11_PARSE(app, argc, argv);
  try {
    kernels::set_num_threads(threads);
    comm::DistributedJob job = comm::join_distributed_job(backend, "ddp_throughput");
    RG_CHECK(job.group != nullptr, "run under ringgrad-run with at least 2 processes");
    Generator rng(0);
    auto model = make_model(model_name, rng);
    DdpOptions ddp_options;
    ddp_options.reducer.bucket_cap_bytes = static_cast<size_t>(bucket_cap_mb * (1 << 20));
    DistributedDataParallel ddp(model, *job.group, ddp_options);
    kernels::SgdParams opts;
    opts.lr = 0.01;
    opts.momentum = 0.9;
    opts.weight_decay = 5e-4;
    Sgd sgd(model->parameters(), opts);
    Dataset data = synthetic_mnist(batch, 1 + job.env.rank);
    auto step = [&] {
      sgd.zero_grad();
      auto run = [&] {
        Variable loss;
        {
          amp::AutocastGuard autocast(amp_dtype);
          loss = cross_entropy(ddp.forward(Variable(data.images)), data.labels);
        }
        backward(loss);
      };
      if (no_sync) {
        auto guard = ddp.no_sync();
        run();
      } else {
        run();
      }
      sgd.step();
    };
    for (int i = 0; i < warmup; ++i) step();
    job.group->barrier()->wait();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    job.group->barrier()->wait();
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (job.leader() && !timeline_path.empty() && !no_sync)
      write_timeline(timeline_path, ddp, *model);
    if (job.leader())
      std::printf("%s world %d batch %d %s img/s %.1f\n", model_name.c_str(), job.env.world_size,
                  batch, no_sync ? "no_sync" : "sync",
                  static_cast<double>(batch) * steps * job.env.world_size / seconds);
    job.finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_throughput: error: %s\n", user_message(e).c_str());
    return 1;
  }
  return 0;
}
