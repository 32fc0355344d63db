#include "core/runtime/session_memory.h"

#include <algorithm>
#include <utility>

#include "core/runtime/handle_table.h"

namespace tensord::core {

HeldCharge::~HeldCharge() {
  if (std::shared_ptr<SessionMemory> memory = memory_.lock()) {
    memory->Release(keys_);
  }
}

void SessionMemory::AddEntry(const StoredTensor& t) {
  if (t.buffer == nullptr) return;
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  uint32_t& refs = entries_[t.buffer.get()];
  if (refs++ != 0) return;
  if (auto it = held_.find(t.buffer.get()); it != held_.end()) {
    extra_bytes_ -= it->second.meta.nbytes;
    --extra_tensors_;
  } else if (auto l = live_.find(t.buffer.get()); l != live_.end()) {
    loose_bytes_ -= l->second;
    --loose_tensors_;
  }
}

void SessionMemory::RemoveEntry(const StoredTensor& t) {
  if (t.buffer == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(t.buffer.get());
  if (it == entries_.end() || --it->second != 0) return;
  entries_.erase(it);
  if (auto h = held_.find(t.buffer.get()); h != held_.end()) {
    extra_bytes_ += h->second.meta.nbytes;
    ++extra_tensors_;
  } else if (auto l = live_.find(t.buffer.get()); l != live_.end()) {
    loose_bytes_ += l->second;
    ++loose_tensors_;
  }
}

std::shared_ptr<const HeldCharge> SessionMemory::Hold(
    std::span<const StoredTensor* const> tensors, std::string_view tag) {
  std::shared_ptr<HeldCharge> charge;
  absl::MutexLock lock(&mu_);
  if (ended_) return nullptr;
  for (const StoredTensor* t : tensors) {
    if (t == nullptr || t->buffer == nullptr) continue;
    const Buffer* key = t->buffer.get();
    if (charge == nullptr) {
      charge.reset(new HeldCharge());
      charge->memory_ = weak_from_this();
    }
    charge->keys_.push_back(key);
    Held& held = held_[key];
    if (held.charges++ != 0) continue;
    held.meta = HeldTensor{t->device->name(), t->dtype, t->shape, t->nbytes,
                           std::string(tag)};
    if (!entries_.contains(key)) {
      extra_bytes_ += t->nbytes;
      ++extra_tensors_;
      if (auto l = live_.find(key); l != live_.end()) {
        loose_bytes_ -= l->second;
        --loose_tensors_;
      }
    }
  }
  return charge;
}

void SessionMemory::Release(std::span<const Buffer* const> keys) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  for (const Buffer* key : keys) {
    auto it = held_.find(key);
    if (it == held_.end() || --it->second.charges != 0) continue;
    if (!entries_.contains(key)) {
      extra_bytes_ -= it->second.meta.nbytes;
      --extra_tensors_;
      if (auto l = live_.find(key); l != live_.end()) {
        loose_bytes_ += l->second;
        ++loose_tensors_;
      }
    }
    held_.erase(it);
  }
}

uint64_t SessionMemory::extra_bytes() const {
  absl::MutexLock lock(&mu_);
  return extra_bytes_;
}

uint64_t SessionMemory::extra_tensors() const {
  absl::MutexLock lock(&mu_);
  return extra_tensors_;
}

std::vector<HeldTensor> SessionMemory::ListExtra() const {
  std::vector<HeldTensor> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, held] : held_) {
    if (!entries_.contains(key)) out.push_back(held.meta);
  }
  std::sort(out.begin(), out.end(),
            [](const HeldTensor& a, const HeldTensor& b) {
              return a.tag != b.tag ? a.tag < b.tag : a.nbytes > b.nbytes;
            });
  return out;
}

void SessionMemory::Reserve(uint64_t bytes, uint64_t tensors) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  reserved_bytes_ += bytes;
  reserved_tensors_ += tensors;
}

void SessionMemory::Unreserve(uint64_t bytes, uint64_t tensors) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
  reserved_tensors_ -= std::min(tensors, reserved_tensors_);
}

void SessionMemory::Allocated(const Buffer* key, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
  reserved_tensors_ -= std::min<uint64_t>(1, reserved_tensors_);
  if (!live_.emplace(key, bytes).second) return;
  if (!entries_.contains(key) && !held_.contains(key)) {
    loose_bytes_ += bytes;
    ++loose_tensors_;
  }
}

void SessionMemory::Freed(const Buffer* key) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  auto it = live_.find(key);
  if (it == live_.end()) return;
  if (!entries_.contains(key) && !held_.contains(key)) {
    loose_bytes_ -= it->second;
    --loose_tensors_;
  }
  live_.erase(it);
}

bool SessionMemory::CountedWithoutEntry(const Buffer* key) const {
  absl::MutexLock lock(&mu_);
  return !entries_.contains(key) &&
         (live_.contains(key) || held_.contains(key));
}

uint64_t SessionMemory::in_flight_bytes() const {
  absl::MutexLock lock(&mu_);
  return loose_bytes_ + reserved_bytes_;
}

uint64_t SessionMemory::in_flight_tensors() const {
  absl::MutexLock lock(&mu_);
  return loose_tensors_ + reserved_tensors_;
}

void SessionMemory::End() {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  entries_.clear();
  held_.clear();
  live_.clear();
  extra_bytes_ = extra_tensors_ = 0;
  loose_bytes_ = loose_tensors_ = reserved_bytes_ = reserved_tensors_ = 0;
}

}  // namespace tensord::core
