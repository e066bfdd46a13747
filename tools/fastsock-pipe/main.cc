// fastsock-pipe: a NetPIPE-style benchmark over plain sockets (docs/fastsock-pipe.md).
// Deliberately not linked with libfastsock: it measures whatever socket library is preloaded.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "net.hpp"
#include "options.hpp"
#include "output.hpp"
#include "runner.hpp"
#include "schedule.hpp"

using namespace fastsock_pipe;

namespace {

constexpr int kExitOk = 0, kExitFailure = 1;

bool pin_to(int cpu, const char* who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot pin the %s to CPU %d: %s\n", who, cpu,
                 std::strerror(errno));
    return false;
  }
  return true;
}

int serve(int listen_fd) {
  int fd = accept_one(listen_fd);
  close(listen_fd);
  if (fd < 0) return kExitFailure;
  int rc = run_receiver(fd);
  close(fd);
  return rc;
}

int transmit(int fd, const Options& opt) {
  const Metadata meta = collect_metadata();
  if (!opt.quiet) table_header(stdout, opt);
  RunResult result;
  RowCallback on_row;
  if (!opt.quiet)
    on_row = [](const SizeStats& s, std::size_t i, std::size_t n) { table_row(stdout, s, i, n); };
  const bool ok = run_transmitter(fd, opt, on_row, result);
  close(fd);
  if (!ok) return kExitFailure;
  if (!opt.quiet) table_summary(stdout, result);
  bool written = true;
  if (!opt.csv_path.empty()) written &= write_csv(opt.csv_path, result);
  if (!opt.json_path.empty()) written &= write_json(opt.json_path, meta, opt, result);
  if (!opt.npout_path.empty()) written &= write_npout(opt.npout_path, opt, result);
  if (result.integrity_failed) {
    std::fprintf(stderr, "fastsock-pipe: %s\n", result.integrity_message.c_str());
    return kExitFailure;
  }
  if (opt.integrity && !opt.quiet)
    std::printf("# integrity check passed at all %zu sizes\n", result.sizes.size());
  return written ? kExitOk : kExitFailure;
}

int run_local(const Options& opt) {
  int port = 0;
  int lfd = listen_tcp("127.0.0.1", opt.port, &port);
  if (lfd < 0) return kExitFailure;
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) {
    std::perror("fastsock-pipe: fork");
    return kExitFailure;
  }
  if (child == 0) {
    if (opt.pin && !pin_to(opt.cpu_rx, "receiver")) _exit(kExitFailure);
    _exit(serve(lfd));
  }
  close(lfd);
  int rc = kExitFailure;
  if (!opt.pin || pin_to(opt.cpu_tx, "transmitter")) {
    int fd = connect_tcp("127.0.0.1", port);
    if (fd >= 0) rc = transmit(fd, opt);
    else kill(child, SIGTERM);  // it would wait in accept() forever
  } else {
    kill(child, SIGTERM);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (rc == kExitOk) std::fprintf(stderr, "fastsock-pipe: the receiver process failed\n");
    rc = kExitFailure;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  const int prc = parse_options(argc, argv, opt);
  if (prc < 0) return kExitOk;
  if (prc > 0) return prc;
  if (opt.print_schedule) {
    // NetPIPE's rows, plus the upper bound when NetPIPE's sequence would skip it (marked, so a
    // comparison with NPtcp's printed schedule can leave it out).
    const auto plain = netpipe_schedule(opt.lower, opt.upper, opt.perturbation);
    std::size_t j = 0;
    for (const SizePoint& p : build_schedule(opt.lower, opt.upper, opt.perturbation)) {
      const bool added = j >= plain.size() || plain[j].bytes != p.bytes;
      std::printf("%zu%s\n", p.bytes, added ? " (upper bound)" : "");
      if (!added) ++j;
    }
    return kExitOk;
  }
  switch (opt.role) {
    case Role::local:
      return run_local(opt);
    case Role::transmitter: {
      int fd = connect_tcp(opt.host, opt.port);
      return fd < 0 ? kExitFailure : transmit(fd, opt);
    }
    case Role::receiver: {
      int port = 0;
      int lfd = listen_tcp("0.0.0.0", opt.port, &port);
      if (lfd < 0) return kExitFailure;
      std::printf("fastsock-pipe: receiver listening on port %d\n", port);
      std::fflush(stdout);
      return serve(lfd);
    }
  }
  return kExitFailure;
}
