#include "common/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/error.h"

extern char** environ;

namespace cputrain {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// The child's environment: ours, with each NAME in `env` replaced or added.
std::vector<std::string> MergedEnv(const std::vector<std::string>& env) {
  std::vector<std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& add : env) replaced |= add.substr(0, add.find('=')) == name;
    if (!replaced) merged.push_back(entry);
  }
  merged.insert(merged.end(), env.begin(), env.end());
  return merged;
}

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Sets up child fd `fd` (1 or 2) as `how` says; returns our reading end for kCapture, else -1.
// `child_end` receives the fd the parent must close after the spawn.
int SetUpOutput(posix_spawn_file_actions_t* actions, int fd, SubprocessOptions::Output how,
                int* child_end) {
  if (how == SubprocessOptions::Output::kDiscard) {
    posix_spawn_file_actions_addopen(actions, fd, "/dev/null", O_WRONLY, 0);
  }
  if (how != SubprocessOptions::Output::kCapture) return -1;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw RuntimeError(fmt::format("pipe: {}", std::strerror(errno)));
  posix_spawn_file_actions_adddup2(actions, p[1], fd);
  *child_end = p[1];
  return p[0];
}

// Reads what is there on fd into *to; closes fd at its end (or on an error).
void Drain(int& fd, std::string* to) {
  char buf[65536];
  const ssize_t got = read(fd, buf, sizeof buf);
  if (got > 0) {
    to->append(buf, static_cast<std::size_t>(got));
  } else if (got == 0 || errno != EINTR) {
    CloseFd(fd);
  }
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv, const SubprocessOptions& options)
    : stdin_text_(options.stdin_text), timeout_seconds_(options.timeout_seconds) {
  CPUTRAIN_CHECK(!argv.empty(), "Subprocess needs a program");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int child_ends[3] = {-1, -1, -1};
  try {
    if (stdin_text_.empty()) {
      posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    } else {
      // A socket pair, not a pipe: send(MSG_NOSIGNAL) to a child that exited without reading
      // returns EPIPE instead of raising SIGPIPE in this process.
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        throw RuntimeError(fmt::format("socketpair: {}", std::strerror(errno)));
      }
      shutdown(sv[0], SHUT_WR);
      posix_spawn_file_actions_adddup2(&actions, sv[0], 0);
      child_ends[0] = sv[0];
      in_fd_ = sv[1];
    }
    out_fd_ = SetUpOutput(&actions, 1, options.out, &child_ends[1]);
    err_fd_ = SetUpOutput(&actions, 2, options.err, &child_ends[2]);
  } catch (...) {
    posix_spawn_file_actions_destroy(&actions);
    for (int& fd : child_ends) CloseFd(fd);
    for (int* fd : {&in_fd_, &out_fd_, &err_fd_}) CloseFd(*fd);
    throw;
  }
  const std::vector<std::string> env = MergedEnv(options.env);
  std::vector<char*> args = CStrings(argv), envp = CStrings(env);
  const int rc = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  for (int& fd : child_ends) CloseFd(fd);
  if (rc != 0) {
    pid_ = -1;
    for (int* fd : {&in_fd_, &out_fd_, &err_fd_}) CloseFd(*fd);
    throw RuntimeError(fmt::format("cannot run '{}': {}", argv[0], std::strerror(rc)),
                       "check that the program exists and is executable");
  }
  start_ = Now();
}

Subprocess::~Subprocess() {
  for (int* fd : {&in_fd_, &out_fd_, &err_fd_}) CloseFd(*fd);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

SubprocessResult Subprocess::Wait() {
  CPUTRAIN_CHECK(pid_ > 0, "Subprocess::Wait called twice");
  SubprocessResult r;
  const double deadline = timeout_seconds_ > 0 ? start_ + timeout_seconds_ : 0;
  std::size_t written = 0;
  // Feed stdin and read both outputs together, so that a child blocked on a full pipe of one
  // stream cannot deadlock us waiting on the other.
  while (in_fd_ >= 0 || out_fd_ >= 0 || err_fd_ >= 0) {
    int wait_ms = -1;
    if (deadline > 0) {
      const double left = deadline - Now();
      if (left <= 0) break;
      wait_ms = static_cast<int>(std::ceil(left * 1000));
    }
    pollfd fds[3];
    int n = 0;
    if (in_fd_ >= 0) fds[n++] = {in_fd_, POLLOUT, 0};
    if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
    if (poll(fds, static_cast<nfds_t>(n), wait_ms) < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(fmt::format("poll: {}", std::strerror(errno)));
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in_fd_) {
        const ssize_t k = send(in_fd_, stdin_text_.data() + written, stdin_text_.size() - written,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) written += static_cast<std::size_t>(k);
        if (written == stdin_text_.size() || (k < 0 && errno != EINTR && errno != EAGAIN)) {
          CloseFd(in_fd_);
        }
      } else {
        Drain(fds[i].fd == out_fd_ ? out_fd_ : err_fd_, fds[i].fd == out_fd_ ? &r.out : &r.err);
      }
    }
  }
  for (int* fd : {&in_fd_, &out_fd_, &err_fd_}) CloseFd(*fd);
  int status = 0;
  for (;;) {
    const pid_t got = waitpid(pid_, &status, deadline > 0 && !r.timed_out ? WNOHANG : 0);
    if (got == pid_) break;
    if (got < 0 && errno != EINTR)
      throw RuntimeError(fmt::format("waitpid: {}", std::strerror(errno)));
    if (got == 0 && Now() >= deadline) {
      kill(pid_, SIGKILL);
      r.timed_out = true;
    } else if (got == 0) {
      usleep(2000);
    }
  }
  pid_ = -1;
  r.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + r.term_signal;
  return r;
}

SubprocessResult RunSubprocess(const std::vector<std::string>& argv,
                               const SubprocessOptions& options) {
  return Subprocess(argv, options).Wait();
}

std::string FindInPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::string p = path;
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      const std::string full = dir + "/" + program;
      if (access(full.c_str(), X_OK) == 0) return full;
    }
    start = end + 1;
  }
  return "";
}

std::string ExecutableDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

}  // namespace cputrain
