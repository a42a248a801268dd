// Tests for nn/data/sampler and nn/data/dataloader: torch's DistributedSampler padding and
// sharding, shuffling per (seed, epoch), the evaluation shards, and the prefetching loader's
// contents, resume, buffer reuse, early shutdown, worker errors and timeouts.
#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "nn/data/dataloader.h"
#include "tests/nn/temp_dir.h"

using namespace ringgrad;
using namespace ringgrad::nn;
using ringgrad::nn::testing::message_of;

namespace {

using Shards = std::vector<std::vector<int64_t>>;

Shards shards_of(int64_t size, int replicas, bool shuffle, bool drop_last, uint64_t seed = 0,
                 int64_t epoch = 0) {
  Shards out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(size, replicas, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    CHECK(static_cast<int64_t>(out.back().size()) == s.num_samples());
  }
  return out;
}

// Dataset whose sample i has label i and pixel p = i * 100 + p (exact in float), so a batch row
// shows which sample it came from and whether it was copied whole.
Dataset numbered_dataset(int64_t n, int64_t h = 3, int64_t w = 4) {
  Dataset d{Tensor::empty({n, 1, h, w}), Tensor::empty({n}, DType::i64)};
  float* x = d.images.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    d.labels.data<int64_t>()[i] = i;
    for (int64_t p = 0; p < h * w; ++p) x[i * h * w + p] = static_cast<float>(i * 100 + p);
  }
  return d;
}

// Runs one epoch; checks every row against the dataset and returns the sample ids in order.
std::vector<int64_t> drain(DataLoader& loader, int64_t epoch, int64_t start_batch = 0,
                           std::vector<int64_t>* batch_sizes = nullptr) {
  loader.start_epoch(epoch, start_batch);
  std::vector<int64_t> ids;
  Batch batch;
  while (loader.next(batch)) {
    const int64_t rows = batch.labels.size(0);
    const int64_t pixels = batch.images.numel() / std::max<int64_t>(rows, 1);
    const float* x = batch.images.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t id = batch.labels.data<int64_t>()[r];
      for (int64_t p = 0; p < pixels; ++p) REQUIRE(x[r * pixels + p] == id * 100 + p);
      ids.push_back(id);
    }
    if (batch_sizes) batch_sizes->push_back(rows);
  }
  return ids;
}

}  // namespace

// Expected shards printed by torch 1.13: list(DistributedSampler(range(n), R, r, shuffle=False)).
TEST_CASE("sampler: unshuffled shards match torch's DistributedSampler") {
  CHECK(shards_of(10, 3, false, false) == Shards{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}});
  CHECK(shards_of(10, 3, false, true) == Shards{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}});
  CHECK(shards_of(2, 3, false, false) == Shards{{0}, {1}, {0}});
  CHECK(shards_of(5, 8, false, false) == Shards{{0}, {1}, {2}, {3}, {4}, {0}, {1}, {2}});
  CHECK(shards_of(7, 4, false, true) == Shards{{0}, {1}, {2}, {3}});
  CHECK(shards_of(2, 3, false, true) == Shards{{}, {}, {}});
  CHECK(shards_of(0, 2, true, false) == Shards{{}, {}});
}

TEST_CASE("sampler: shuffled shards are equal-sized, cover the data and pad only by repeats") {
  for (int64_t size : {1, 7, 10, 100, 257})
    for (int replicas : {1, 2, 3, 8})
      for (bool drop_last : {false, true}) {
        CAPTURE(size);
        CAPTURE(replicas);
        CAPTURE(drop_last);
        const Shards shards = shards_of(size, replicas, true, drop_last, 5, 1);
        std::map<int64_t, int> seen;
        for (const auto& shard : shards) {
          CHECK(shard.size() == shards[0].size());
          for (int64_t i : shard) {
            REQUIRE((i >= 0 && i < size));
            ++seen[i];
          }
        }
        const int64_t total = static_cast<int64_t>(shards.size() * shards[0].size());
        if (drop_last) {
          CHECK(total == size / replicas * replicas);
          CHECK(static_cast<int64_t>(seen.size()) == total);  // no repeats
        } else {
          CHECK(total == (size + replicas - 1) / replicas * replicas);
          CHECK(static_cast<int64_t>(seen.size()) == size);  // everything, repeats only to pad
          int64_t repeats = 0;
          for (const auto& [i, n] : seen) repeats += n - 1;
          CHECK(repeats == total - size);
        }
      }
}

