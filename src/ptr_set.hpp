// A small set of pointers (open addressing, linear probing) that never throws: insert
// reports allocation failure instead. Used to recognise our own tags among the values the
// kernel hands back, where the application's values could be anything.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace fastsock {

class PtrSet {
 public:
  PtrSet() = default;
  PtrSet(const PtrSet&) = delete;
  PtrSet& operator=(const PtrSet&) = delete;
  ~PtrSet() { std::free(slots_); }

  bool contains(const void* p) const noexcept {
    if (!slots_ || !p) return false;
    for (size_t i = hash(p) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == p) return true;
      if (slots_[i] == nullptr) return false;
    }
  }

  bool insert(const void* p) noexcept {
    if ((used_ + 1) * 2 > capacity_ && !grow()) return false;
    place(p);
    ++size_;
    return true;
  }

  void erase(const void* p) noexcept {
    if (!slots_) return;
    size_t i = hash(p) & mask_;
    while (slots_[i] != p) {
      if (slots_[i] == nullptr) return;
      i = (i + 1) & mask_;
    }
    slots_[i] = tombstone();
    --size_;
  }

  size_t size() const noexcept { return size_; }

 private:
  static const void* tombstone() noexcept { return reinterpret_cast<const void*>(uintptr_t(1)); }
  static size_t hash(const void* p) noexcept {
    return size_t((uintptr_t(p) >> 4) * 0x9E3779B97F4A7C15ull >> 16);
  }
  void place(const void* p) noexcept {
    size_t i = hash(p) & mask_;
    while (slots_[i] != nullptr && slots_[i] != tombstone()) i = (i + 1) & mask_;
    if (slots_[i] == nullptr) ++used_;
    slots_[i] = p;
  }
  bool grow() noexcept {
    const size_t capacity = capacity_ ? capacity_ * 2 : 16;
    auto* slots = static_cast<const void**>(std::calloc(capacity, sizeof(void*)));
    if (!slots) return false;
    const void** old = slots_;
    const size_t old_capacity = capacity_;
    slots_ = slots;
    capacity_ = capacity;
    mask_ = capacity - 1;
    used_ = 0;
    for (size_t i = 0; i < old_capacity; ++i)
      if (old[i] && old[i] != tombstone()) place(old[i]);
    std::free(old);
    return true;
  }

  const void** slots_ = nullptr;
  size_t capacity_ = 0, mask_ = 0, used_ = 0, size_ = 0;
};

}  // namespace fastsock
