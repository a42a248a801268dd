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

const std::pair<const char*, DType> kDTypeNames[] = {
    {"float", DType::f32}, {"double", DType::f64}, {"half", DType::f16}, {"bfloat16", DType::bf16},
    {"int32", DType::i32}, {"int64", DType::i64},  {"uint8", DType::u8}};
const std::pair<const char*, ReduceOp> kOpNames[] = {{"sum", ReduceOp::sum},
                                                     {"prod", ReduceOp::prod},
                                                     {"max", ReduceOp::max},
                                                     {"min", ReduceOp::min},
                                                     {"avg", ReduceOp::avg}};

template <class T, size_t N>
std::vector<T> parse_choice(const std::string& text, const std::pair<const char*, T> (&names)[N],
                            const char* flag) {
  std::vector<T> all;
  std::string valid;
  for (const auto& [name, value] : names) {
    all.push_back(value);
    if (text == name) return {value};
    valid += std::string(name) + ", ";
  }
  if (text == "all") return all;
  RG_THROW(InvalidArgument, flag, " '", text, "' is not one of: ", valid, "all");
}

}  // namespace

const char* dtype_label(DType d) {
  for (const auto& [name, value] : kDTypeNames)
    if (value == d) return name;
  return "?";
}

std::optional<int> parse_settings(int argc, char** argv, const PerfCollective& c, Settings& s) {
  CLI::App app{str_cat(c.name, "_perf: nccl-tests-style benchmark of ringgrad's ", c.name,
                       ".\nalgbw = size / time; busbw = algbw * ", c.bus_formula,
                       " (n = world size): the per-link rate comparable to the link speed.\n"
                       "Start N ranks with ringgrad-run --nproc-per-node N, or mpirun -np N (with "
                       "MASTER_ADDR/MASTER_PORT).")};
  std::string minb = "32M", maxb = "32M", stepb = "1M", dtype = "float", op = "sum";
  app.add_option("-b,--minbytes", minb, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", maxb, "largest size");
  app.add_option("-i,--stepbytes", stepb, "additive step between sizes");
  app.add_option("-f,--stepfactor", s.step_factor, "multiplicative step (overrides -i when > 1)")
      ->check(cli::number_in(0, 1024));
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  app.add_option("-n,--iters", s.iters, "timed iterations per size")
      ->check(cli::whole_number_in(1, kMaxInt));
  app.add_option("-w,--warmup_iters", s.warmup, "untimed iterations first")
      ->check(cli::whole_number_in(0, kMaxInt));
  app.add_option("-c,--check", s.check, "check results this many times (0: off)")
      ->check(cli::whole_number_in(0, kMaxInt));
  app.add_option("-d,--datatype", dtype,
                 "float, double, half, bfloat16, int32, int64, uint8 or all");
  app.add_option("-o,--op", op, "sum, prod, max, min, avg or all");
  app.add_option("-r,--root", s.root, "root rank (broadcast)")
      ->check(cli::whole_number_in(0, kMaxInt));
  app.add_option("--backend", s.backend,
                 "ring (ours; host or device buffers) or nccl (device buffers)");
  app.add_option("--device", s.device,
                 "cpu or cuda: where the buffers live (cuda: the GPU LOCAL_RANK names)");
  app.add_option("--json", s.json_path, "also write the results as JSON to this file");
  try {
    app.parse(argc, argv);
    s.min_bytes = parse_bytes(minb, "-b/--minbytes");
    s.max_bytes = parse_bytes(maxb, "-e/--maxbytes");
    s.step_bytes = parse_bytes(stepb, "-i/--stepbytes");
    s.dtypes = parse_choice(dtype, kDTypeNames, "-d/--datatype");
    s.ops = parse_choice(op, kOpNames, "-o/--op");
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
