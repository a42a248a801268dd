// The perf binaries' output, in nccl-tests' layout: the same columns, widths and number
// formats, so that anything parsing nccl-tests' output parses ours. Pure formatting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ringgrad::perf {

// `value` in `width` characters: 2 decimals, else 1, else none, else exponent (nccl-tests').
std::string fixed_width(double value, int width);

// The three lines above the rows ("#", the out-of-place/in-place line and the two column-name
// lines); "time" becomes "cputime" with -C 1, and -S 1 adds a timestamp column.
std::string table_header(bool cputime, bool timestamps);
// A row's first five columns: size, count, type, redop, root.
std::string row_start(size_t bytes, size_t count, const std::string& type, const std::string& redop,
                      int root);
// time, algbw, busbw, #wrong of one half (out-of-place or in-place); wrong < 0: not checked.
std::string row_half(double time_us, double algbw, double busbw, int64_t wrong);
std::string timestamp_column();  // the local time, right-aligned as nccl-tests' -S column
// "# Out of bounds values : N OK" ... "# Collective test concluded: NAME".
std::string table_footer(int64_t wrong, double avg_busbw, const std::string& program);

}  // namespace ringgrad::perf