TEST_CASE("sampler: the permutation depends on seed and epoch only, and reaches every order") {
  CHECK(shards_of(50, 2, true, false, 3, 4) == shards_of(50, 2, true, false, 3, 4));
  CHECK(shards_of(50, 2, true, false, 3, 4) != shards_of(50, 2, true, false, 3, 5));
  CHECK(shards_of(50, 2, true, false, 3, 4) != shards_of(50, 2, true, false, 9, 4));
  const std::vector<int64_t> epoch0 = shards_of(50, 1, true, false)[0];
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == shards_of(50, 1, false, false)[0]);
  CHECK(epoch0 != sorted);

  // An off-by-one in Fisher-Yates (Sattolo's variant) reaches only the 2 cyclic orders of 3.
  DistributedSampler s(3, 1, 0, true, 11);
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 200; ++epoch) {
    s.set_epoch(epoch);
    orders.insert(s.indices());
  }
  CHECK(orders.size() == 6);
}

TEST_CASE("sampler: evaluation shards count every sample exactly once") {
  CHECK(DistributedSampler::for_evaluation(10, 3, 0).indices() == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(DistributedSampler::for_evaluation(10, 3, 2).indices() == std::vector<int64_t>{2, 5, 8});
  for (int64_t size : {0, 1, 5, 10001})
    for (int replicas : {1, 3, 8}) {
      std::vector<int64_t> all;
      for (int r = 0; r < replicas; ++r) {
        DistributedSampler s = DistributedSampler::for_evaluation(size, replicas, r);
        s.set_epoch(3);
        const auto mine = s.indices();
        CHECK(static_cast<int64_t>(mine.size()) == s.num_samples());
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end());
      std::vector<int64_t> expected(size);
      for (int64_t i = 0; i < size; ++i) expected[i] = i;
      CHECK(all == expected);
    }
}

TEST_CASE("sampler: invalid arguments are rejected") {
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), InvalidArgument);
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2), InvalidArgument);
  CHECK_THROWS_AS(DistributedSampler(10, 2, -1), InvalidArgument);
  CHECK_THROWS_AS(DistributedSampler(-1, 1, 0), InvalidArgument);
}

TEST_CASE("dataloader: each epoch yields the sampler's order with whole rows") {
  const Dataset data = numbered_dataset(103);
  for (int rank : {0, 2}) {
    CAPTURE(rank);
    DistributedSampler sampler(103, 3, rank, true, 7);
    DataLoader loader(data, sampler, 10);
    CHECK(loader.num_batches() == 4);  // 35 samples per rank
    for (int64_t epoch : {0, 1}) {
      std::vector<int64_t> sizes;
      sampler.set_epoch(epoch);
      CHECK(drain(loader, epoch, 0, &sizes) == sampler.indices());
      CHECK(sizes == std::vector<int64_t>{10, 10, 10, 5});
    }
  }
  // One replica: every sample exactly once per epoch.
  DataLoader loader(data, DistributedSampler(103), 16);
  std::vector<int64_t> ids = drain(loader, 4);
  std::sort(ids.begin(), ids.end());
  CHECK(ids == shards_of(103, 1, false, false)[0]);
}

