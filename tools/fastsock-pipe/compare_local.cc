#include "compare_local.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "report.hpp"
#include "session_remote.hpp"
#include "transports.hpp"

namespace fastsock_pipe {
namespace {

constexpr int kExitFailure = 1, kExitUsage = 2;

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

}  // namespace

int run_compare(const Options& opt) {
  std::vector<TransportSpec> specs;
  if (!resolve_transports(opt.compare, specs)) return kExitUsage;
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

}  // namespace fastsock_pipe
