// The stand-in `neuron` device: a PrivateUse1 backend whose memory is host memory and whose kernels are the
// CPU's. Shared declarations of its parts: allocators (allocator.cpp), the runtime — device guard, streams,
// events, generator, hooks (runtime.cpp) — op tracking (tracking.cpp); the kernels have kernels.h. Only light
// headers here: the runtime parts compile without ATen's operator headers.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <string>
#include <vector>

namespace neuron_standin {

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

// --- devices (runtime.cpp) -------------------------------------------------------------------------------
c10::DeviceIndex device_count();
void set_device_count(int count);  // before first use; the stand-in has no hardware to count
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
void check_device(c10::DeviceIndex index);
const at::Generator& default_generator(c10::DeviceIndex index);
bool holds_dtype(c10::ScalarType type);  // what get_device_capability reports and empty() accepts

// A neuron generator is a CPU (mt19937/Philox) generator that names the neuron device. CPU kernels only take
// CPU generators, so the fallback lends them this one under the CPU device for the length of one call.
class NeuronGenerator final : public at::CPUGeneratorImpl {
 public:
  explicit NeuronGenerator(c10::DeviceIndex index);
  void lend_to_cpu(bool lend);

 private:
  c10::DeviceIndex index_;
  NeuronGenerator* clone_impl() const override;
};

// --- memory (allocator.cpp) ---------------------------------------------------------------------------
c10::DeviceAllocator* device_allocator();
at::HostAllocator* host_allocator();
bool is_pinned(const void* ptr);
// A new neuron storage holding a copy of `bytes` bytes at `src` (outputs of CPU kernels come back this way).
c10::Storage storage_copy_of(const void* src, size_t bytes, c10::DeviceIndex index);

// --- op tracking (tracking.cpp) -----------------------------------------------------------------------
enum class Support : uint8_t { Native, Fallback, Unsupported, Unknown };

struct Message {  // texts the Python side hands over, so one module owns every verdict's wording
  std::string neuron;    // prefix of a failure Trainium would have too
  std::string stand_in;  // prefix of a limitation of the stand-in itself
  std::string version;   // the opdb snapshot's version, for messages
};

uint64_t dtype_mask(const std::vector<c10::ScalarType>& types);
std::string dtype_names(uint64_t mask);  // "bfloat16/int64", the recorder's spelling
// Records one call of `name` with the dtypes in `mask`; returns the snapshot's answer. An unsupported op raises
// unless the tracer asked to keep going.
Support track(const void* key, const std::string& name, uint64_t mask);
void note_widened(const std::string& name, uint64_t mask, const std::string& note);
const Message& messages();

// Depth of the stand-in's own kernels on this thread: the ops they call internally are not the user's.
struct KernelScope {
  KernelScope();
  ~KernelScope();
  bool outermost() const { return outer_; }

 private:
  bool outer_;
};

}  // namespace neuron_standin
