// Tests of DDP (nn/parallel + comm/reducer): ranks are threads on one HashStore with the ring
// backend. Data-parallel training must equal single-process training on the same samples;
// the first bucket's all-reduce must start before backward ends; replicas that differ, unused
// parameters and no_sync accumulation behave as PyTorch's DDP (or better: a clear error); with
// fp16 loss scaling every rank skips the same steps.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "comm/reducer/bucket_assignment.h"
#include "comm/reducer/reducer.h"
#include "nn/amp/autocast.h"
#include "nn/amp/grad_scaler.h"
#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/modules/layers.h"
#include "nn/optim/sgd.h"
#include "nn/parallel/distributed_data_parallel.h"
#include "tests/comm/ring_fixtures.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::nn;
using comm::testing::make_ring_group;
using comm::testing::spawn;

namespace {

kernels::SgdParams sgd_options() {
  kernels::SgdParams o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 5e-4;
  return o;
}

using State = std::vector<std::pair<std::string, Tensor>>;

// K SGD steps of resnet8 on rows [offset, offset + rows) of each global batch of `data`; the
// model's state after each step. group: null for one process; sync_bn makes the BN statistics
// global (as the reference's).
std::vector<State> train_steps(const Dataset& data, int steps, int64_t global_batch, int64_t offset,
                               int64_t rows, comm::ProcessGroup* group,
                               size_t bucket_cap = comm::kDefaultBucketCapBytes) {
  Generator rng(42);
  auto model = make_model("resnet8", rng);
  std::unique_ptr<DistributedDataParallel> ddp;
  if (group) {
    convert_sync_batchnorm(*model, *group);
    DdpOptions options;
    options.reducer.bucket_cap_bytes = options.reducer.first_bucket_bytes = bucket_cap;
    ddp = std::make_unique<DistributedDataParallel>(model, *group, options);
  }
  Sgd sgd(model->parameters(), sgd_options());
  std::vector<State> states;
  for (int s = 0; s < steps; ++s) {
    const int64_t start = s * global_batch + offset;
    Variable x(data.images.narrow(start, rows));
    Tensor labels = data.labels.narrow(start, rows);
    sgd.zero_grad();
    Variable logits = ddp ? ddp->forward(x) : model->forward(x);
    backward(cross_entropy(logits, labels));
    sgd.step();
    states.push_back(model->state_dict());
    for (auto& [name, t] : states.back()) t = t.clone();
  }
  return states;
}

void check_same_state(const State& a, const State& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!dtype_is_floating(a[i].second.dtype())) continue;
    CAPTURE(a[i].first);
    testing::check_close(a[i].second, b[i].second, tol, a[i].first.c_str());
  }
}

// Runs `body` on both ranks of a two-rank ring group named `name`: it must throw an E on each,
// whose message says every one of `says`.
template <typename E>
void check_fails_on_both_ranks(const char* name,
                               const std::function<void(comm::ProcessGroup&, int rank)>& body,
                               const std::vector<std::string>& says) {
  auto store = std::make_shared<comm::HashStore>();
  std::vector<std::string> errors(2);
  spawn(2, [&](int rank) {
    auto group = make_ring_group(store, rank, 2, name);
    try {
      body(*group, rank);
    } catch (const E& e) {
      errors[rank] = e.what();
    }
  });
  for (const std::string& e : errors) {
    CAPTURE(e);
    for (const std::string& s : says) CHECK_MESSAGE(e.find(s) != std::string::npos, s);
  }
}

}  // namespace

TEST_CASE("ddp: data-parallel steps equal one process on the global batch (sync BN, any buckets)") {
  Dataset data = synthetic_mnist(96, 5);
  struct Case {
    int world;
    size_t bucket_cap;
  };
  for (Case k : {Case{2, comm::kDefaultBucketCapBytes}, Case{3, comm::kDefaultBucketCapBytes},
                 Case{2, 1024}, Case{2, size_t{1} << 40}}) {
    const int world = k.world;
    CAPTURE(world);
    CAPTURE(k.bucket_cap);
    const int64_t global = 24;
    const int steps = 3;
    auto reference = train_steps(data, steps, global, 0, global, nullptr);
    auto store = std::make_shared<comm::HashStore>();
    std::vector<std::vector<State>> results(world);
    spawn(world, [&](int rank) {
      auto group = make_ring_group(store, rank, world, "equivalence");
      const int64_t rows = global / world;
      results[rank] =
          train_steps(data, steps, global, rank * rows, rows, group.get(), k.bucket_cap);
    });
    // After one step the states agree to rounding. Three steps of training are not
    // bit-reproducible across summation orders: with 1 thread and Winograd's rounding in the
    // 16-channel convs the reference jumps away from every data-parallel run at the third step,
    // most likely a pre-activation within rounding of zero on the other side of a ReLU. The
    // errors this test is for (gradients not averaged, BN statistics not synced) move the
    // weights by orders of magnitude more than either bound.
    for (int r = 0; r < world; ++r) {
      check_same_state(results[r].front(), reference.front(), 1e-5);
      check_same_state(results[r].back(), reference.back(), 3e-4);
    }
  }
}

