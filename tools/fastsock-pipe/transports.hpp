// The transports --compare names: tcp, tcp6 and unix measure the kernel without any preload
// library; fastsock preloads libfastsock.so (found as `fastsock run` finds it); any entry
// ending in ".so" preloads that library over loopback TCP (e.g. rsocket's librspreload.so).
#pragma once

#include <string>
#include <vector>

#include "net.hpp"

namespace fastsock_pipe {

struct TransportSpec {
  std::string name;         // as shown in tables and files: tcp, unix, fastsock, librspreload.so
  std::string description;  // one line for the JSON metadata
  Family family = Family::inet;
  std::string preload;      // absolute path of the library to preload, "" for none
  std::string error;        // non-empty: cannot run here (skipped with this reason)
};

// Resolves each entry. Returns false (after printing why) for an entry that is not a
// transport name or library path, or a name given twice: a usage error.
bool resolve_transports(const std::vector<std::string>& entries, std::vector<TransportSpec>& out);

// The LD_PRELOAD of a worker for `preload`: sanitizer runtimes already in `existing` stay
// first (a sanitizer build needs them); every other entry is dropped, so that `tcp` measures
// the kernel even when the coordinator itself runs under a preload library.
std::string worker_ld_preload(const char* existing, const std::string& preload);

}  // namespace fastsock_pipe
