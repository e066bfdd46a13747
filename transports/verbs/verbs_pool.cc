#include "verbs_pool.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "guard.hpp"
#include "log.hpp"
#include "verbs_regcache.hpp"

namespace fastsock::verbs {

RecvPool* RecvPool::create(const Lib& lib, ibv_context* context, uint32_t slot_bytes,
                           const char** why) noexcept {
  ReentryGuard guard;
  auto* pool = new (std::nothrow) RecvPool(lib, slot_bytes);
  if (!pool) {
    *why = "out of memory";
    return nullptr;
  }
  pool->pd_ = lib.ibv_alloc_pd(context);
  if (!pool->pd_) {
    *why = "cannot allocate a protection domain";
    delete pool;
    return nullptr;
  }
  ibv_srq_init_attr attr{};
  // Room for every slot the pool may ever post: growing never resizes the SRQ.
  attr.attr.max_wr = kMaxChunks * kChunkSlots;
  attr.attr.max_sge = 1;
  pool->srq_ = lib.ibv_create_srq(pool->pd_, &attr);
  if (!pool->srq_) {
    *why = "cannot create the shared receive queue";
    pool->destroy();
    return nullptr;
  }
  int rc;
  {
    std::lock_guard lock(pool->grow_lock_);
    rc = pool->add_chunk();
  }
  if (rc != 0) {
    *why = "cannot register receive buffers";
    pool->destroy();
    return nullptr;
  }
  pool->arm_limit();
  return pool;
}

void RecvPool::destroy() noexcept {
  RegCache::get().drop_pd(lib_, pd_);  // the application's buffers registered in our domain
  ReentryGuard guard;
  if (srq_) lib_.ibv_destroy_srq(srq_);
  for (uint32_t i = 0; i < kMaxChunks; ++i) {
    if (mrs_[i]) lib_.ibv_dereg_mr(mrs_[i]);
    free(chunks_[i]);
  }
  if (pd_) lib_.ibv_dealloc_pd(pd_);
  delete this;
}

int RecvPool::add_chunk() noexcept {
  const uint32_t index = chunk_count_.load(std::memory_order_relaxed);
  if (index >= kMaxChunks) return -ENOSPC;
  const size_t bytes = size_t(kChunkSlots) * slot_bytes_;
  void* memory = nullptr;
  if (posix_memalign(&memory, 4096, bytes) != 0) return -ENOMEM;
  ibv_mr* mr = (lib_.ibv_reg_mr)(pd_, memory, bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) {
    const int err = errno ? errno : ENOMEM;
    free(memory);
    return -err;
  }
  chunks_[index] = static_cast<uint8_t*>(memory);
  mrs_[index] = mr;
  // Published before its slots are posted: a completion for one of them is valid().
  chunk_count_.store(index + 1, std::memory_order_release);
  for (uint32_t i = 0; i < kChunkSlots; ++i)
    if (const int rc = repost(index * kChunkSlots + i); rc != 0) return -rc;
  return 0;
}

int RecvPool::repost(uint32_t slot) noexcept {
  const uint32_t chunk = slot / kChunkSlots;
  ibv_sge sge{reinterpret_cast<uintptr_t>(data(slot)), slot_bytes_, mrs_[chunk]->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_srq_recv(srq_, &wr, &bad);
  if (rc == 0) posted_.fetch_add(1, std::memory_order_relaxed);
  return rc;
}

bool RecvPool::low() noexcept {
  if (posted() >= kLowMark) return false;
  std::lock_guard lock(grow_lock_);
  if (posted() >= kLowMark) return false;  // another thread grew it
  if (grow_failed_ || chunk_count_.load(std::memory_order_relaxed) >= kMaxChunks) {
    tell_cap();
    return true;
  }
  if (const int rc = add_chunk(); rc != 0) {
    // Typically RLIMIT_MEMLOCK: the pool stays as it is and copies out from now on.
    LOG_WARN("verbs: the receive pool cannot grow beyond %u slots (%s): arrivals are copied "
             "out of it while it runs low", capacity(), strerror(-rc));
    grow_failed_ = true;
    return true;
  }
  LOG_DEBUG("verbs: the receive pool grew to %u slots", capacity());
  if (posted() >= kLowMark) return false;
  // Still low after the growth that reached the cap: copying out starts now.
  if (chunk_count_.load(std::memory_order_relaxed) >= kMaxChunks) tell_cap();
  return true;
}

void RecvPool::tell_cap() noexcept {
  if (!cap_told_)
    LOG_DEBUG("verbs: the receive pool is at its %u slots: arrivals are copied out of it "
              "while it runs low", capacity());
  cap_told_ = true;
}

void RecvPool::arm_limit() noexcept {
  ibv_srq_attr attr{};
  attr.srq_limit = kLowMark;
  if (const int rc = lib_.ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT); rc != 0)
    LOG_WARN("verbs: cannot arm the receive pool's limit event (%s): connections nobody "
             "reads may hold its slots", strerror(rc));
}

}  // namespace fastsock::verbs
