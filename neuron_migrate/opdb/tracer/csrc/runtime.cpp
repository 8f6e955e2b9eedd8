// The stand-in's runtime: device selection, streams, events, the generator and the PrivateUse1 hooks.
// Kernels run synchronously on the host, so every stream is always idle and an event completes when it is
// recorded; timing events measure host wall time between records (what the stand-in spent computing, not what
// Trainium would spend).
#include "standin.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <mutex>
#include <unordered_map>

namespace neuron_standin {
namespace {

std::atomic<int> g_device_count{1};
thread_local c10::DeviceIndex t_device = 0;
thread_local std::unordered_map<c10::DeviceIndex, c10::StreamId> t_stream;
std::atomic<c10::StreamId> g_next_stream{1};

struct TimedEvent {
  bool timing;
  std::chrono::steady_clock::time_point when;
};

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDevice, device), id);
}

c10::DeviceIndex index_or_current(c10::DeviceIndex index) { return index < 0 ? current_device() : index; }

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  NeuronGuardImpl() = default;
  explicit NeuronGuardImpl(c10::DeviceType t) { TORCH_CHECK(t == kDevice, "expected the neuron device type"); }

  c10::DeviceType type() const override { return kDevice; }

  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = current_device();
    if (d.index() >= 0) set_device(d.index());
    return c10::Device(kDevice, old);
  }
  c10::Device getDevice() const override { return c10::Device(kDevice, current_device()); }
  void setDevice(c10::Device d) const override { set_device(d.index() < 0 ? 0 : d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) t_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override {
    auto index = index_or_current(d.index());
    auto it = t_stream.find(index);
    return make_stream(index, it == t_stream.end() ? 0 : it->second);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(index_or_current(d.index()), 0); }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return make_stream(index_or_current(d.index()), g_next_stream++);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return make_stream(index_or_current(d.index()), g_next_stream++);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = getStream(s.device());
    t_stream[s.device_index()] = s.id();
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  c10::DeviceCapability getDeviceCapability(c10::Device /*d*/) const override {
    c10::DeviceCapability capability;
    capability.capability_data.capability_bits = 0;
    for (int i = 0; i < static_cast<int>(c10::NumScalarTypes); ++i) {
      if (holds_dtype(static_cast<c10::ScalarType>(i))) capability.capability_data.capability_bits |= 1ULL << i;
    }
    return capability;
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "event device ", device_index,
                " does not match the recording stream's device ", stream.device_index());
    auto* timed = static_cast<TimedEvent*>(*event);
    if (timed == nullptr) {
      timed = new TimedEvent{flag == c10::EventFlag::BACKEND_DEFAULT, {}};
      *event = timed;
    }
    timed->when = std::chrono::steady_clock::now();
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<TimedEvent*>(event);
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex index) const override { check_device(index_or_current(index)); }
  void recordDataPtrOnStream(const c10::DataPtr& /*ptr*/, const c10::Stream& /*stream*/) const override {}

  double elapsedTime(void* first, void* second, const c10::DeviceIndex /*device_index*/) const override {
    auto* a = static_cast<TimedEvent*>(first);
    auto* b = static_cast<TimedEvent*>(second);
    TORCH_CHECK(a != nullptr && b != nullptr, "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(a->timing && b->timing, "Both events must be created with argument 'enable_timing=True'.");
    return std::chrono::duration<double, std::milli>(b->when - a->when).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

std::mutex g_generator_mutex;
std::unordered_map<c10::DeviceIndex, at::Generator> g_generators;

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = current_device();
    set_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<NeuronGenerator>(index_or_current(index));
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override { return at::Device(kDevice, current_device()); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return host_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t size) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    auto fresh = device_allocator()->allocate(size);
    const size_t keep = std::min(size, impl->nbytes());
    if (keep > 0) std::memcpy(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(size);
  }
};

const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  return true;
}();

}  // namespace

bool holds_dtype(c10::ScalarType type) {
  // What the stand-in can hold and convert: the dtypes the CPU's copy kernel takes. Quantized, bit-packed and
  // sub-byte dtypes are left out (the CPU cannot convert them, and nothing says Trainium holds them).
  using S = c10::ScalarType;
  switch (type) {
    case S::Byte: case S::Char: case S::Short: case S::Int: case S::Long: case S::Half: case S::Float:
    case S::Double: case S::ComplexHalf: case S::ComplexFloat: case S::ComplexDouble: case S::Bool:
    case S::BFloat16: case S::Float8_e5m2: case S::Float8_e4m3fn: case S::Float8_e5m2fnuz:
    case S::Float8_e4m3fnuz: case S::UInt16: case S::UInt32: case S::UInt64: case S::Float8_e8m0fnu:
      return true;
    default:
      return false;
  }
}

c10::DeviceIndex device_count() { return static_cast<c10::DeviceIndex>(g_device_count.load()); }
void set_device_count(int count) { g_device_count = count; }
c10::DeviceIndex current_device() { return t_device; }

void check_device(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "neuron:", static_cast<int>(index),
              " does not exist: the stand-in has ", static_cast<int>(device_count()), " neuron device(s)");
}

void set_device(c10::DeviceIndex index) {
  check_device(index);
  t_device = index;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  index = index_or_current(index);
  check_device(index);
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  auto it = g_generators.find(index);
  if (it == g_generators.end()) {
    it = g_generators.emplace(index, at::make_generator<NeuronGenerator>(index)).first;
  }
  return it->second;
}

NeuronGenerator::NeuronGenerator(c10::DeviceIndex index) : at::CPUGeneratorImpl(c10::default_rng_seed_val),
                                                              index_(index) {
  device_ = c10::Device(kDevice, index);
  key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
}

void NeuronGenerator::lend_to_cpu(bool lend) {
  device_ = lend ? c10::Device(c10::kCPU) : c10::Device(kDevice, index_);
  key_set_ = c10::DispatchKeySet(lend ? c10::DispatchKey::CPU : c10::DispatchKey::PrivateUse1);
}

NeuronGenerator* NeuronGenerator::clone_impl() const {
  auto* copy = new NeuronGenerator(index_);
  copy->set_state(*get_state());
  return copy;
}

}  // namespace neuron_standin
