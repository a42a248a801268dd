// WorkerProcess: fork + exec with the child set up before exec (process group, parent-death
// signal, pipes). A close-on-exec pipe reports an exec failure's errno back to the parent.
#include "comm/launcher/worker_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace ringgrad::comm {

std::string signal_name(int signal) {
  if (const char* abbrev = sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

std::string ExitStatus::describe() const {
  if (stop_signal) return "stopped by " + signal_name(stop_signal);
  return signal ? "signal " + signal_name(signal) : "exit code " + std::to_string(code);
}

namespace {

// The children of this process, from each /proc/PID/stat's fourth field.
std::vector<pid_t> own_children() {
  std::vector<pid_t> children;
  const pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld", &state, &ppid) == 2 && ppid == self)
      children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

struct Pipe {
  UniqueFd read, write;
  Pipe() {
    int fds[2];
    RG_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "pipe2 failed: ", std::strerror(errno));
    read = UniqueFd(fds[0]);
    write = UniqueFd(fds[1]);
  }
};

// In the child, between fork and exec: only async-signal-safe calls, then _exit on failure.
[[noreturn]] void exec_child(pid_t launcher, const Pipe* in, const Pipe& out, const Pipe& err,
                             const Pipe& status, char* const* argv, char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (in) ::dup2(in->read.get(), STDIN_FILENO);
  ::dup2(out.write.get(), STDOUT_FILENO);
  ::dup2(err.write.get(), STDERR_FILENO);
  // Only stdin/stdout/stderr cross exec: a worker holding the launcher's store sockets would
  // keep its port bound after the launcher is gone.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  ::execvpe(argv[0], argv, envp);
  const int e = errno;
  (void)!::write(status.write.get(), &e, sizeof e);
  ::_exit(127);
}

}  // namespace

WorkerProcess::WorkerProcess(const std::vector<std::string>& command,
                             const std::vector<std::string>& env, bool stdin_pipe) {
  RG_CHECK(!command.empty(), "WorkerProcess: empty command");
  std::vector<char*> argv, envp;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::optional<Pipe> in;
  if (stdin_pipe) in.emplace();
  Pipe out, err, status;
  const pid_t launcher = ::getpid();
  pid_ = ::fork();
  RG_CHECK(pid_ >= 0, "fork failed: ", std::strerror(errno));
  if (pid_ == 0)
    exec_child(launcher, in ? &*in : nullptr, out, err, status, argv.data(), envp.data());
  ::setpgid(pid_, pid_);  // also here, so the group exists before we ever signal it
  if (in) {
    in->read.reset();
    stdin_ = std::move(in->write);
  }
  out.write.reset();
  err.write.reset();
  status.write.reset();
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(status.read.get(), &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  stdout_ = std::move(out.read);
  stderr_ = std::move(err.read);
  if (n == sizeof exec_errno) {
    ::waitpid(pid_, nullptr, 0);
    exit_ = ExitStatus{127, 0};
    // ENOENT for a file that is there: the kernel could not find the interpreter its #! names.
    if (exec_errno == ENOENT && command[0].find('/') != std::string::npos &&
        ::access(command[0].c_str(), F_OK) == 0)
      RG_THROW(Error, "cannot run '", command[0],
               "': the interpreter its first line (#!) names was not found");
    RG_THROW(Error, "cannot run '", command[0], "': ", std::strerror(exec_errno));
  }
  ::fcntl(stdout_.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(stderr_.get(), F_SETFL, O_NONBLOCK);
}

WorkerProcess::~WorkerProcess() {
  if (!exit_) {
    signal_group(SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  } else if (group_alive()) {
    signal_group(SIGKILL);
  }
  reap_strays();
}

void WorkerProcess::close_stdout() { stdout_.reset(); }
void WorkerProcess::close_stderr() { stderr_.reset(); }
void WorkerProcess::close_stdin() { stdin_.reset(); }

std::optional<ExitStatus> WorkerProcess::poll_exit() {
  if (exit_) return exit_;
  int status = 0;
  // Each change is reported once: stopped, continued, or ended.
  while (::waitpid(pid_, &status, WNOHANG | WUNTRACED | WCONTINUED) == pid_) {
    if (WIFSTOPPED(status)) {
      if (!stopped_) stopped_ = Stop{WSTOPSIG(status), std::chrono::steady_clock::now()};
    } else if (WIFCONTINUED(status)) {
      stopped_.reset();
    } else {
      stopped_.reset();
      exit_ = WIFSIGNALED(status) ? ExitStatus{128 + WTERMSIG(status), WTERMSIG(status)}
                                  : ExitStatus{WEXITSTATUS(status), 0};
      break;
    }
  }
  return exit_;
}

void WorkerProcess::signal_group(int signal) const {
  if (pid_ > 0) ::kill(-pid_, signal);
}

void WorkerProcess::reap_strays() {
  if (exit_)
    while (::waitpid(-pid_, nullptr, WNOHANG) > 0) {
    }
}

bool WorkerProcess::group_alive() const { return pid_ > 0 && ::kill(-pid_, 0) == 0; }

void kill_adopted_orphans(std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (auto left = own_children(); !left.empty(); left = own_children()) {
    for (pid_t pid : left) ::kill(pid, SIGKILL);
    for (pid_t pid : left) ::waitpid(pid, nullptr, 0);  // SIGKILL: a short, certain wait
    if (std::chrono::steady_clock::now() >= deadline) return;
  }
}

}  // namespace ringgrad::comm
