// WorkerGroup implementation.
#include "comm/launcher/worker_group.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <thread>

#include "core/error.h"

namespace ringgrad::comm {

using Clock = std::chrono::steady_clock;

namespace {

// The file's folder exists and no earlier attempt's file is left to be taken for this one's.
void prepare_error_file(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) RG_THROW(IoError, "cannot create the folder of error file '", path, "': ", ec.message());
  std::filesystem::remove(path, ec);
}

}  // namespace

WorkerGroup::WorkerGroup(std::vector<WorkerSpec> specs, std::chrono::milliseconds stopped_timeout)
    : stopped_timeout_(stopped_timeout) {
  workers_.reserve(specs.size());
  for (auto& spec : specs) {
    Worker w;
    w.output = std::make_unique<WorkerOutput>(spec.output);
    try {
      prepare_error_file(spec.error_file);
      w.process = std::make_unique<WorkerProcess>(spec.command, spec.env);
    } catch (const Error& e) {
      WorkerFailure f;
      f.global_rank = spec.global_rank;
      f.local_rank = spec.local_rank;
      f.status = ExitStatus{127, 0};
      f.time = now_as_text();
      f.stderr_tail = {user_message(e)};
      if (!first_failure_) first_failure_ = f;
      w.reported = true;
    }
    w.spec = std::move(spec);
    workers_.push_back(std::move(w));
    if (first_failure_) break;  // no point starting the rest
  }
}

WorkerGroup::~WorkerGroup() { stop(SIGKILL, std::chrono::milliseconds(0)); }

void WorkerGroup::pump(Worker& w, int fd, int stream) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      w.output->write(stream, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {  // EOF: every writer (the worker and its children) has closed it
      stream == 1 ? w.process->close_stdout() : w.process->close_stderr();
    }
    return;  // n < 0 with EAGAIN: nothing more for now
  }
}

void WorkerGroup::reap(Worker& w) {
  if (!w.process || w.reported) return;
  auto status = w.process->poll_exit();
  if (!status) return;
  w.reported = true;
  // Whatever it wrote before exiting is in the pipes now: take it before reading the tail.
  if (w.process->stdout_fd() >= 0) pump(w, w.process->stdout_fd(), 1);
  if (w.process->stderr_fd() >= 0) pump(w, w.process->stderr_fd(), 2);
  w.output->finish();
  if (!status->ok() && !first_failure_ && !stopping_) {
    WorkerFailure f;
    f.global_rank = w.spec.global_rank;
    f.local_rank = w.spec.local_rank;
    f.pid = w.process->pid();
    f.status = *status;
    f.time = now_as_text();
    f.stderr_tail = w.output->stderr_tail();
    if (!w.spec.error_file.empty()) f.error = read_error_file(w.spec.error_file);
    first_failure_ = f;
  }
}

void WorkerGroup::fail_if_frozen(Worker& w) {
  if (!w.process || w.reported || first_failure_ || stopping_) return;
  const auto& stop = w.process->stopped();
  if (!stop || Clock::now() - stop->since < stopped_timeout_) return;
  WorkerFailure f;
  f.global_rank = w.spec.global_rank;
  f.local_rank = w.spec.local_rank;
  f.pid = w.process->pid();
  f.status = ExitStatus{0, 0, stop->signal};
  f.stopped_for = stopped_timeout_;
  f.time = now_as_text();
  f.stderr_tail = w.output->stderr_tail();
  first_failure_ = f;
}

WorkerGroup::State WorkerGroup::poll(std::chrono::milliseconds max_wait, int wake_fd) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, int>> owners;  // parallel to fds[1..]
  fds.push_back({wake_fd, POLLIN, 0});
  for (auto& w : workers_) {
    if (!w.process) continue;
    for (int stream = 1; stream <= 2; ++stream) {
      const int fd = stream == 1 ? w.process->stdout_fd() : w.process->stderr_fd();
      if (fd < 0) continue;
      fds.push_back({fd, POLLIN, 0});
      owners.push_back({&w, stream});
    }
  }
  const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(max_wait.count()));
  if (ready > 0)
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
        pump(*owners[i - 1].first, fds[i].fd, owners[i - 1].second);
  bool all_ok = true;
  for (auto& w : workers_) {
    reap(w);
    fail_if_frozen(w);
    if (w.process) w.process->reap_strays();
    auto status = w.process ? w.process->poll_exit() : std::nullopt;
    all_ok = all_ok && status && status->ok();
  }
  if (first_failure_) return State::failed;
  return all_ok ? State::succeeded : State::running;
}

void WorkerGroup::stop(int signal, std::chrono::milliseconds grace) {
  auto anything_left = [&] {
    for (auto& w : workers_)
      if (w.process && (!w.process->poll_exit() || w.process->group_alive())) return true;
    return false;
  };
  stopping_ = true;  // exits from here on were asked for: they are not failures
  for (auto& w : workers_)
    if (w.process) {
      w.process->signal_group(signal);
      w.process->signal_group(SIGCONT);  // a stopped worker acts on the signal only once running
    }
  const auto deadline = Clock::now() + grace;
  // Keep reading their output meanwhile: a worker blocked on a full pipe could not exit.
  while (anything_left() && Clock::now() < deadline) poll(std::chrono::milliseconds(20), -1);
  for (auto& w : workers_) {
    if (!w.process) continue;
    if (w.process->group_alive()) w.process->signal_group(SIGKILL);
    if (!w.reported) {
      // SIGKILL cannot be ignored: the wait is short and certain.
      while (!w.process->poll_exit()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      reap(w);
    }
    w.process->reap_strays();
  }
  kill_adopted_orphans(std::chrono::milliseconds(1000));
}

}  // namespace ringgrad::comm
