#include "worker.hpp"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "local_pair.hpp"
#include "session.hpp"
#include "worker_protocol.hpp"

namespace fastsock_pipe {
namespace {

// ld.so only warns when an LD_PRELOAD entry cannot be loaded and runs the program anyway;
// the worker would then measure the kernel under the library's name. /proc/self/maps says
// whether the library is really mapped.
bool library_mapped(const std::string& lib) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const std::size_t slash = line.find('/');
    if (slash != std::string::npos) {
      char buf[PATH_MAX];
      const std::string path = line.substr(slash);
      if (path == lib || (realpath(path.c_str(), buf) && lib == buf)) return true;
    }
  }
  return false;
}

bool send_ready(int fd, bool ok, const std::string& reason) {
  WorkerReady r{};
  r.ok = ok;
  std::snprintf(r.reason, sizeof r.reason, "%s", reason.c_str());
  return write_full(fd, &r, sizeof r);
}

bool serve(Session& session, int in, int out) {
  std::vector<double> samples;
  for (;;) {
    WorkerCommand c{};
    if (!read_full(in, &c, sizeof c)) return false;
    WorkerReply r{};
    switch (static_cast<WorkerOp>(c.op)) {
      case WorkerOp::begin_size: {
        SizePlan p{c.bytes, static_cast<long>(c.repeats), static_cast<int>(c.warmup),
                   static_cast<int>(c.trials), c.pool_bytes};
        r.ok = session.begin_size(p);
        break;
      }
      case WorkerOp::trial:
        samples.clear();
        r.ok = session.trial(samples, r.per_message);
        r.samples = r.ok ? samples.size() : 0;
        break;
      case WorkerOp::end_size: {
        SizeOutcome o;
        r.ok = session.end_size(o);
        r.rx_errors = o.rx_errors;
        r.rx_first_bad = o.rx_first_bad;
        r.tx_errors = o.tx_errors;
        r.tx_path = static_cast<uint32_t>(o.tx_path);
        r.rx_path = static_cast<uint32_t>(o.rx_path);
        std::snprintf(r.tx_transport, sizeof r.tx_transport, "%s", o.tx_transport.c_str());
        std::snprintf(r.rx_transport, sizeof r.rx_transport, "%s", o.rx_transport.c_str());
        break;
      }
      case WorkerOp::finish:
        session.finish();
        return true;
      default:
        return false;
    }
    if (!write_full(out, &r, sizeof r)) return false;
    if (r.samples && !write_full(out, samples.data(), samples.size() * sizeof(double)))
      return false;
    if (!r.ok) return false;
  }
}

}  // namespace

int run_worker(const Options& opt) {
  if (!opt.expect_preload.empty() && !library_mapped(opt.expect_preload)) {
    send_ready(opt.worker_out, false,
               opt.expect_preload + " is not loaded (LD_PRELOAD failed; see ld.so's message)");
    return 1;
  }
  LocalPair pair;
  if (!start_local_pair(local_address(opt), opt, pair)) {
    send_ready(opt.worker_out, false, "cannot set up the connection (the reason is on stderr)");
    return 1;
  }
  if (!send_ready(opt.worker_out, true, "")) return 1;
  bool ok;
  {
    auto session = make_direct_session(pair.fd, opt);
    ok = serve(*session, opt.worker_in, opt.worker_out);
  }  // closes the connection, so the receiver ends even after a failure
  const bool receiver_ok = reap_receiver(pair);
  return ok && receiver_ok ? 0 : 1;
}

}  // namespace fastsock_pipe
