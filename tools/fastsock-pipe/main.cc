// fastsock-pipe: a NetPIPE-style benchmark over plain sockets (docs/fastsock-pipe.md).
// Deliberately not linked with libfastsock: it measures whatever socket library is preloaded.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "compare_runs.hpp"
#include "driver.hpp"
#include "endpoint.hpp"
#include "local_pair.hpp"
#include "net.hpp"
#include "options.hpp"
#include "output.hpp"
#include "plot.hpp"
#include "progress.hpp"
#include "schedule.hpp"
#include "session_remote.hpp"
#include "transports.hpp"
#include "worker.hpp"

using namespace fastsock_pipe;

namespace {

constexpr int kExitOk = 0, kExitFailure = 1;

const char* family_name(Family f) {
  return f == Family::inet6 ? "tcp6" : f == Family::unix_stream ? "unix" : "tcp";
}

// Runs the lanes, prints the live table and writes every requested file.
int measure_and_report(std::vector<Lane>& lanes, const Options& opt) {
  const Metadata meta = collect_metadata(opt);
  for (const std::string& w : meta.warnings) std::fprintf(stderr, "fastsock-pipe: warning: %s\n", w.c_str());
  const bool single = lanes.size() == 1;
  if (!opt.quiet) {
    if (single) table_header(stdout, opt);
    else compare_header(stdout, opt, lanes);
  }
  Progress progress(opt.progress, now_seconds());
  std::size_t rows = 0;
  auto on_row = [&](std::size_t index, std::size_t total) {
    progress.clear();
    if (!opt.quiet) {
      if (single && !lanes[0].result.sizes.empty()) table_row(stdout, lanes[0].result.sizes.back(), index);
      else if (!single) compare_row(stdout, lanes, rows);
    }
    std::size_t bytes = 0;
    for (const Lane& l : lanes)
      if (rows < l.result.sizes.size()) bytes = l.result.sizes[rows].bytes;
    ++rows;
    progress.update(index + 1, total, bytes);
  };
  RunInfo info;
  const bool ok = run_lanes(lanes, opt, on_row, info);
  progress.finish();
  if (!ok && single) return kExitFailure;
  if (!opt.quiet) {
    if (single) table_summary(stdout, lanes[0], info);
    else compare_summary(stdout, lanes, info);
  }
  bool written = true;
  if (!opt.csv_path.empty()) written &= write_csv(opt.csv_path, opt, lanes);
  if (!opt.json_path.empty()) written &= write_json(opt.json_path, meta, opt, lanes, info);
  if (!opt.npout_path.empty()) {
    for (const Lane& l : lanes)
      if (l.status != "skipped")
        written &= write_npout(single ? opt.npout_path : opt.npout_path + "." + l.name, opt, l.result);
  }
  if (!opt.plot_prefix.empty()) {
    const PlotResult p = write_plots(opt.plot_prefix, opt, lanes);
    for (const std::string& f : p.files) std::printf("# plot: %s\n", f.c_str());
    if (!p.skipped.empty()) std::printf("# plot skipped: %s\n", p.skipped.c_str());
    written &= p.ok;
  }
  int rc = written ? kExitOk : kExitFailure;
  for (const Lane& l : lanes) {
    if (l.result.integrity_failed) {
      std::fprintf(stderr, "fastsock-pipe: %s%s%s\n", single ? "" : l.name.c_str(),
                   single ? "" : ": ", l.result.integrity_message.c_str());
      rc = kExitFailure;
    } else if (opt.integrity && !opt.quiet && l.status == "ok") {
      std::printf("# %s%sintegrity check passed at all %zu sizes\n", single ? "" : l.name.c_str(),
                  single ? "" : ": ", l.result.sizes.size());
    }
    if (l.status == "failed") rc = kExitFailure;
  }
  return rc;
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

// A private directory for the Unix sockets of --compare, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/fastsock-pipe.XXXXXX";
    if (mkdtemp(tmpl.data())) path = tmpl;
  }
  ~TempDir() {
    if (path.empty()) return;
    unlink((path + "/unix.sock").c_str());
    rmdir(path.c_str());
  }
};

int run_compare(const Options& opt) {
  std::vector<TransportSpec> specs;
  if (!resolve_transports(opt.compare, specs)) return 2;
  signal(SIGPIPE, SIG_IGN);  // a dead worker must not kill the coordinator
  TempDir dir;  // outlives the sessions below, whose workers use the socket in it
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<Lane> lanes(specs.size());
  bool any = false;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    Lane& l = lanes[i];
    l.name = specs[i].name;
    l.description = specs[i].description;
    l.ld_preload = worker_ld_preload(std::getenv("LD_PRELOAD"), specs[i].preload);
    std::string error = specs[i].error;
    if (error.empty() && specs[i].family == Family::unix_stream && dir.path.empty())
      error = "cannot create a temporary directory for the Unix socket";
    std::unique_ptr<Session> s;
    if (error.empty()) s = spawn_worker_session(specs[i], opt, dir.path + "/unix.sock", error);
    if (!s) {
      l.status = "skipped";
      l.reason = error;
      std::fprintf(stderr, "fastsock-pipe: %s skipped: %s\n", l.name.c_str(), error.c_str());
      continue;
    }
    l.session = s.get();
    sessions.push_back(std::move(s));
    any = true;
  }
  if (!any) {
    std::fprintf(stderr, "fastsock-pipe: no transport of --compare can run here\n");
    return kExitFailure;
  }
  return measure_and_report(lanes, opt);
}

int run_receiver_role(const Options& opt) {
  Address a;
  a.family = !opt.unix_path.empty() ? Family::unix_stream : opt.ipv6 ? Family::inet6 : Family::inet;
  a.path = opt.unix_path;
  a.port = opt.port;
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
