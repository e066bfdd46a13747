// How the element-type modes (--elements int32|double) move their arrays, chosen with --api:
//  - typed: fastsock_send_array / fastsock_recv_array through the FASTSOCK_DYNAMIC shim
//    (include/fastsock/fastsock.h). Under libfastsock.so the library's typed entry points
//    carry the arrays; without it the shim's own sendmsg/recvmsg loops do. fastsock-pipe
//    stays a plain socket program either way: it never links the library.
//  - plain: send/recv of the array's bytes (the same bytes on the wire as typed).
//  - portable: what a program without a typed API does between hosts of unknown byte order
//    (Java's DataOutputStream, XDR): each element converted into a staging buffer in network
//    (big-endian) order, that buffer sent, and converted back after the receive.
// Byte arrays (B]) are always sent plain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "elements.hpp"

namespace fastsock_pipe {

enum class ArrayApi { typed, plain, portable };
bool parse_array_api(std::string_view s, ArrayApi& out);
const char* array_api_name(ArrayApi a);

// What actually carries one end's arrays (reported per end, in the JSON and the summary).
enum class ArrayPath : uint32_t {
  plain = 1,     // send/recv
  library = 2,   // the typed API, served by libfastsock's entry points
  shim = 3,      // the typed API, served by the shim's sendmsg/recvmsg loops (no library)
  portable = 4,  // big-endian staging copy + send/recv
};
inline constexpr uint32_t kLastArrayPath = static_cast<uint32_t>(ArrayPath::portable);
const char* array_path_name(ArrayPath p);
// One line for humans, e.g. "typed API, libfastsock's entry points".
const char* array_path_description(ArrayPath p);
// Valid wire value (from the peer: untrusted)?
inline bool valid_array_path(uint32_t v) { return v >= 1 && v <= kLastArrayPath; }

// The path this process uses for `t` arrays with `api`: library when the typed API was
// asked for and the library's entry points are found at run time (the shim's own test).
ArrayPath array_path(ElementType t, ArrayApi api);

// The fastsock transport carrying `fd` ("shm", "tcp", ...), or "" when no fastsock library
// tracks it (not preloaded, or not a TCP socket).
std::string fd_transport(int fd);

// One message of `bytes` bytes (a whole number of `t` elements) at `buf` (aligned to the
// element size) over `path`. `staging` is a buffer of at least `bytes` bytes, used only by
// the portable path. False after printing the reason.
bool send_array_message(int fd, ArrayPath path, ElementType t, const uint8_t* buf,
                        std::size_t bytes, uint8_t* staging);
bool recv_array_message(int fd, ArrayPath path, ElementType t, uint8_t* buf, std::size_t bytes,
                        uint8_t* staging);

}  // namespace fastsock_pipe
