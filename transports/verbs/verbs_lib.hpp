// libibverbs and librdmacm, loaded with dlopen on first use.
//
// libfastsock.so is preloaded into every program, most of which never open an RDMA
// connection: linking it against rdma-core would load libibverbs, librdmacm and libnl into
// all of them, and make the library fail to load on hosts without rdma-core. Instead the
// entry points are resolved here, once, the first time a process could use the verbs link.
// The data-path calls (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are
// inline functions of <infiniband/verbs.h> that call through the device context: they need
// no symbol.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace fastsock::verbs {

struct Lib {
#define FASTSOCK_VERBS_FUNCTIONS(X)          \
  X(ibv_get_device_list)                     \
  X(ibv_free_device_list)                    \
  X(ibv_open_device)                         \
  X(ibv_close_device)                        \
  X(ibv_fork_init)                           \
  X(ibv_is_fork_initialized)                 \
  X(ibv_alloc_pd)                            \
  X(ibv_dealloc_pd)                          \
  X(ibv_reg_mr)                              \
  X(ibv_dereg_mr)                            \
  X(ibv_create_comp_channel)                 \
  X(ibv_destroy_comp_channel)                \
  X(ibv_create_cq)                           \
  X(ibv_destroy_cq)                          \
  X(ibv_get_cq_event)                        \
  X(ibv_ack_cq_events)                       \
  X(ibv_create_qp)                           \
  X(ibv_modify_qp)                           \
  X(ibv_destroy_qp)                         \
  X(ibv_create_srq)                          \
  X(ibv_modify_srq)                          \
  X(ibv_destroy_srq)                         \
  X(ibv_get_async_event)                     \
  X(ibv_ack_async_event)
#define FASTSOCK_RDMACM_FUNCTIONS(X)         \
  X(rdma_create_event_channel)               \
  X(rdma_destroy_event_channel)              \
  X(rdma_create_id)                          \
  X(rdma_destroy_id)                         \
  X(rdma_bind_addr)                          \
  X(rdma_listen)                             \
  X(rdma_resolve_addr)                       \
  X(rdma_resolve_route)                      \
  X(rdma_connect)                            \
  X(rdma_accept)                             \
  X(rdma_reject)                             \
  X(rdma_disconnect)                         \
  X(rdma_get_cm_event)                       \
  X(rdma_ack_cm_event)                       \
  X(rdma_init_qp_attr)                       \
  X(rdma_establish)                          \
  X(rdma_event_str)                          \
  X(rdma_get_devices)                        \
  X(rdma_free_devices)
#define FASTSOCK_VERBS_MEMBER(name) decltype(&::name) name;
  FASTSOCK_VERBS_FUNCTIONS(FASTSOCK_VERBS_MEMBER)
  FASTSOCK_RDMACM_FUNCTIONS(FASTSOCK_VERBS_MEMBER)
#undef FASTSOCK_VERBS_MEMBER
};

// The loaded libraries, or nullptr with the reason in *why (a static string).
const Lib* lib(const char** why) noexcept;

}  // namespace fastsock::verbs
