// Core side of the public C API (include/fastsock/).
#pragma once

namespace fastsock::api {

// The name of the link carrying `fd`'s connection, or nullptr if `fd` is not tracked.
const char* transport_of(int fd) noexcept;

}  // namespace fastsock::api
