// Tests of comm/launcher/job_event and worker_output: the event survives the store as JSON,
// the summary names rank, local rank, node, exit code or signal name, time and stderr lines,
// and worker output is split into lines, prefixed for --tee and kept as a stderr tail.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/launcher/error_file.h"
#include "comm/launcher/job_event.h"
#include "comm/launcher/worker_output.h"

using namespace ringgrad::comm;

TEST_CASE("job event: JSON round trip and the failure summary") {
  JobEvent e;
  e.kind = JobEvent::Kind::worker_failed;
  e.node_rank = 1;
  e.hostname = "gpu-7";
  e.failure.global_rank = 5;
  e.failure.local_rank = 1;
  e.failure.pid = 4242;
  e.failure.status = ExitStatus{128 + SIGSEGV, SIGSEGV};
  e.failure.time = "2026-01-02 03:04:05";
  e.failure.stderr_tail = {"Traceback:", "  bad \"quote\"\tand tab"};
  JobEvent back = JobEvent::from_json(e.to_json());
  CHECK(back.kind == e.kind);
  CHECK(back.failure.stderr_tail == e.failure.stderr_tail);
  CHECK(back.failure.status.signal == SIGSEGV);

  std::string s = format_summary(back, 2, 2);
  CHECK(s.find("rank 5 (local rank 1, node 1 on host gpu-7, pid 4242)") != std::string::npos);
  CHECK(s.find("signal SIGSEGV") != std::string::npos);
  CHECK(s.find("2026-01-02 03:04:05") != std::string::npos);
  CHECK(s.find("    | Traceback:") != std::string::npos);
  CHECK(s.find("2 restarts used") != std::string::npos);

  e.failure.status = ExitStatus{3, 0};
  CHECK(format_summary(e, 0, 0).find("exit code 3") != std::string::npos);
  JobEvent stop;
  stop.kind = JobEvent::Kind::stopped;
  stop.signal = SIGINT;
  stop.node_rank = 0;
  CHECK_FALSE(stop.restartable(/*elastic=*/true));
  JobEvent lost;
  lost.kind = JobEvent::Kind::node_lost;
  lost.node_rank = 1;
  CHECK(lost.restartable(/*elastic=*/true));  // the others re-form without it
  CHECK_FALSE(lost.restartable(/*elastic=*/false));
  lost.node_rank = -1;  // the store's host: nobody is left to re-form around
  CHECK_FALSE(lost.restartable(/*elastic=*/true));
  CHECK(format_summary(stop, 0, 0).find("received SIGINT") != std::string::npos);
  CHECK_THROWS(JobEvent::from_json("{\"kind\": 0}"));
  CHECK(signal_name(SIGKILL) == "SIGKILL");
}

TEST_CASE("error file: @record's JSON is read, and the summary shows the exception") {
  const std::string path = std::filesystem::temp_directory_path() / "ringgrad_error_file.json";
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  // What torch.distributed.elastic's @record writes (its ErrorHandler.record_exception).
  write(R"({"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": )"
        R"("Traceback (most recent call last):\n  File \"t.py\", line 3, in main\n)"
        R"(ValueError: bad batch\n", "timestamp": "1700000000"}}})");
  auto e = read_error_file(path);
  REQUIRE(e);
  CHECK(e->message == "ValueError: bad batch");
  CHECK(e->traceback == std::vector<std::string>{"Traceback (most recent call last):",
                                                 "  File \"t.py\", line 3, in main",
                                                 "ValueError: bad batch"});
  write(R"({"message": "RuntimeError: plain"})");  // the newer plain-string form
  CHECK(read_error_file(path)->message == "RuntimeError: plain");
  for (const char* junk : {"", "{", "[]", R"({"other": 1})", R"({"message": 7})"}) {
    CAPTURE(junk);
    write(junk);
    CHECK_FALSE(read_error_file(path));
  }
  std::string long_stack;
  for (int i = 0; i < 100; ++i) long_stack += "line " + std::to_string(i) + "\\n";
  write(R"({"message": {"message": "E: x", "extraInfo": {"py_callstack": ")" + long_stack +
        "\"}}}");
  e = read_error_file(path);
  REQUIRE(e);
  CHECK(e->traceback.size() == kMaxTracebackLines);
  CHECK(e->traceback.back() == "line 99");  // the end of a traceback is what matters
  std::filesystem::remove(path);
  CHECK_FALSE(read_error_file(path));

  // Through the store and into the summary, in place of the stderr lines.
  JobEvent ev;
  ev.node_rank = 0;
  ev.hostname = "h";
  ev.failure.global_rank = 1;
  ev.failure.status = ExitStatus{1, 0};
  ev.failure.stderr_tail = {"noise"};
  ev.failure.error = WorkerError{"ValueError: bad batch",
                                 {"Traceback (most recent call last):", "ValueError: bad batch"}};
  JobEvent back = JobEvent::from_json(ev.to_json());
  REQUIRE(back.failure.error);
  CHECK(back.failure.error->traceback == ev.failure.error->traceback);
  const std::string s = format_summary(back, 0, 0);
  CHECK(s.find("its error file says: ValueError: bad batch") != std::string::npos);
  CHECK(s.find("traceback of rank 1:\n    | Traceback (most recent call last):") !=
        std::string::npos);
  CHECK(s.find("noise") == std::string::npos);
}

TEST_CASE("worker output: lines, --tee prefix and files, stderr tail") {
  const std::string dir = std::filesystem::temp_directory_path() / "ringgrad-worker-output-test";
  std::filesystem::remove_all(dir);
  {
    WorkerOutputConfig config;
    config.prefix = "[1:3]: ";
    config.redirect_bits = 1;  // stdout to the file only
    config.console = false;    // keep the test's console clean
    config.log_dir = dir + "/attempt_0/1";
    config.tail_lines = 2;
    WorkerOutput out(config);
    const std::string text = "one\ntw";
    out.write(1, text.data(), text.size());
    out.write(1, "o\n", 2);  // a line split across reads is joined
    for (const char* l : {"e1\n", "e2\n", "e3"}) out.write(2, l, std::strlen(l));
    out.finish();  // the unterminated "e3" still counts as a line
    CHECK(out.stderr_tail() == std::vector<std::string>{"e2", "e3"});
  }
  std::ifstream log(dir + "/attempt_0/1/stdout.log");
  std::string a, b;
  std::getline(log, a);
  std::getline(log, b);
  CHECK(a == "one");
  CHECK(b == "two");
  CHECK_FALSE(std::filesystem::exists(dir + "/attempt_0/1/stderr.log"));  // not selected
  std::filesystem::remove_all(dir);
}
