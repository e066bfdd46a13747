// fastsock-pipe: a NetPIPE-style benchmark over plain sockets (docs/fastsock-pipe.md).
// Deliberately not linked with libfastsock: it measures whatever socket library is preloaded.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "compare_local.hpp"
#include "compare_runs.hpp"
#include "driver.hpp"
#include "local_pair.hpp"
#include "net.hpp"
#include "options.hpp"
#include "report.hpp"
#include "schedule.hpp"
#include "session.hpp"
#include "worker.hpp"

using namespace fastsock_pipe;

namespace {

constexpr int kExitOk = 0, kExitFailure = 1;

const char* family_name(Family f) {
  return f == Family::inet6 ? "tcp6" : f == Family::unix_stream ? "unix" : "tcp";
}

int transmit_single(int fd, const Options& opt, Family family) {
  std::vector<Lane> lanes(1);
  auto session = make_direct_session(fd, opt);
  const char* preload = std::getenv("LD_PRELOAD");
  lanes[0].name = family_name(family);
  lanes[0].ld_preload = preload ? preload : "";
  lanes[0].description = std::string(family == Family::unix_stream ? "Unix stream socket" : "TCP") +
                         (preload && *preload ? std::string(" under LD_PRELOAD=") + preload : "");
  lanes[0].session = session.get();
  return measure_and_report(lanes, opt);
}

int run_local(const Options& opt) {
  const Address addr = local_address(opt);
  LocalPair pair;
  if (!start_local_pair(addr, opt, pair)) return kExitFailure;
  int rc = transmit_single(pair.fd, opt, addr.family);  // closes the connection
  if (!reap_receiver(pair)) {
    if (rc == kExitOk) std::fprintf(stderr, "fastsock-pipe: the receiver process failed\n");
    rc = kExitFailure;
  }
  if (addr.family == Family::unix_stream) unlink(addr.path.c_str());
  return rc;
}

int run_receiver_role(const Options& opt) {
  Address a;
  a.family = !opt.unix_path.empty() ? Family::unix_stream : opt.ipv6 ? Family::inet6 : Family::inet;
  a.path = opt.unix_path;
  a.port = opt.port;
  a.socket_buffer = opt.socket_buffer;
  int port = 0;
  int lfd = listen_on(a, &port);
  if (lfd < 0) return kExitFailure;
  a.port = port;
  std::printf("fastsock-pipe: receiver listening on %s\n", a.describe().c_str());
  std::fflush(stdout);
  int fd = accept_one(lfd);
  close(lfd);
  if (a.family == Family::unix_stream) unlink(a.path.c_str());
  if (fd < 0) return kExitFailure;
  int rc = run_receiver(fd);
  close(fd);
  return rc;
}

int run_transmitter_role(const Options& opt) {
  Address a;
  if (opt.host.rfind("unix:", 0) == 0) {
    a.family = Family::unix_stream;
    a.path = opt.host.substr(5);
  } else {
    a.family = opt.ipv6 ? Family::inet6 : Family::inet;
    a.host = opt.host;
    a.port = opt.port;
    a.socket_buffer = opt.socket_buffer;
  }
  int fd = connect_to(a);
  return fd < 0 ? kExitFailure : transmit_single(fd, opt, a.family);
}

void print_schedule(const Options& opt) {
  // NetPIPE's rows, plus the upper bound when NetPIPE's sequence would skip it (marked, so a
  // comparison with NPtcp's printed schedule can leave it out).
  const auto plain = netpipe_schedule(opt.lower, opt.upper, opt.perturbation);
  std::size_t j = 0;
  for (const SizePoint& p : build_schedule(opt.lower, opt.upper, opt.perturbation)) {
    const bool added = j >= plain.size() || plain[j].bytes != p.bytes;
    std::printf("%zu%s\n", p.bytes, added ? " (upper bound)" : "");
    if (!added) ++j;
  }
}

int run(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "compare") == 0) return compare_runs_main(argc - 1, argv + 1);
  Options opt;
  const int prc = parse_options(argc, argv, opt);
  if (prc < 0) return kExitOk;
  if (prc > 0) return prc;
  if (opt.print_schedule) {
    print_schedule(opt);
    return kExitOk;
  }
  switch (opt.role) {
    case Role::worker: return run_worker(opt);
    case Role::local: return opt.compare.empty() ? run_local(opt) : run_compare(opt);
    case Role::transmitter: return run_transmitter_role(opt);
    case Role::receiver: return run_receiver_role(opt);
  }
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fastsock-pipe: out of memory (buffers too large for this host?)\n");
    return kExitFailure;
  }
}
