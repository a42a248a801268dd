// The perf harness: setup, data, timing, checking, the nccl-tests table and --json (the flags
// are perf_settings.cpp).
#include "apps/perf/perf_harness.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/perf/perf_settings.h"
#include "comm/store/hash_store.h"
#include "comm/store/worker_store.h"
#include "core/cuda_memory.h"
#include "core/env.h"
#include "core/host_memory.h"
#include "core/hostname.h"
#include "core/logging.h"
#include "core/output_path.h"

namespace ringgrad::perf {

using comm::ReduceOp;

namespace {

struct Job {
  std::optional<comm::WorkerStore> worker_store;
  std::unique_ptr<comm::ProcessGroup> pg;
  Device device;        // of the buffers: the CPU, or the GPU of this rank's local rank
  int local_ranks = 1;  // ranks on this host
};

Job start_job(const Settings& s) {
  if (s.backend != "ring" && s.backend != "nccl")
    RG_THROW(InvalidArgument, "--backend '", s.backend, "' is not one of: ring, nccl");
  if (s.device != "cpu" && s.device != "cuda")
    RG_THROW(InvalidArgument, "--device '", s.device, "' is not one of: cpu, cuda");
  if (s.backend == "nccl" && s.device != "cuda")
    RG_THROW(InvalidArgument,
             "--backend nccl reduces device buffers only: add --device cuda (or use --backend ring "
             "for host buffers)");
  if (s.device == "cuda" && cuda_device_count() == 0)
    RG_THROW(InvalidArgument, "--device cuda: no CUDA device: ", cuda_unavailable_reason());
  Job job;
  const bool launched =
      env_get("RANK") || env_get("OMPI_COMM_WORLD_RANK") || env_get("SLURM_PROCID");
  comm::ProcessGroupOptions o;
  o.group_name = "perf";
  o.tensor_device = s.device == "cuda" ? DeviceType::cuda : DeviceType::cpu;
  if (!launched) {
    job.device = s.device == "cuda" ? Device::cuda(0) : Device::cpu();
    o.cuda_device = 0;
    job.pg = comm::create_process_group(s.backend, std::make_shared<comm::HashStore>(), 0, 1, o);
    return job;
  }
  const auto env = comm::read_worker_env();
  set_log_rank(env.rank);
  job.worker_store = comm::create_worker_store(env, comm::default_collective_timeout());
  o.generation = env.generation;
  o.store_host = env.master_addr;
  // One GPU per local rank (NCCL's rule), found also under mpirun, which sets no LOCAL_RANK.
  job.device = s.device == "cuda" ? Device::cuda(env.local_rank) : Device::cpu();
  job.local_ranks = env.local_world_size;
  o.cuda_device = env.local_rank;
  o.run_id = env_str("TORCHELASTIC_RUN_ID", "");
  job.pg =
      comm::create_process_group(s.backend, job.worker_store->store, env.rank, env.world_size, o);
  return job;
}

// Runs a small collective of the harness's own (rank lines, timings, #wrong) on a host tensor,
// through the device when the backend needs device buffers; `host` holds the result after.
void run_on(Device device, Tensor& host, const std::function<comm::WorkPtr(const Tensor&)>& call) {
  if (device.is_cpu()) {
    call(host)->wait();
    return;
  }
  Tensor on_device = host.to(device);
  call(on_device)->wait();
  host.copy_from(on_device);
}

// "#  Rank 0 Pid 1234 on host device cpu backend ring: shm to 1" for every rank (how it reaches
// its peers last), gathered with our own allgather.
std::vector<std::string> rank_lines(comm::ProcessGroup& pg, Device device) {
  constexpr int64_t kLine = 192;
  std::string mine =
      str_cat("#  Rank ", pg.rank(), " Pid ", ::getpid(), " on ", hostname(), " device ",
              device.str(), " backend ", pg.backend_name(), ": ", pg.describe_links());
  mine.resize(kLine - 1, '\0');  // a long list of links is cut, the line stays terminated
  mine.push_back('\0');
  Tensor all = Tensor::zeros({kLine * pg.size()}, DType::u8);
  std::memcpy(static_cast<char*>(all.raw_data()) + pg.rank() * kLine, mine.data(), kLine);
  run_on(device, all, [&](const Tensor& t) { return pg.allgather_inplace(t); });
  std::vector<std::string> lines;
  for (int r = 0; r < pg.size(); ++r)
    lines.emplace_back(static_cast<const char*>(all.raw_data()) + r * kLine);
  return lines;
}

struct Measure {
  double time_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

double max_over_ranks(comm::ProcessGroup& pg, Device device, double v) {
  Tensor t = Tensor::from_vector(std::vector<double>{v}, {1});
  comm::AllreduceOptions o;
  o.op = ReduceOp::max;
  run_on(device, t, [&](const Tensor& d) { return pg.allreduce(d, o); });
  return t.data<double>()[0];
}

// Buffers on `device`; the data is written and checked in host mirrors of them (the same
// tensors on the CPU), copied over outside the timed loop, as nccl-tests does.
Measure measure(comm::ProcessGroup& pg, const PerfCollective& c, const Settings& s, Device device,
                size_t count, DType dtype, ReduceOp op, bool in_place) {
  const int world = pg.size(), rank = pg.rank();
  const size_t send_n = c.send_count(count, world), recv_n = c.recv_count(count, world);
  Tensor send_host =
      Tensor::empty({static_cast<int64_t>(in_place ? std::max(send_n, recv_n) : send_n)}, dtype);
  Tensor recv_host = in_place ? send_host : Tensor::zeros({static_cast<int64_t>(recv_n)}, dtype);
  Tensor send = send_host.to(device);
  Tensor recv = in_place ? send : recv_host.to(device);
  const size_t send_at = in_place ? c.in_place_send_offset(count, rank, world) : 0;
  const size_t recv_at = in_place ? c.in_place_recv_offset(count, rank, world) : 0;
  auto init = [&] {
    for (size_t i = 0; i < send_n; ++i)
      send_host.set_element(send_at + i, input_value(op, dtype, rank, i));
    if (device.is_cuda()) send.copy_from(send_host);
  };
  init();
  for (int i = 0; i < s.warmup; ++i) c.start(pg, send, recv, in_place, op, s.root)->wait();
  pg.barrier()->wait();
  const auto t0 = std::chrono::steady_clock::now();
  comm::WorkPtr last;
  for (int i = 0; i < s.iters; ++i) last = c.start(pg, send, recv, in_place, op, s.root);
  last->wait();
  const double local_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      s.iters;
  Measure m;
  m.time_us = max_over_ranks(pg, device, local_us);
  const double bytes = static_cast<double>(count * dtype_size(dtype));
  m.algbw = bytes / m.time_us / 1e3;  // GB/s = bytes / (us * 1e3)
  m.busbw = m.algbw * c.bus_factor(world);
  if (s.check > 0) {
    Tensor want = Tensor::empty({static_cast<int64_t>(recv_n)}, dtype);
    for (int k = 0; k < s.check; ++k) {
      init();
      c.start(pg, send, recv, in_place, op, s.root)->wait();
      if (device.is_cuda()) recv_host.copy_from(recv);
      if (rank == 0 && env_bool("RINGGRAD_PERF_INJECT_BITFLIP", false) && recv_n > 0)
        static_cast<uint8_t*>(recv_host.raw_data())[recv_at * dtype_size(dtype)] ^=
            0x40;  // test hook
      for (size_t i = 0; i < recv_n; ++i) {
        const double e = c.expected(op, dtype, rank, world, s.root, count, i);
        if (std::isnan(e)) continue;
        want.set_element(i, e);  // rounded as the dtype would, like the result
        m.wrong += recv_host.element(recv_at + i) != want.element(i) ? 1 : 0;
      }
    }
    Tensor w = Tensor::from_vector(std::vector<int64_t>{m.wrong}, {1});
    run_on(device, w, [&](const Tensor& d) { return pg.allreduce(d); });
    m.wrong = w.data<int64_t>()[0];
  }
  return m;
}

// The host buffers of the largest row (send, receive and the checked copy) on every rank of
// this host, against what the host has, before anything is allocated: a sweep past its memory
// would otherwise fail, or be killed, in the middle.
void check_host_memory(const PerfCollective& c, const Settings& s, int world, int local_ranks) {
  const double per_rank =
      static_cast<double>(c.send_count(s.max_bytes, world) + 2 * c.recv_count(s.max_bytes, world));
  const double need = per_rank * local_ranks;
  const auto available = mem_available_bytes();
  if (available && need > static_cast<double>(*available))
    RG_THROW(InvalidArgument, "-e/--maxbytes ", s.max_bytes, ": the largest row needs about ",
             format_bytes(per_rank), " per rank, ", format_bytes(need), " for the ", local_ranks,
             local_ranks == 1 ? " rank" : " ranks", " on this host, which has ",
             format_bytes(static_cast<double>(*available)), " available; lower -e");
}

int run_sweep(const PerfCollective& c, const Settings& s) {
  Job job = start_job(s);
  comm::ProcessGroup& pg = *job.pg;
  check_host_memory(c, s, pg.size(), job.local_ranks);
  const Device device = job.device;
  if (c.has_root && s.root >= pg.size())
    RG_THROW(InvalidArgument, "-r/--root ", s.root, " is not a rank of this world of ", pg.size());
  const bool printer = pg.rank() == 0;
  if (printer) check_output_path(s.json_path, "--json");  // before the sweep, not after it
  const auto lines = rank_lines(pg, device);
  if (printer) {
    std::printf("# ringgrad %s_perf: backend %s, device %s, world size %d\n", c.name,
                s.backend.c_str(), s.device.c_str(), pg.size());
    std::printf("# minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d validation: %d\n",
                s.min_bytes, s.max_bytes,
                s.step_factor > 1 ? str_cat(s.step_factor, "(factor)").c_str()
                                  : str_cat(s.step_bytes, "(bytes)").c_str(),
                s.warmup, s.iters, s.check);
    std::printf("# busbw = algbw * %s\n#\n# Using ranks\n", c.bus_formula);
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
    if (pg.size() == 1)
      std::printf(
          "# WARNING: world size 1: no data crosses a network, so busbw is 0. Start N ranks with\n"
          "#          ringgrad-run --nproc-per-node N %s_perf ..., or mpirun -np N with "
          "MASTER_ADDR/MASTER_PORT set.\n",
          c.name);
    std::printf("#\n#%89s%39s\n", "out-of-place", "in-place");
    std::printf("#%11s %13s %9s %7s %6s %10s %8s %8s %6s %10s %8s %8s %6s\n", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                "busbw", "#wrong");
    std::printf("#%11s %13s %9s %7s %6s %10s %8s %8s %6s %10s %8s %8s %6s\n", "(B)", "(elements)",
                "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  nlohmann::json rows = nlohmann::json::array();
  int64_t wrong_total = 0;
  double busbw_sum = 0;
  int rows_count = 0;
  for (DType dtype : s.dtypes)
    for (ReduceOp op : c.has_op ? s.ops : std::vector<ReduceOp>{ReduceOp::sum})
      for (size_t bytes = s.min_bytes; bytes <= s.max_bytes;) {
        const size_t elem = dtype_size(dtype);
        const size_t granule = c.count_in_rank_blocks ? static_cast<size_t>(pg.size()) : 1;
        const size_t count = bytes / elem / granule * granule;
        Measure out = measure(pg, c, s, device, count, dtype, op, false);
        Measure in = measure(pg, c, s, device, count, dtype, op, true);
        wrong_total += out.wrong + in.wrong;
        busbw_sum += out.busbw + in.busbw;
        rows_count += 2;
        const std::string wrong_out = s.check ? std::to_string(out.wrong) : "N/A",
                          wrong_in = s.check ? std::to_string(in.wrong) : "N/A";
        if (printer)
          std::printf("%12zu %13zu %9s %7s %6d %10.2f %8.2f %8.2f %6s %10.2f %8.2f %8.2f %6s\n",
                      count * elem, count, dtype_label(dtype),
                      c.has_op ? comm::reduce_op_name(op) : "none", c.has_root ? s.root : -1,
                      out.time_us, out.algbw, out.busbw, wrong_out.c_str(), in.time_us, in.algbw,
                      in.busbw, wrong_in.c_str());
        rows.push_back({{"size", count * elem},
                        {"count", count},
                        {"type", dtype_label(dtype)},
                        {"redop", c.has_op ? comm::reduce_op_name(op) : "none"},
                        {"root", c.has_root ? s.root : -1},
                        {"out_of_place",
                         {{"time_us", out.time_us},
                          {"algbw", out.algbw},
                          {"busbw", out.busbw},
                          {"wrong", out.wrong}}},
                        {"in_place",
                         {{"time_us", in.time_us},
                          {"algbw", in.algbw},
                          {"busbw", in.busbw},
                          {"wrong", in.wrong}}}});
        const size_t next = s.step_factor > 1
                                ? static_cast<size_t>(static_cast<double>(bytes) * s.step_factor)
                                : bytes + s.step_bytes;
        if (next <= bytes) break;
        bytes = next;
      }
  const double avg_busbw = rows_count ? busbw_sum / rows_count : 0;
  if (printer) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total),
                wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n#\n", avg_busbw);
    std::fflush(stdout);
    if (!s.json_path.empty()) {
      std::ofstream f(s.json_path);
      f << nlohmann::json{{"collective", c.name},  {"world_size", pg.size()},
                          {"backend", s.backend},  {"device", s.device},
                          {"rows", rows},          {"wrong", wrong_total},
                          {"avg_busbw", avg_busbw}}
               .dump(2)
        << "\n";
      if (!f) RG_THROW(IoError, "cannot write --json ", s.json_path);
    }
  }
  pg.barrier()->wait();
  job.pg.reset();
  if (job.worker_store) job.worker_store->finish(comm::default_collective_timeout());
  return wrong_total > 0 ? 1 : 0;
}

}  // namespace

double input_value(ReduceOp op, DType dtype, int rank, size_t i) {
  const bool is_unsigned = dtype == DType::u8;
  if (op == ReduceOp::prod) {
    const double v = 1 + (rank + i) % 2;
    return !is_unsigned && i % 3 == 0 ? -v : v;
  }
  return static_cast<double>((rank * 7 + i) % 11) - (is_unsigned ? 0 : 5);
}

double reduced_value(ReduceOp op, DType dtype, int world, size_t i) {
  double acc = input_value(op, dtype, 0, i);
  for (int r = 1; r < world; ++r) {
    const double v = input_value(op, dtype, r, i);
    acc = op == ReduceOp::prod  ? acc * v
          : op == ReduceOp::max ? std::max(acc, v)
          : op == ReduceOp::min ? std::min(acc, v)
                                : acc + v;
  }
  if (op != ReduceOp::avg) return acc;
  if (!dtype_is_floating(dtype)) return static_cast<double>(static_cast<int64_t>(acc) / world);
  return dtype == DType::f64 ? acc / world : static_cast<float>(acc) / static_cast<float>(world);
}

int run_perf(int argc, char** argv, const PerfCollective& c) {
  Settings s;
  if (std::optional<int> stop = parse_settings(argc, argv, c, s)) return *stop;
  try {
    return run_sweep(c, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s_perf: error: %s\n", c.name, e.what());
    return 2;
  }
}

}  // namespace ringgrad::perf
