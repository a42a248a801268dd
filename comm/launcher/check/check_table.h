// CheckRow: one line of `ringgrad-run --check`'s report (which node, which check, the verdict
// and why), with the table printer and the tab-separated form the node checker hands to its
// launcher through a file. Pure functions, unit-tested in tests/comm/test_env_check.cpp.
#pragma once
#include <string>
#include <vector>

namespace ringgrad::comm {

// info: a fact that is neither good nor bad (no GPU on a CPU-only build); it never fails a check.
enum class CheckStatus { pass, fail, info };
const char* check_status_name(CheckStatus s);  // "PASS", "FAIL", "INFO"

struct CheckRow {
  std::string node;   // "0", "1 -> 0" for a pair of nodes, "all" for the whole job
  std::string check;  // "rendezvous", "worker port", "version", "cpus", "cuda", "all_reduce_perf"
  CheckStatus status = CheckStatus::pass;
  std::string detail;  // the reason, one line
  bool operator==(const CheckRow& o) const {
    return node == o.node && check == o.check && status == o.status && detail == o.detail;
  }
};

bool all_passed(const std::vector<CheckRow>& rows);  // no row is FAIL

// Aligned columns NODE, CHECK, RESULT, DETAIL, one row per line, then a closing verdict line.
std::string format_check_table(const std::vector<CheckRow>& rows);

// A report file: "# node N" (the node that wrote it), "# perf-ports P Q" (free ports node 0
// found for the stores of the ring and the NCCL benchmark jobs), then one row per line, fields
// separated by tabs (tabs and newlines in a detail become spaces).
std::string serialize_check_report(int node_rank, const std::vector<int>& perf_ports,
                                   const std::vector<CheckRow>& rows);
// The rows of a report; throws InvalidArgument naming the line that is malformed.
std::vector<CheckRow> parse_check_rows(const std::string& text);
// The node rank a report names; -1 when it names none (an empty or missing report).
int report_node_rank(const std::string& text);
// Perf port i of a report; 0 when it names none.
int report_perf_port(const std::string& text, size_t i);

}  // namespace ringgrad::comm
