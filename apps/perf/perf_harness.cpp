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

#include "apps/perf/perf_measure.h"
#include "apps/perf/perf_settings.h"
#include "apps/perf/perf_table.h"
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
  const bool cuda = s.device == DeviceType::cuda;
  if (s.backend == comm::Backend::nccl && !cuda)
    RG_THROW(InvalidArgument,
             "--backend nccl reduces device buffers only: add --device cuda (or use --backend ring "
             "for host buffers)");
  if (cuda && cuda_device_count() == 0)
    RG_THROW(InvalidArgument, "--device cuda: no CUDA device: ", cuda_unavailable_reason());
  Job job;
  const bool launched =
      env_get("RANK") || env_get("OMPI_COMM_WORLD_RANK") || env_get("SLURM_PROCID");
  comm::ProcessGroupOptions o;
  o.group_name = "perf";
  o.tensor_device = s.device;
  o.timeout = std::chrono::seconds(s.timeout_s);  // -T; 0: RINGGRAD_TIMEOUT_S, else 10 minutes
  if (!launched) {
    job.device = cuda ? Device::cuda(0) : Device::cpu();
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
  job.device = cuda ? Device::cuda(env.local_rank) : Device::cpu();
  job.local_ranks = env.local_world_size;
  o.cuda_device = env.local_rank;
  o.run_id = env_str("TORCHELASTIC_RUN_ID", "");
  job.pg =
      comm::create_process_group(s.backend, job.worker_store->store, env.rank, env.world_size, o);
  return job;
}

// "#  Rank  0 Group  0 Pid   1234 on       host device cpu backend ring: shm to 1" for every
// rank (how it reaches its peers last), gathered with our own allgather.
std::vector<std::string> rank_lines(comm::ProcessGroup& pg, Device device) {
  constexpr int64_t kLine = 192;
  char head[128];  // nccl-tests' "Using devices" columns, then the device and how it links
  std::snprintf(head, sizeof head, "#  Rank %2d Group %2d Pid %6d on %10s device ", pg.rank(), 0,
                static_cast<int>(::getpid()), hostname().c_str());
  std::string mine =
      str_cat(head, device.str(), " backend ", pg.backend_name(), ": ", pg.describe_links());
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

// The lines above the table: nccl-tests' settings line, the -z mode, which time is reported.
void print_preamble(const PerfCollective& c, const Settings& s, const comm::ProcessGroup& pg,
                    const std::vector<std::string>& rank_lines) {
  const int world = pg.size();
  std::printf("# ringgrad %s_perf: backend %s, device %s, world size %d\n", c.name,
              pg.backend_name().c_str(), choice_name(kDeviceTypes, s.device).c_str(), world);
  std::printf("# Collective test starting: %s_perf\n", c.name);
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: 0 unalign: %d\n",
      s.min_bytes, s.max_bytes,
      s.step_factor > 1 ? str_cat(s.step_factor, "(factor)").c_str()
                        : str_cat(s.step_bytes, "(bytes)").c_str(),
      s.warmup, s.iters, s.agg_iters, s.check, s.unalign);
  const char* blocking[] = {nullptr, "wait and barrier after each inner iteration (-m)",
                            "wait after each inner iteration (-m), no barrier",
                            "wait and barrier after each outer iteration (-n); time excludes "
                            "barrier"};
  if (s.blocking != Blocking::none)
    std::printf("# Blocking Enabled: %s\n", blocking[static_cast<int>(s.blocking)]);
  std::printf("# Time: %s%s (-a %d), per collective%s\n", statistic_label(s.statistic),
              s.statistic == TimeStatistic::average ? ", as nccl-tests by default" : "",
              static_cast<int>(s.statistic), s.report_cputime ? ", to issue it (-C 1)" : "");
  std::printf("# busbw = algbw * %s\n#\n# Using devices\n", c.bus.formula);
  for (const auto& l : rank_lines) std::printf("%s\n", l.c_str());
  if (world == 1)
    std::printf(
        "# WARNING: world size 1: no data crosses a network, so busbw is 0. Start N ranks with\n"
        "#          ringgrad-run --nproc-per-node N %s_perf ..., or mpirun -np N with "
        "MASTER_ADDR/MASTER_PORT set.\n",
        c.name);
  std::printf("%s", table_header(s.report_cputime, s.report_timestamps).c_str());
}

nlohmann::json half_json(const Measure& m) {
  return {{"time_us", m.time_us}, {"algbw", m.algbw}, {"busbw", m.busbw}, {"wrong", m.wrong}};
}

// The next size of the sweep; nullopt past -e (or where it would not grow, or overflow).
std::optional<size_t> next_size(const Settings& s, size_t bytes) {
  size_t next = bytes + s.step_bytes;
  if (s.step_factor > 1)
    next = bytes > s.max_bytes / s.step_factor ? s.max_bytes + 1 : bytes * s.step_factor;
  if (next <= bytes || next > s.max_bytes) return std::nullopt;
  return next;
}

// The host buffers of the largest row (send, receive and the checked copy) on every rank of
// this host, against what the host has, before anything is allocated: a sweep past its memory
// would otherwise fail, or be killed, in the middle.
void check_host_memory(const PerfCollective& c, const Settings& s, int world, int local_ranks) {
  const double per_rank = static_cast<double>(send_count(c, s.max_bytes, world) +
                                              2 * recv_count(c, s.max_bytes, world));
  const double need = per_rank * local_ranks;
  const auto available = mem_available_bytes();
  if (available && need > static_cast<double>(*available))
    RG_THROW(InvalidArgument, "-e/--maxbytes ", s.max_bytes, ": the largest row needs about ",
             format_bytes(per_rank), " per rank, ", format_bytes(need), " for the ", local_ranks,
             local_ranks == 1 ? " rank" : " ranks", " on this host, which has ",
             format_bytes(static_cast<double>(*available)), " available; lower -e");
}