TEST_CASE("ddp: the first bucket's all-reduce starts before backward has finished") {
  auto store = std::make_shared<comm::HashStore>();
  Dataset data = synthetic_mnist(16, 2);
  spawn(2, [&](int rank) {
    auto group = make_ring_group(store, rank, 2, "overlap");
    Generator rng(1);
    auto model = make_model("resnet8", rng);
    DdpOptions options;
    options.reducer.first_bucket_bytes = 16 << 10;  // small buckets: several per backward
    options.reducer.bucket_cap_bytes = 64 << 10;
    DistributedDataParallel ddp(model, *group, options);
    REQUIRE(ddp.reducer().buckets().size() >= 3);
    for (int step = 0; step < 2; ++step) {  // step 2 runs with the rebuilt buckets
      backward(cross_entropy(ddp.forward(Variable(data.images.narrow(rank * 8, 8))),
                             data.labels.narrow(rank * 8, 8)));
      const comm::ReducerTimeline& t = ddp.reducer().timeline();
      CHECK(t.buckets.front().launched_s < t.last_grad_s);
      for (const auto& b : t.buckets) CHECK(b.launched_s <= b.done_s);
    }
  });
}

TEST_CASE(
    "reducer timeline: a bucket's done time is when its all-reduce completed, not when backward "
    "waited for it") {
  auto store = std::make_shared<comm::HashStore>();
  spawn(2, [&](int rank) {
    auto group = make_ring_group(store, rank, 2, "timeline");
    std::vector<Tensor> params{Tensor::zeros({1000}), Tensor::zeros({1000})};
    comm::ReducerOptions options;
    options.first_bucket_bytes = 4000;  // one parameter per bucket: two buckets
    options.bucket_cap_bytes = 4000;
    std::vector<Tensor> grads;
    comm::Reducer reducer(params, {"a", "b"}, *group, options,
                          [&](const std::vector<Tensor>& views) { grads = views; });
    REQUIRE(reducer.buckets().size() == 2);
    reducer.prepare_for_backward();
    reducer.mark_ready(1);
    reducer.mark_ready(0);
    // Both all-reduces are launched; they finish long before backward waits for them.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    reducer.finalize_backward();
    for (const auto& b : reducer.timeline().buckets) {
      CHECK(b.launched_s <= b.done_s);
      CHECK(b.done_s < reducer.timeline().last_grad_s + 1.0);
    }
  });
}

TEST_CASE("ddp: resnet18's buckets with bucket_cap_mb 25") {
  Generator rng(0);
  auto model = make_model("resnet18", rng);
  auto params = model->named_parameters();
  std::vector<size_t> bytes;
  for (auto& [name, p] : params) bytes.push_back(p.value().nbytes());
  auto buckets = comm::compute_bucket_assignment(bytes, comm::kDefaultBucketCapBytes);
  // Reverse order; the first bucket closes once it holds 1 MiB: the 9.4 MB layer4.1.conv2
  // weight does that right after fc and layer4.1.bn2.
  std::vector<std::string> first;
  for (size_t i : buckets[0]) first.push_back(params[i].first);
  CHECK(first == std::vector<std::string>{"fc.bias", "fc.weight", "layer4.1.bn2.bias",
                                          "layer4.1.bn2.weight", "layer4.1.conv2.weight"});
  REQUIRE(buckets.size() == 3);
  size_t total = 0, second = 0;
  for (size_t i : buckets[1]) second += bytes[i];
  for (size_t b : bytes) total += b;
  CHECK(second >= comm::kDefaultBucketCapBytes);
  CHECK(second - bytes[buckets[1].back()] < comm::kDefaultBucketCapBytes);  // closed at the cap
  CHECK(buckets[2].back() == 0);  // conv1.weight, registered first, reduced last
  size_t counted = 0;
  for (auto& b : buckets) counted += b.size();
  CHECK(counted == params.size());
  CHECK(total == 11175370 * sizeof(float));
}

