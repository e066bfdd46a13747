// Whether a vendor profile can carry connections on this host: decided once per process,
// before any connection or listener is given to it (docs/vendor.md, "Probe").
//
// A library that loads is not yet a usable one: librdmacm is installed on many hosts with
// no RDMA device, where rsocket() fails with ENODEV, and libc.so.6 (Sockets-MX's profile)
// loads everywhere while AF_MYRI exists nowhere. Attaching connections to such a profile
// would make each one try, fail and fall back, and every listener start a service thread.
// So the probe checks, cheapest first: the profile's `needs=` path (no dlopen on a host
// without the hardware), the library and its symbols, then one socket of the library,
// made and closed.
#pragma once

#include <cstddef>

#include "vendor_lib.hpp"

namespace fastsock::vendors {

// Runs the checks for `p`, loading its library through `lib` when the `needs=` path is
// there. True, or false with one sentence (no trailing period) in `why`.
bool probe_profile(const Profile& p, LazyLib& lib, char* why, size_t why_len) noexcept;

}  // namespace fastsock::vendors