// What the sweep found over all its rows.
struct SweepResult {
  nlohmann::json rows = nlohmann::json::array();  // --json's
  int64_t wrong = 0;                              // wrong elements, both halves of every row
  double busbw_sum = 0;                           // over both halves of every row
  int halves = 0;
  double avg_busbw() const { return halves ? busbw_sum / halves : 0; }
};

// One row of the table: the collective out of place and in place at one size, printed by rank
// 0 as it comes (a long sweep shows progress) and kept for --json.
void run_row(const PerfCollective& c, const Settings& s, comm::ProcessGroup& pg, Device device,
             RowSpec row, int root, bool printer, SweepResult& result) {
  const Measure out = measure(pg, c, s, device, row);
  row.in_place = true;
  const Measure in = measure(pg, c, s, device, row);
  result.wrong += std::max<int64_t>(out.wrong, 0) + std::max<int64_t>(in.wrong, 0);
  result.busbw_sum += out.busbw + in.busbw;
  result.halves += 2;
  // nccl-tests' count column is the per-rank block for gather/scatter.
  const size_t shown_count = c.rank_block != RankBlock::none ? row.count / pg.size() : row.count;
  const char* redop = c.has_op ? comm::reduce_op_name(row.op) : "none";
  const size_t bytes = row.count * dtype_size(row.dtype);
  if (printer) {
    std::printf("%s%s%s%s\n",
                row_start(bytes, shown_count, dtype_label(row.dtype), redop, root).c_str(),
                row_half(out.time_us, out.algbw, out.busbw, out.wrong).c_str(),
                row_half(in.time_us, in.algbw, in.busbw, in.wrong).c_str(),
                s.report_timestamps ? timestamp_column().c_str() : "");
    std::fflush(stdout);
  }
  result.rows.push_back({{"size", bytes},
                         {"count", shown_count},
                         {"type", dtype_label(row.dtype)},
                         {"redop", redop},
                         {"root", root},
                         {"out_of_place", half_json(out)},
                         {"in_place", half_json(in)}});
}

// Every row: each dtype (-d), op (-o) and root (-r) after its warm-up, sizes -b to -e, -N times.
SweepResult sweep(const PerfCollective& c, const Settings& s, comm::ProcessGroup& pg, Device device,
                  bool printer) {
  std::vector<int> roots = {c.has_root ? s.root : -1};  // -1: no root column value
  if (c.has_root && s.root < 0) {
    roots.clear();
    for (int r = 0; r < pg.size(); ++r) roots.push_back(r);
  }
  SweepResult result;
  for (DType dtype : s.dtypes)
    for (ReduceOp op : c.has_op ? s.ops : std::vector<ReduceOp>{ReduceOp::sum})
      for (int root : roots) {
        warm_up(pg, c, s, device, dtype, op, std::max(root, 0));
        for (int cycle = 0; s.run_cycles == 0 || cycle < s.run_cycles; ++cycle)
          for (std::optional<size_t> bytes = s.min_bytes; bytes; bytes = next_size(s, *bytes)) {
            RowSpec row;
            row.count = row_count(c, *bytes, dtype, pg.size());
            row.dtype = dtype;
            row.op = op;
            row.root = std::max(root, 0);
            run_row(c, s, pg, device, row, root, printer, result);
          }
      }
  return result;
}

// Below the table: nccl-tests' footer, and the --json file.
void print_results(const PerfCollective& c, const Settings& s, const comm::ProcessGroup& pg,
                   const SweepResult& result) {
  std::printf("%s",
              table_footer(result.wrong, result.avg_busbw(), str_cat(c.name, "_perf")).c_str());
  std::fflush(stdout);
  if (s.json_path.empty()) return;
  std::ofstream f(s.json_path);
  f << nlohmann::json{{"collective", c.name},
                      {"world_size", pg.size()},
                      {"backend", pg.backend_name()},
                      {"device", choice_name(kDeviceTypes, s.device)},
                      {"time_statistic", statistic_label(s.statistic)},
                      {"rows", result.rows},
                      {"wrong", result.wrong},
                      {"avg_busbw", result.avg_busbw()}}
           .dump(2)
    << "\n";
  if (!f) RG_THROW(IoError, "cannot write --json ", s.json_path);
}

// The run: set up, check what can be checked before any buffer, the lines above the table, the
// sweep, the lines below it. Rank 0 prints; every rank runs every collective.
int run_sweep(const PerfCollective& c, const Settings& s) {
  Job job = start_job(s);
  comm::ProcessGroup& pg = *job.pg;
  check_host_memory(c, s, pg.size(), job.local_ranks);
  if (c.has_root && s.root >= pg.size())
    RG_THROW(InvalidArgument, "-r/--root ", s.root, " is not a rank of this world of ", pg.size());
  const bool printer = pg.rank() == 0;
  if (printer) check_output_path(s.json_path, "--json");  // before the sweep, not after it
  const auto lines = rank_lines(pg, job.device);
  if (printer) print_preamble(c, s, pg, lines);
  const SweepResult result = sweep(c, s, pg, job.device, printer);
  if (printer) print_results(c, s, pg, result);
  pg.barrier()->wait();
  job.pg.reset();
  if (job.worker_store) job.worker_store->finish(comm::default_collective_timeout());
  return result.wrong > 0 ? 1 : 0;
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
    std::fprintf(stderr, "%s_perf: error: %s\n", c.name, user_message(e).c_str());
    return 2;
  }
}

}  // namespace ringgrad::perf