TEST_CASE("bucket assignment: reverse order, small first bucket, explicit order") {
  using comm::compute_bucket_assignment;
  CHECK(compute_bucket_assignment({4096, 64, 1 << 20}, 1 << 20, 1 << 20) ==
        comm::BucketAssignment{{2}, {1, 0}});
  CHECK(compute_bucket_assignment({100, 100, 100, 100}, 150, 50) ==
        comm::BucketAssignment{{3}, {2, 1}, {0}});
  CHECK(compute_bucket_assignment({100, 100, 100}, 1000, 1000, {1, 0, 2}) ==
        comm::BucketAssignment{{1, 0, 2}});
  CHECK_THROWS_AS(compute_bucket_assignment({1, 2}, 10, 10, {0, 0}), Error);
}

TEST_CASE("ddp: replicas with different shapes fail on every rank naming the parameter") {
  check_fails_on_both_ranks<InvalidArgument>(
      "mismatch",
      [](comm::ProcessGroup& group, int rank) {
        Generator rng(1);
        auto model = make_model("resnet8", rng, 1, rank == 0 ? 10 : 12);
        DistributedDataParallel ddp(model, group);
      },
      {"'fc.weight' is float32 [10, 64] on rank 0 but float32 [12, 64] on rank 1"});
}

TEST_CASE("ddp: no_sync accumulates locally, the next synchronised backward averages the sum") {
  auto store = std::make_shared<comm::HashStore>();
  Dataset data = synthetic_mnist(32, 3);
  std::vector<Tensor> fc_grads(2), local_sums(2);
  spawn(2, [&](int rank) {
    auto group = make_ring_group(store, rank, 2, "no_sync");
    Generator rng(1);
    auto model = make_model("resnet8", rng);
    DistributedDataParallel ddp(model, *group);
    auto step = [&](int micro) {
      const int64_t start = (rank * 2 + micro) * 8;
      backward(cross_entropy(ddp.forward(Variable(data.images.narrow(start, 8))),
                             data.labels.narrow(start, 8)));
    };
    Variable fc_weight = model->named_parameters().back().second;  // fc.bias
    {
      auto guard = ddp.no_sync();
      step(0);
    }
    Tensor after_local = fc_weight.grad().clone();
    step(1);
    fc_grads[rank] = fc_weight.grad().clone();
    local_sums[rank] = after_local;
  });
  // Both ranks hold the same averaged gradient, and it differs from either local one.
  testing::check_close(fc_grads[0], fc_grads[1], 0, "averaged gradients agree");
  CHECK(std::memcmp(fc_grads[0].raw_data(), local_sums[0].raw_data(), fc_grads[0].nbytes()) != 0);
}

namespace {
// Two heads, of which forward uses only the first: "unused.weight" and "unused.bias" never get
// a gradient.
class OneHeadUnused : public Module {
 public:
  explicit OneHeadUnused(Generator& rng)
      : used_(register_module("used", std::make_shared<Linear>(4, 3, rng))),
        unused_(register_module("unused", std::make_shared<Linear>(4, 3, rng))) {}
  Variable forward(const Variable& x) override { return used_->forward(x); }

 private:
  std::shared_ptr<Linear> used_, unused_;
};
}  // namespace

TEST_CASE("ddp: parameters without a gradient are named in the error on every rank") {
  check_fails_on_both_ranks<Error>(
      "unused",
      [](comm::ProcessGroup& group, int) {
        Generator rng(1);
        auto model = std::make_shared<OneHeadUnused>(rng);
        DistributedDataParallel ddp(model, group);
        Variable x(Tensor::full({2, 4}, 0.5));
        backward(cross_entropy(ddp.forward(x), Tensor::from_vector<int64_t>({0, 2}, {2})));
      },
      {"received no gradient", "reduced: unused.weight, unused.bias. "});
}

namespace {
// A trunk and two heads; forward uses the head chosen by use_b (PyTorch issue #69031's
// alternating branches).
class TwoHeads : public Module {
 public:
  explicit TwoHeads(Generator& rng)
      : trunk_(register_module("trunk", std::make_shared<Linear>(4, 4, rng))),
        a_(register_module("a", std::make_shared<Linear>(4, 3, rng))),
        b_(register_module("b", std::make_shared<Linear>(4, 3, rng))) {}
  Variable forward(const Variable& x) override {
    Variable h = relu(trunk_->forward(x));
    return use_b ? b_->forward(h) : a_->forward(h);
  }
  bool use_b = false;

