// The coordinator's side of --compare: a Session whose calls run in a worker process (this
// binary re-executed with --worker), so that each transport gets its own LD_PRELOAD.
#pragma once

#include <memory>
#include <string>

#include "options.hpp"
#include "session.hpp"
#include "transports.hpp"

namespace fastsock_pipe {

// Starts the worker for `t` (its Unix socket, if any, at `unix_path`) and waits until it is
// connected. Returns null with `error` set when the worker could not start or connect.
std::unique_ptr<Session> spawn_worker_session(const TransportSpec& t, const Options& opt,
                                              const std::string& unix_path, std::string& error);

}  // namespace fastsock_pipe
