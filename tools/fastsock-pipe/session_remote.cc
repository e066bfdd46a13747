#include "session_remote.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "worker_protocol.hpp"

extern char** environ;

namespace fastsock_pipe {
namespace {

class RemoteSession final : public Session {
 public:
  RemoteSession(pid_t pid, int cmd, int reply) : pid_(pid), cmd_(cmd), reply_(reply) {}
  ~RemoteSession() override {
    // Closing the command pipe makes a worker that is still serving give up; either way it
    // closes its connection, so its receiver ends too.
    close(cmd_);
    close(reply_);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

  bool begin_size(const SizePlan& p) override {
    repeats_ = static_cast<uint64_t>(p.repeats);
    WorkerCommand c{static_cast<uint32_t>(WorkerOp::begin_size), static_cast<uint32_t>(p.warmup),
                    static_cast<uint32_t>(p.trials), 0, p.bytes, repeats_, p.pool_bytes};
    WorkerReply r{};
    return call(c, r);
  }

  bool trial(std::vector<double>& samples, double& per_message) override {
    WorkerCommand c{static_cast<uint32_t>(WorkerOp::trial), 0, 0, 0, 0, 0, 0};
    WorkerReply r{};
    // A trial yields at most one sample per repetition; more means a confused worker.
    if (!call(c, r) || r.samples > repeats_) return false;
    const std::size_t old = samples.size();
    samples.resize(old + r.samples);
    if (!read_full(reply_, samples.data() + old, r.samples * sizeof(double))) return false;
    per_message = r.per_message;
    return true;
  }

  bool end_size(SizeOutcome& out) override {
    WorkerCommand c{static_cast<uint32_t>(WorkerOp::end_size), 0, 0, 0, 0, 0, 0};
    WorkerReply r{};
    if (!call(c, r) || !valid_array_path(r.tx_path) || !valid_array_path(r.rx_path)) return false;
    out.rx_errors = r.rx_errors;
    out.rx_first_bad = r.rx_first_bad;
    out.tx_errors = r.tx_errors;
    out.tx_path = static_cast<ArrayPath>(r.tx_path);
    out.rx_path = static_cast<ArrayPath>(r.rx_path);
    out.tx_transport.assign(r.tx_transport, strnlen(r.tx_transport, sizeof r.tx_transport));
    out.rx_transport.assign(r.rx_transport, strnlen(r.rx_transport, sizeof r.rx_transport));
    return true;
  }

  void finish() override {
    WorkerCommand c{static_cast<uint32_t>(WorkerOp::finish), 0, 0, 0, 0, 0, 0};
    write_full(cmd_, &c, sizeof c);
  }

 private:
  bool call(const WorkerCommand& c, WorkerReply& r) {
    return write_full(cmd_, &c, sizeof c) && read_full(reply_, &r, sizeof r) && r.ok;
  }
  pid_t pid_;
  int cmd_, reply_;
  uint64_t repeats_ = 0;
};

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// The worker's command line: the options that shape a transmitter session, nothing else.
std::vector<std::string> worker_args(const std::string& exe, const TransportSpec& t,
                                     const Options& opt, const std::string& unix_path, int in,
                                     int out) {
  std::vector<std::string> a = {exe, "--worker", std::to_string(in) + "," + std::to_string(out)};
  if (t.family == Family::inet6) a.push_back("-6");
  if (t.family == Family::unix_stream) a.insert(a.end(), {"--unix", unix_path});
  if (opt.mode == Mode::stream) a.push_back("-s");
  if (opt.mode == Mode::bidirectional) a.push_back("-2");
  if (opt.integrity) a.push_back("-i");
  a.insert(a.end(), {"--elements", element_name(opt.element), "--api", array_api_name(opt.api)});
  if (opt.socket_buffer > 0) a.insert(a.end(), {"-b", std::to_string(opt.socket_buffer)});
  if (opt.pin)
    a.insert(a.end(), {"--cpus", std::to_string(opt.cpu_tx) + "," + std::to_string(opt.cpu_rx)});
  if (opt.corrupt_at >= 0) a.insert(a.end(), {"--corrupt-at", std::to_string(opt.corrupt_at)});
  if (!t.preload.empty()) a.insert(a.end(), {"--expect-preload", t.preload});
  return a;
}

std::vector<std::string> worker_env(const std::string& ld_preload) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) env.emplace_back(*e);
  if (!ld_preload.empty()) env.push_back("LD_PRELOAD=" + ld_preload);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::unique_ptr<Session> spawn_worker_session(const TransportSpec& t, const Options& opt,
                                              const std::string& unix_path, std::string& error) {
  const std::string exe = self_exe();
  if (exe.empty()) {
    error = "cannot read /proc/self/exe to start a worker";
    return nullptr;
  }
  int cmd[2], reply[2];
  if (pipe2(cmd, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return nullptr;
  }
  if (pipe2(reply, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    close(cmd[0]);
    close(cmd[1]);
    return nullptr;
  }
  // Everything the child needs is built before fork(): it only calls async-signal-safe
  // functions between fork and exec.
  std::vector<std::string> args = worker_args(exe, t, opt, unix_path, cmd[0], reply[1]);
  std::vector<std::string> env = worker_env(worker_ld_preload(std::getenv("LD_PRELOAD"), t.preload));
  std::vector<char*> argv = c_strings(args), envp = c_strings(env);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    // The worker's two pipe ends survive exec; everything else of ours is close-on-exec.
    fcntl(cmd[0], F_SETFD, 0);
    fcntl(reply[1], F_SETFD, 0);
    execve(exe.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(cmd[0]);
  close(reply[1]);
  if (pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    close(cmd[1]);
    close(reply[0]);
    return nullptr;
  }
  auto session = std::make_unique<RemoteSession>(pid, cmd[1], reply[0]);
  WorkerReady ready{};
  if (!read_full(reply[0], &ready, sizeof ready)) {
    error = "the worker exited before connecting (see stderr)";
    return nullptr;
  }
  if (!ready.ok) {
    ready.reason[sizeof ready.reason - 1] = '\0';
    error = ready.reason;
    return nullptr;
  }
  return session;
}

}  // namespace fastsock_pipe