 private:
  std::shared_ptr<Linear> trunk_, a_, b_;
};

struct MicroBatch {
  Tensor x, labels;
};

MicroBatch micro_batch(uint64_t seed) {
  Generator rng(seed);
  std::vector<float> x(6 * 4);
  for (float& v : x) v = rng.normal();
  std::vector<int64_t> y(6);
  for (int64_t& v : y) v = static_cast<int64_t>(rng.below(3));
  return {Tensor::from_vector(x, {6, 4}), Tensor::from_vector(y, {6})};
}

// Rank r's plan in iteration it: micro-batch 0 under no_sync with head a, then the
// synchronised micro-batch 1 with head b on rank 0 and head a on rank 1 (so "b" is unused
// on rank 1 and "a" takes part on one rank only in the synchronised backward).
bool uses_b(int rank, int micro) { return micro == 1 && rank == 0; }
uint64_t batch_seed(int it, int rank, int micro) { return 100 + it * 10 + rank * 2 + micro; }
}  // namespace

TEST_CASE("ddp: find_unused_parameters with no_sync and alternating heads equals one process") {
  constexpr int kIterations = 2;  // the second runs on the buckets rebuilt after the first
  // Reference: one process accumulates all four micro-batches; DDP averages over 2 ranks.
  std::vector<std::vector<Tensor>> expected(kIterations);
  {
    Generator rng(7);
    auto model = std::make_shared<TwoHeads>(rng);
    for (int it = 0; it < kIterations; ++it) {
      for (auto& p : model->parameters()) p.zero_grad();
      for (int rank = 0; rank < 2; ++rank)
        for (int micro = 0; micro < 2; ++micro) {
          model->use_b = uses_b(rank, micro);
          const MicroBatch mb = micro_batch(batch_seed(it, rank, micro));
          backward(cross_entropy(model->forward(Variable(mb.x)), mb.labels));
        }
      for (auto& p : model->parameters()) {
        Tensor g = p.grad().clone();
        for (int64_t k = 0; k < g.numel(); ++k) g.data<float>()[k] /= 2;
        expected[it].push_back(g);
      }
    }
  }
  auto store = std::make_shared<comm::HashStore>();
  std::vector<std::vector<std::vector<Tensor>>> got(2,
                                                    std::vector<std::vector<Tensor>>(kIterations));
  spawn(2, [&](int rank) {
    auto group = make_ring_group(store, rank, 2, "find_unused");
    Generator rng(7);
    auto model = std::make_shared<TwoHeads>(rng);
    DdpOptions options;
    options.find_unused_parameters = true;
    DistributedDataParallel ddp(model, *group, options);
    for (int it = 0; it < kIterations; ++it) {
      for (auto& p : model->parameters()) p.zero_grad();
      for (int micro = 0; micro < 2; ++micro) {
        model->use_b = uses_b(rank, micro);
        const MicroBatch mb = micro_batch(batch_seed(it, rank, micro));
        std::optional<DistributedDataParallel::NoSync> guard;
        if (micro == 0) guard.emplace(ddp);
        backward(cross_entropy(ddp.forward(Variable(mb.x)), mb.labels));
      }
      for (auto& p : model->parameters()) got[rank][it].push_back(p.grad().clone());
    }
  });
  const auto names = [] {
    Generator rng(7);
    std::vector<std::string> out;
    for (auto& [name, p] : TwoHeads(rng).named_parameters()) out.push_back(name);
    return out;
  }();
  for (int rank = 0; rank < 2; ++rank)
    for (int it = 0; it < kIterations; ++it)
      for (size_t i = 0; i < names.size(); ++i) {
        CAPTURE(rank);
        CAPTURE(it);
        testing::check_close(got[rank][it][i], expected[it][i], 1e-5, names[i].c_str());
      }
}

