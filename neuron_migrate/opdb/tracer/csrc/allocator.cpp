// The stand-in's memory: a caching device allocator with CUDA-style statistics, and a pinned host allocator.
// Both hand out host memory; what they model is the bookkeeping TorchNeuron documents (a caching segment
// allocator with a small pool below 1 MiB and a large pool above, cached free blocks, reserved >= allocated),
// so `torch.accelerator.memory_*`, `empty_cache` and `pin_memory()` behave as on a device.
#include "standin.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>

#include <map>
#include <mutex>
#include <unistd.h>
#include <unordered_map>

namespace neuron_standin {
namespace {

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kSmallLimit = 1 << 20;        // blocks below 1 MiB come from the small pool
constexpr size_t kRoundLimit = 16u << 20;      // requests below 16 MiB round up to a size class
constexpr size_t kSmallRound = 512;            // small size classes: multiples of 512 B
constexpr size_t kLargeRound = 2u << 20;       // large size classes: multiples of 2 MiB

size_t size_class(size_t n) {
  if (n < kSmallLimit) return ((n + kSmallRound - 1) / kSmallRound) * kSmallRound;
  if (n < kRoundLimit) return ((n + kLargeRound - 1) / kLargeRound) * kLargeRound;
  return n;
}

struct Block {
  void* ptr;
  size_t size;
  size_t requested;
  c10::DeviceIndex device;
  bool small() const { return size < kSmallLimit; }
};

void add(c10::CachingAllocator::StatArray& stat, bool small, int64_t amount) {
  auto pool = static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL);
  for (size_t i : {static_cast<size_t>(StatType::AGGREGATE), pool}) {
    if (amount >= 0) stat[i].increase(static_cast<size_t>(amount));
    else stat[i].decrease(static_cast<size_t>(-amount));
  }
}

struct PerDevice {
  DeviceStats stats;
  std::multimap<size_t, Block*> cached;  // free blocks by size
};

class DeviceCachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const auto device = current_device();
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(kDevice, device)};
    const size_t size = size_class(n);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& state = state_of(device);
    Block* block = nullptr;
    auto hit = state.cached.find(size);  // exact size class only: statistics stay predictable
    if (hit != state.cached.end()) {
      block = hit->second;
      state.cached.erase(hit);
    } else {
      void* ptr = c10::alloc_cpu(size);
      block = new Block{ptr, size, 0, device};
      add(state.stats.segment, block->small(), 1);
      add(state.stats.reserved_bytes, block->small(), static_cast<int64_t>(size));
      state.stats.num_device_alloc += 1;
    }
    block->requested = n;
    add(state.stats.allocation, block->small(), 1);
    add(state.stats.active, block->small(), 1);
    add(state.stats.allocated_bytes, block->small(), static_cast<int64_t>(size));
    add(state.stats.active_bytes, block->small(), static_cast<int64_t>(size));
    add(state.stats.requested_bytes, block->small(), static_cast<int64_t>(n));
    return {block->ptr, block, &release, c10::Device(kDevice, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t /*pool*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, state] : devices_) {
      for (auto& [size, block] : state.cached) {
        add(state.stats.segment, block->small(), -1);
        add(state.stats.reserved_bytes, block->small(), -static_cast<int64_t>(size));
        state.stats.num_device_free += 1;
        c10::free_cpu(block->ptr);
        delete block;
      }
      state.cached.clear();
    }
  }

  // Every stand-in kernel has finished when it returns, so no block waits on a stream.
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return state_of(device).stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = state_of(device).stats;
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                      &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
      for (auto& stat : *arr) stat.reset_accumulated();
    s.num_alloc_retries = s.num_ooms = s.num_sync_all_streams = s.num_device_alloc = s.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = state_of(device).stats;
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                      &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
      for (auto& stat : *arr) stat.reset_peak();
  }

  // The stand-in's device memory is this machine's memory: total is its RAM, free what the OS can still give.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device(device);
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return {static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page,
            static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page};
  }

  void free(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& state = state_of(block->device);
    add(state.stats.allocation, block->small(), -1);
    add(state.stats.active, block->small(), -1);
    add(state.stats.allocated_bytes, block->small(), -static_cast<int64_t>(block->size));
    add(state.stats.active_bytes, block->small(), -static_cast<int64_t>(block->size));
    add(state.stats.requested_bytes, block->small(), -static_cast<int64_t>(block->requested));
    state.cached.emplace(block->size, block);
  }

 private:
  static void release(void* ctx);
  PerDevice& state_of(c10::DeviceIndex device) { return devices_[device < 0 ? current_device() : device]; }

  std::mutex mutex_;
  std::unordered_map<c10::DeviceIndex, PerDevice> devices_;
};

DeviceCachingAllocator g_device_allocator;

void DeviceCachingAllocator::release(void* ctx) {
  if (ctx != nullptr) g_device_allocator.free(static_cast<Block*>(ctx));
}

// Pinned host memory: page-locked on a real device, ordinary memory here, but tracked so that `is_pinned()`
// answers and `empty_host_cache()` has a cache to empty.
class PinnedHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::kCPU)};
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    auto hit = cached_.find(n);
    if (hit != cached_.end()) {
      ptr = hit->second;
      cached_.erase(hit);
    } else {
      ptr = c10::alloc_cpu(n);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(n);
      stats_.num_host_alloc += 1;
    }
    live_[ptr] = n;
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(n);
    return {ptr, ptr, &release, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override { return true; }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, ptr] : cached_) {
      stats_.allocations.decrease(1);
      stats_.allocated_bytes.decrease(size);
      stats_.num_host_free += 1;
      c10::free_cpu(ptr);
    }
    cached_.clear();
  }

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.active_requests.reset_accumulated();
    stats_.active_bytes.reset_accumulated();
    stats_.allocations.reset_accumulated();
    stats_.allocated_bytes.reset_accumulated();
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.active_requests.reset_peak();
    stats_.active_bytes.reset_peak();
    stats_.allocations.reset_peak();
    stats_.allocated_bytes.reset_peak();
  }

  bool contains(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.upper_bound(const_cast<void*>(p));
    if (it == live_.begin()) return false;
    --it;
    auto start = static_cast<const char*>(it->first);
    return static_cast<const char*>(p) < start + it->second;
  }

  void free(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(it->second);
    cached_.emplace(it->second, ptr);
    live_.erase(it);
  }

 private:
  static void release(void* ptr);
  std::mutex mutex_;
  std::map<void*, size_t> live_;
  std::multimap<size_t, void*> cached_;
  at::HostStats stats_;
};

PinnedHostAllocator g_host_allocator;

void PinnedHostAllocator::release(void* ptr) {
  if (ptr != nullptr) g_host_allocator.free(ptr);
}

}  // namespace

c10::DeviceAllocator* device_allocator() { return &g_device_allocator; }
at::HostAllocator* host_allocator() { return &g_host_allocator; }
bool is_pinned(const void* ptr) { return ptr != nullptr && g_host_allocator.contains(ptr); }

c10::Storage storage_copy_of(const void* src, size_t bytes, c10::DeviceIndex index) {
  c10::DeviceGuard guard(c10::Device(kDevice, index));
  auto data = g_device_allocator.allocate(bytes);
  if (bytes > 0) std::memcpy(data.get(), src, bytes);
  return c10::Storage(c10::Storage::use_byte_size_t(), bytes, std::move(data), &g_device_allocator, true);
}

REGISTER_ALLOCATOR(kDevice, &g_device_allocator)
REGISTER_HOST_ALLOCATOR(kDevice, &g_host_allocator)

}  // namespace neuron_standin
