// claim_forger (runs in the Soft-RoCE VM, tests/rdma/claim.sh): sends the verbs link's
// connect request for a TCP connection it does not own, as a process on another host that
// guessed the connection's 4-tuple would, and says how the listener answered.
//
//   claim_forger SOURCE LISTENER PORT CLIENT CLIENT_PORT
//
// The request goes from SOURCE (an IPv4 address of this host) to LISTENER:PORT and claims
// the TCP connection CLIENT:CLIENT_PORT -> LISTENER:PORT (transports/verbs/verbs_wire.hpp,
// ConnectData). Prints "rejected" (exit 0), "accepted" (exit 1), or what else happened
// (exit 2). Nothing here is fastsock's code: plain librdmacm, as an attacker would use it.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "verbs_wire.hpp"

namespace {

sockaddr_in ipv4(const char* text, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, text, &a.sin_addr) != 1) {
    fprintf(stderr, "claim_forger: not an IPv4 address: %s\n", text);
    exit(2);
  }
  return a;
}

// The next event on `ch`, which must be `want`; exits 2 otherwise.
void expect(rdma_event_channel* ch, rdma_cm_event_type want) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) {
    perror("claim_forger: rdma_get_cm_event");
    exit(2);
  }
  const rdma_cm_event_type got = ev->event;
  rdma_ack_cm_event(ev);
  if (got != want) {
    printf("%s (waiting for %s)\n", rdma_event_str(got), rdma_event_str(want));
    exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: claim_forger SOURCE LISTENER PORT CLIENT CLIENT_PORT\n");
    return 2;
  }
  const uint16_t port = uint16_t(atoi(argv[3]));
  sockaddr_in src = ipv4(argv[1], 0);
  sockaddr_in dst = ipv4(argv[2], port);
  const sockaddr_in client = ipv4(argv[4], uint16_t(atoi(argv[5])));

  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  if (!ch || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
    perror("claim_forger: rdma_create_id");
    return 2;
  }
  if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                        2000) != 0) {
    perror("claim_forger: rdma_resolve_addr");
    return 2;
  }
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  if (rdma_resolve_route(id, 2000) != 0) {
    perror("claim_forger: rdma_resolve_route");
    return 2;
  }
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);

  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = pd ? ibv_create_cq(id->verbs, 4, nullptr, nullptr, 0) : nullptr;
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  if (!cq || rdma_create_qp(id, pd, &qa) != 0) {
    perror("claim_forger: rdma_create_qp");
    return 2;
  }

  fastsock::verbs::ConnectData data{};
  data.magic = htons(fastsock::verbs::kWireMagic);
  data.version = fastsock::verbs::kWireVersion;
  data.family = AF_INET;
  data.client_port = client.sin_port;
  data.server_port = dst.sin_port;
  memcpy(data.client_addr, &client.sin_addr, 4);
  memcpy(data.server_addr, &dst.sin_addr, 4);
  data.nonce = 0x5eed5eed5eed5eedULL;
  rdma_conn_param param{};
  param.private_data = &data;
  param.private_data_len = sizeof data;
  param.responder_resources = param.initiator_depth = 1;
  param.retry_count = 7;
  if (rdma_connect(id, &param) != 0) {
    perror("claim_forger: rdma_connect");
    return 2;
  }
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) {
    perror("claim_forger: rdma_get_cm_event");
    return 2;
  }
  const rdma_cm_event_type got = ev->event;
  rdma_ack_cm_event(ev);
  if (got == RDMA_CM_EVENT_REJECTED) {
    puts("rejected");
    return 0;
  }
  if (got == RDMA_CM_EVENT_CONNECT_RESPONSE || got == RDMA_CM_EVENT_ESTABLISHED) {
    puts("accepted");
    return 1;
  }
  printf("%s\n", rdma_event_str(got));
  return 2;
}