TEST_CASE("ddp: uneven batch counts fail on both ranks with both collectives named, no hang") {
  // Rank 0 has a third batch while rank 1 has finished its epoch and calls the barrier that
  // ends it: rank 0's next DDP collective meets rank 1's barrier.
  check_fails_on_both_ranks<Error>(
      "uneven",
      [](comm::ProcessGroup& group, int rank) {
        Generator rng(7);
        auto model = std::make_shared<TwoHeads>(rng);  // head b unused
        DdpOptions options;
        options.find_unused_parameters = true;
        DistributedDataParallel ddp(model, group, options);
        for (int step = 0; step < (rank == 0 ? 3 : 2); ++step) {
          const MicroBatch mb = micro_batch(batch_seed(0, rank, step));
          backward(cross_entropy(ddp.forward(Variable(mb.x)), mb.labels));
        }
        group.barrier()->wait();
      },
      {"collective mismatch", "barrier #"});
}

TEST_CASE("ddp: fp16 compression halves the bytes sent and stays close to fp32") {
  auto store = std::make_shared<comm::HashStore>();
  Dataset data = synthetic_mnist(16, 4);
  std::map<std::string, std::vector<Tensor>> grads;
  std::map<std::string, size_t> bytes;
  std::mutex mu;
  for (std::string mode : {"none", "fp16"}) {
    spawn(2, [&](int rank) {
      auto group = make_ring_group(store, rank, 2, "compress-" + mode);
      Generator rng(1);
      auto model = make_model("resnet8", rng);
      DdpOptions options;
      options.reducer.compression = choice_value(comm::kGradCompressions, mode, "mode");
      DistributedDataParallel ddp(model, *group, options);
      backward(cross_entropy(ddp.forward(Variable(data.images.narrow(rank * 8, 8))),
                             data.labels.narrow(rank * 8, 8)));
      if (rank != 0) return;
      std::lock_guard<std::mutex> lock(mu);
      for (auto& p : model->parameters()) grads[mode].push_back(p.grad().clone());
      bytes[mode] = ddp.reducer().bytes_communicated();
    });
  }
  CHECK(bytes["fp16"] * 2 == bytes["none"]);
  for (size_t i = 0; i < grads["none"].size(); ++i)
    testing::check_close(grads["fp16"][i], grads["none"][i], 2e-3, "fp16 vs fp32 gradient");
}

TEST_CASE("ddp: fp16 autocast with loss scaling, an overflow on one rank skips the step on all") {
  auto store = std::make_shared<comm::HashStore>();
  Dataset data = synthetic_mnist(32, 3);
  std::vector<int> stepped(4);
  std::vector<double> scales(2);
  std::vector<char> unmoved(2);  // not vector<bool>: the ranks' threads write its elements
  std::vector<Tensor> final_weights(2);
  spawn(2, [&](int rank) {
    auto group = make_ring_group(store, rank, 2, "amp");
    Generator rng(1);
    auto model = make_model("resnet8", rng);
    Variable fc_weight = model->named_parameters()[model->named_parameters().size() - 2].second;
    // Rank 0's first gradient of fc.weight overflows. The hook is registered before DDP's, so
    // it runs first and the inf goes into the all-reduce, as a real fp16 overflow would.
    bool overflow = rank == 0;
    fc_weight.add_grad_ready_hook([&] {
      if (overflow) fc_weight.grad().data<float>()[0] = std::numeric_limits<float>::infinity();
    });
    DistributedDataParallel ddp(model, *group);
    Sgd sgd(model->parameters(), sgd_options());
    amp::GradScaler scaler;
    for (int s = 0; s < 2; ++s) {
      const int64_t start = (s * 2 + rank) * 8;
      sgd.zero_grad();
      Variable loss;
      {
        amp::AutocastGuard autocast(DType::f16);
        loss = cross_entropy(ddp.forward(Variable(data.images.narrow(start, 8))),
                             data.labels.narrow(start, 8));
      }
      const Tensor before = fc_weight.value().clone();
      backward(scaler.scale(loss));
      stepped[rank * 2 + s] = scaler.step(sgd);
      scaler.update();
      if (s == 0)
        unmoved[rank] =
            std::memcmp(before.raw_data(), fc_weight.value().raw_data(), before.nbytes()) == 0;
      overflow = false;
    }
    scales[rank] = scaler.get_scale();
    final_weights[rank] = fc_weight.value().clone();
  });
  CHECK(stepped == std::vector<int>{0, 1, 0, 1});  // rank 1 skipped step 1 too
  CHECK(unmoved[0]);
  CHECK(unmoved[1]);
  CHECK(scales[0] == 32768.0);
  CHECK(scales[1] == 32768.0);
  testing::check_close(final_weights[0], final_weights[1], 0, "replicas stay identical");
}
