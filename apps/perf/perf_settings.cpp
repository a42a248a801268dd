// The perf binaries' flags: nccl-tests' names, meanings, defaults and ranges (its
// src/common.cu), plus ringgrad's --backend, --device and --json.
#include "apps/perf/perf_settings.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "apps/cli_checks.h"
#include "core/error.h"

namespace ringgrad::perf {

using comm::ReduceOp;

namespace {

// A whole number of bytes with an optional K, M, G or T (powers of 1024): what nccl-tests takes.
// Anything else ("0x10", "8.9", "1e-3", "-1") is refused rather than read as some other number.
size_t parse_bytes(const std::string& text, const char* flag) {
  const size_t digits = text.find_first_not_of("0123456789");
  const std::string number = text.substr(0, digits);
  const std::string unit = digits == std::string::npos ? "" : text.substr(digits);
  const int shift = unit.empty()                 ? 0
                    : unit == "K" || unit == "k" ? 10
                    : unit == "M" || unit == "m" ? 20
                    : unit == "G" || unit == "g" ? 30
                    : unit == "T" || unit == "t" ? 40
                                                 : -1;
  // 1 TiB: more than any host or GPU here holds, and far from where the shift overflows.
  constexpr uint64_t kMaxBytes = uint64_t{1} << 40;
  const bool whole = !number.empty() && number.size() <= 13 && shift >= 0;
  const uint64_t value = whole ? std::stoull(number) : 0;
  if (!whole || value > (kMaxBytes >> shift))
    RG_THROW(InvalidArgument, flag, ": '", text,
             "' is not a whole byte count up to 1T (examples: 8, 64K, 128M, 1G)");
  return static_cast<size_t>(value << shift);
}

// In nccl-tests' -d all / -o all order.
const std::pair<const char*, DType> kDTypeNames[] = {
    {"uint8", DType::u8},  {"int32", DType::i32},  {"int64", DType::i64},    {"half", DType::f16},
    {"float", DType::f32}, {"double", DType::f64}, {"bfloat16", DType::bf16}};
const char* const kNcclOnlyTypes = "int8, uint32, uint64, f8e4m3, f8e5m2";
const std::pair<const char*, ReduceOp> kOpNames[] = {{"sum", ReduceOp::sum},
                                                     {"prod", ReduceOp::prod},
                                                     {"max", ReduceOp::max},
                                                     {"min", ReduceOp::min},
                                                     {"avg", ReduceOp::avg}};

template <class T, size_t N>
std::vector<T> parse_choice(const std::string& text, const std::pair<const char*, T> (&names)[N],
                            const char* flag, const std::string& nccl_only) {
  std::vector<T> all;
  std::string valid;
  for (const auto& [name, value] : names) {
    all.push_back(value);
    if (text == name) return {value};
    valid += std::string(name) + ", ";
  }
  if (text == "all") return all;
  const bool from_nccl = (", " + nccl_only + ",").find(", " + text + ",") != std::string::npos;
  RG_THROW(InvalidArgument, flag, " '", text, "' ",
           from_nccl ? "is nccl-tests' but ringgrad's collectives do not have it; use one of: "
                     : "is not one of: ",
           valid, "all");
}

// A flag of nccl-tests that means something only to its threads or to NCCL itself: its default
// value is accepted (a script written for nccl-tests runs), any other is refused with `why`.
CLI::Validator default_only(const std::string& value, const std::string& why) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        return text == value ? "" : "takes only " + value + " here: " + why;
      },
      value);
}

}  // namespace

const char* dtype_label(DType d) {
  for (const auto& [name, value] : kDTypeNames)
    if (value == d) return name;
  return "?";
}

const char* statistic_label(TimeStatistic a) {
  switch (a) {
    case TimeStatistic::rank0: return "rank 0's";
    case TimeStatistic::average: return "the average over ranks";
    case TimeStatistic::minimum: return "the minimum over ranks";
    case TimeStatistic::maximum: return "the maximum over ranks";
  }
  return "?";
}