TEST_CASE("dataloader: drop_last, start_batch and buffer reuse") {
  const Dataset data = numbered_dataset(103);
  DistributedSampler sampler(103);
  DataLoader dropping(data, sampler, 10, /*drop_last=*/true);
  CHECK(dropping.num_batches() == 10);
  std::vector<int64_t> sizes;
  CHECK(drain(dropping, 0, 0, &sizes).size() == 100);
  CHECK(sizes == std::vector<int64_t>(10, 10));

  DataLoader loader(data, sampler, 10);
  const std::vector<int64_t> full = drain(loader, 2);
  CHECK(drain(loader, 2, 4) == std::vector<int64_t>(full.begin() + 40, full.end()));
  CHECK(drain(loader, 2, loader.num_batches()).empty());
  CHECK_THROWS_AS(loader.start_epoch(2, loader.num_batches() + 1), Error);

  // No allocation per batch: every batch of every epoch lives in one of the two buffers.
  std::set<void*> buffers;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.start_epoch(epoch);
    Batch batch;
    while (loader.next(batch)) buffers.insert(batch.images.storage()->data());
  }
  CHECK(buffers.size() == 2);
}

TEST_CASE("dataloader: abandoning an epoch or the loader mid-epoch neither hangs nor leaks") {
  const Dataset data = numbered_dataset(200);
  Batch batch;
  {
    DataLoader loader(data, DistributedSampler(200), 8);
    loader.start_epoch(0);
    REQUIRE(loader.next(batch));
  }  // destroyed with the worker waiting for a free slot
  {
    DataLoader loader(data, DistributedSampler(200), 8);
    loader.start_epoch(0);
  }  // destroyed before any batch was taken
  DataLoader loader(data, DistributedSampler(200), 8);
  loader.start_epoch(0);
  REQUIRE(loader.next(batch));
  REQUIRE(loader.next(batch));
  std::vector<int64_t> ids = drain(loader, 1);  // restart mid-epoch: a complete new epoch
  CHECK(ids.size() == 200);
  CHECK(std::set<int64_t>(ids.begin(), ids.end()).size() == 200);
  CHECK_FALSE(loader.next(batch));
  CHECK_THROWS_AS(DataLoader(data, DistributedSampler(200), 8).next(batch), Error);
}

TEST_CASE("dataloader: the transform runs on every batch and its exception reaches next()") {
  const Dataset data = numbered_dataset(50);
  int calls = 0;
  auto negate_labels_then_fail = [&](Batch& b) {
    if (++calls == 3) throw std::runtime_error("transform failed on the third batch");
    int64_t* labels = b.labels.data<int64_t>();
    for (int64_t i = 0; i < b.labels.numel(); ++i) labels[i] = -labels[i];
  };
  DataLoader loader(data, DistributedSampler(50, 1, 0, false), 10, false, negate_labels_then_fail);
  loader.start_epoch(0);
  Batch batch;
  for (int64_t b = 0; b < 2; ++b) {
    REQUIRE(loader.next(batch));
    CHECK(batch.labels.data<int64_t>()[1] == -(b * 10 + 1));
  }
  CHECK(message_of<std::runtime_error>([&] { loader.next(batch); }) ==
        "transform failed on the third batch");
  loader.start_epoch(1);  // a new epoch starts cleanly after the failed one
  REQUIRE(loader.next(batch));
  CHECK(batch.labels.data<int64_t>()[1] == -1);
}

TEST_CASE("dataloader: a batch that never arrives ends in TimeoutError, not a hang") {
  const Dataset data = numbered_dataset(20);
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;
  auto stuck = [&](Batch&) {
    std::unique_lock<std::mutex> lock(mutex);
    released.wait_for(lock, std::chrono::seconds(30), [&] { return release; });
  };
  DataLoader loader(data, DistributedSampler(20), 5, false, stuck, std::chrono::milliseconds(50));
  loader.start_epoch(0);
  Batch batch;
  const std::string message = message_of<TimeoutError>([&] { loader.next(batch); });
  CHECK(message.find("batch 0 of epoch 0 not ready after 50 ms") != std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  released.notify_all();
}
