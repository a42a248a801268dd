// The --check report table and its file form.
#include "comm/launcher/check/check_table.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace ringgrad::comm {

const char* check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::pass: return "PASS";
    case CheckStatus::fail: return "FAIL";
    case CheckStatus::info: return "INFO";
  }
  return "?";
}

bool all_passed(const std::vector<CheckRow>& rows) {
  return std::none_of(rows.begin(), rows.end(),
                      [](const CheckRow& r) { return r.status == CheckStatus::fail; });
}

std::string format_check_table(const std::vector<CheckRow>& rows) {
  size_t node_w = 4, check_w = 5;  // the header words
  for (const auto& r : rows) {
    node_w = std::max(node_w, r.node.size());
    check_w = std::max(check_w, r.check.size());
  }
  std::ostringstream out;
  auto line = [&](const std::string& node, const std::string& check, const std::string& result,
                  const std::string& detail) {
    out << node << std::string(node_w - node.size() + 2, ' ') << check
        << std::string(check_w - check.size() + 2, ' ') << result << "  " << detail << "\n";
  };
  line("NODE", "CHECK", "RESULT", "DETAIL");
  for (const auto& r : rows)
    line(r.node, r.check, std::string(check_status_name(r.status)) + "  ", r.detail);
  const auto failed = std::count_if(
      rows.begin(), rows.end(), [](const CheckRow& r) { return r.status == CheckStatus::fail; });
  if (failed == 0)
    out << "ringgrad-run --check: all " << rows.size() << " checks passed\n";
  else
    out << "ringgrad-run --check: " << failed << " of " << rows.size() << " checks FAILED\n";
  return out.str();
}

namespace {

std::string one_field(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
  return s;
}

CheckStatus parse_status(const std::string& word, int line) {
  for (auto s : {CheckStatus::pass, CheckStatus::fail, CheckStatus::info})
    if (word == check_status_name(s)) return s;
  RG_THROW(InvalidArgument, "check report line ", line, ": unknown result '", word, "'");
}

}  // namespace

std::string serialize_check_report(int node_rank, const std::vector<int>& perf_ports,
                                   const std::vector<CheckRow>& rows) {
  std::string text = str_cat("# node ", node_rank, "\n# perf-ports");
  for (int port : perf_ports) text += str_cat(" ", port);
  text += "\n";
  for (const auto& r : rows)
    text += one_field(r.node) + "\t" + one_field(r.check) + "\t" + check_status_name(r.status) +
            "\t" + one_field(r.detail) + "\n";
  return text;
}

std::vector<CheckRow> parse_check_rows(const std::string& text) {
  std::vector<CheckRow> rows;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    size_t start = 0;
    for (int i = 0; i < 3; ++i) {
      const size_t tab = line.find('\t', start);
      if (tab == std::string::npos)
        RG_THROW(InvalidArgument, "check report line ", number,
                 ": expected 4 tab-separated fields");
      fields.push_back(line.substr(start, tab - start));
      start = tab + 1;
    }
    rows.push_back({fields[0], fields[1], parse_status(fields[2], number), line.substr(start)});
  }
  return rows;
}

int report_node_rank(const std::string& text) {
  const std::string marker = "# node ";
  if (text.rfind(marker, 0) != 0) return -1;
  return std::atoi(text.c_str() + marker.size());
}

int report_perf_port(const std::string& text, size_t i) {
  const std::string marker = "\n# perf-ports";
  const auto at = text.find(marker);
  if (at == std::string::npos) return 0;
  std::istringstream ports(
      text.substr(at + marker.size(), text.find('\n', at + 1) - at - marker.size()));
  int port = 0;
  for (size_t k = 0; k <= i; ++k)
    if (!(ports >> port)) return 0;
  return port;
}

}  // namespace ringgrad::comm