std::optional<int> parse_settings(int argc, char** argv, const PerfCollective& c, Settings& s) {
  CLI::App app{str_cat(c.name, "_perf: nccl-tests' ", c.name, "_perf for ringgrad's ", c.name,
                       ", with its flags and table.\nalgbw = size / time; busbw = algbw * ",
                       c.bus.formula,
                       " (n = world size): the per-link rate comparable to the link speed.\n"
                       "Start N ranks with ringgrad-run --nproc-per-node N, or mpirun -np N (with "
                       "MASTER_ADDR/MASTER_PORT).")};
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  const char* one_rank =
      "each rank is a process with one device here; start more ranks with "
      "ringgrad-run --nproc-per-node N";
  std::string minb = "32M", maxb = "32M", stepb = "1M", dtype = "float", op = "sum", root = "0";
  int blocking = 0, average = 1;
  std::string ignored;
  // A flag that takes a whole number from `low` to `high`.
  auto whole_number = [&](const char* flags, auto& value, const char* help, unsigned long long low,
                          unsigned long long high, const char* group) {
    app.add_option(flags, value, help)->check(cli::whole_number_in(low, high))->group(group);
  };
  const char* sizes = "sizes";
  app.add_option("-b,--minbytes", minb, "smallest size (K/M/G suffixes; default 32M)")
      ->group(sizes);
  app.add_option("-e,--maxbytes", maxb, "largest size (default 32M)")->group(sizes);
  app.add_option("-i,--stepbytes", stepb, "additive step between sizes (default 1M)")->group(sizes);
  whole_number("-f,--stepfactor", s.step_factor,
               "multiplicative step, any whole number (> 1: used instead of -i)", 0,
               std::numeric_limits<int64_t>::max(), sizes);

  const char* coll = "the collective";
  app.add_option("-o,--op", op, "sum, prod, max, min, avg or all (reductions)")->group(coll);
  app.add_option("-d,--datatype", dtype,
                 "uint8, int32, int64, half, float, double, bfloat16 or all")
      ->group(coll);
  app.add_option("-r,--root", root, "root rank (broadcast); -1 or all: every rank in turn")
      ->group(coll);

  const char* timing = "timing";
  whole_number("-n,--iters", s.iters, "timed iterations per size", 1, kMaxInt, timing);
  whole_number("-m,--agg_iters", s.agg_iters, "collectives issued together per iteration", 1,
               kMaxInt, timing);
  whole_number("-w,--warmup_iters", s.warmup,
               "untimed collectives at each size (sizes doubling from -b) before the sweep", 0,
               kMaxInt, timing);
  whole_number("-N,--run_cycles", s.run_cycles, "sweeps, each printed (0: until stopped)", 0,
               kMaxInt, timing);
  whole_number("-z,--blocking", blocking,
               "0: wait for the last collective only; 1: wait and barrier after each; 2: wait "
               "after each; 3: wait and barrier after each iteration, barrier not timed",
               0, 3, timing);
  whole_number("-a,--average", average,
               "the time reported: 0 rank 0's, 1 the average over ranks (nccl-tests' default), "
               "2 the minimum, 3 the maximum",
               0, 3, timing);
  whole_number("-C,--report_cputime", s.report_cputime,
               "1: report the time to issue the collectives instead of to complete them", 0, 1,
               timing);
  whole_number("-S,--report_timestamps", s.report_timestamps,
               "1: a timestamp at the end of each row", 0, 1, timing);
  whole_number("-T,--timeout", s.timeout_s,
               "seconds any collective may wait before the run fails (0: RINGGRAD_TIMEOUT_S, "
               "else 600)",
               0, kMaxInt, timing);

  const char* checking = "checking and output";
  whole_number("-c,--check", s.check, "check the results this many times (0: off)", 0, kMaxInt,
               checking);
  whole_number("-u,--unalign", s.unalign, "offset of the buffers' first element, in elements", 0,
               1 << 20, checking);
  app.add_option("-J,--output_file,--json", s.json_path,
                 "also write the results as JSON to this file (ringgrad's layout)")
      ->group(checking);

  const char* nccl = "nccl-tests' flags for NCCL or its threads: their default only";
  // One that takes only `value` (its help says what it is), refusing any other with `why`.
  auto nccl_default = [&](const char* flags, const char* value, const char* help, const char* why) {
    app.add_option(flags, ignored, help)->check(default_only(value, why))->group(nccl);
  };
  nccl_default("-t,--nthreads", "1", "threads per process (nccl-tests'; 1 here)", one_rank);
  nccl_default("-g,--ngpus", "1", "GPUs per thread (nccl-tests'; 1 here)", one_rank);
  whole_number("-p,--parallel_init", ignored, "0 or 1: nothing to do (one rank per process)", 0, 1,
               nccl);
  nccl_default("-y,--stream_null", "0", "0", "ringgrad's collectives run on their own streams");
  nccl_default("-G,--cudagraph", "0", "0",
               "the ring is driven by host threads, there is no graph to capture");
  nccl_default("-R,--local_register", "0", "0", "ringgrad does not register buffers with NCCL");
  app.add_option("-x,--cta_policy", ignored, "not set: a CTA policy is NCCL's")
      ->check(CLI::Validator(
          [](std::string&) { return std::string("a CTA policy is NCCL's; leave it out"); }, ""))
      ->group(nccl);
  nccl_default("-D,--device_implementation", "0", "0", "NCCL's device API is not used");
  whole_number("-V,--device_cta_count", ignored, "1 to 128: only used with -D", 1, 128, nccl);
  nccl_default("-M,--memory", "0", "0", "no GPU memory report is written");
  nccl_default("-I,--per_iter_timing", "0", "0",
               "timing each iteration would mean waiting for each one, changing what is timed; "
               "use -z 2 for that");
  nccl_default("-K,--per_iter_skip", "0", "0 (used with -I only)",
               "it applies to -I, which is not available");

  const char* ours = "ringgrad's";
  cli::add_choice(app, "--backend", s.backend, comm::kBackends,
                  "ring: ours, host or device buffers; nccl: device buffers; auto: nccl for "
                  "device buffers when it can")
      ->group(ours);
  cli::add_choice(app, "--device", s.device, kDeviceTypes,
                  "where the buffers live (cuda: the GPU LOCAL_RANK names)")
      ->group(ours);
  try {
    app.parse(argc, argv);
    s.min_bytes = parse_bytes(minb, "-b/--minbytes");
    s.max_bytes = parse_bytes(maxb, "-e/--maxbytes");
    s.step_bytes = parse_bytes(stepb, "-i/--stepbytes");
    s.dtypes = parse_choice(dtype, kDTypeNames, "-d/--datatype", kNcclOnlyTypes);
    s.ops = parse_choice(op, kOpNames, "-o/--op", "mulsum");
    s.blocking = static_cast<Blocking>(blocking);
    s.statistic = static_cast<TimeStatistic>(average);
    if (root == "all" || root == "-1") {
      s.root = -1;
    } else {
      std::string r = root;
      if (!cli::whole_number_in(0, kMaxInt)(r).empty())
        RG_THROW(InvalidArgument, "-r/--root '", root,
                 "': give a rank (0 and up), or -1 or all for every rank in turn");
      s.root = std::stoi(root);
    }
    if (s.min_bytes > s.max_bytes)
      RG_THROW(InvalidArgument, "-b/--minbytes ", s.min_bytes, " is larger than -e/--maxbytes ",
               s.max_bytes);
    if (s.step_factor <= 1 && s.step_bytes == 0 && s.min_bytes < s.max_bytes)
      RG_THROW(InvalidArgument, "-f ", s.step_factor,
               " with -i 0 never reaches -e; use -f > 1 or -i > 0");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // one line, as every other bad flag
    std::fprintf(stderr, "%s_perf: %s (see --help)\n", c.name, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s_perf: %s\n", c.name, user_message(e).c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace ringgrad::perf
