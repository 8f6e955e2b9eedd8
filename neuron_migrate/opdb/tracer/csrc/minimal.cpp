// The kernels every PrivateUse1 backend must own because they make or reshape device tensors themselves:
// allocation, views over the same storage, resize, copies between host and device, reading a scalar.
// Each one is tracked like any other op, so the device's tracking API sees every op the recorder sees.
#include "kernels.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_copy_from_and_resize_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace neuron_standin {
namespace {

uint64_t mask_of(const at::Tensor& t) { return t.defined() ? 1ULL << static_cast<int>(t.scalar_type()) : 0; }
uint64_t mask_of(c10::ScalarType t) { return 1ULL << static_cast<int>(t); }

// One tracked call of a kernel named `name`, unless a stand-in kernel called it.
void tracked(const KernelScope& scope, const std::string& name, uint64_t mask) {
  if (scope.outermost()) track(&name, name, mask);
}

void check_dtype(c10::ScalarType type) {
  TORCH_CHECK_TYPE(holds_dtype(type), messages().stand_in, "the stand-in neuron device cannot hold ", type,
                   " tensors (torch.accelerator.get_device_capability() lists the dtypes it holds)");
}

at::Tensor cpu_view(const at::Tensor& t) { return t.device().type() == kDevice ? alias_on_cpu(t) : t; }

const std::string kEmpty = "aten::empty.memory_format";
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  KernelScope scope;
  const auto type = c10::dtype_or_default(dtype);
  tracked(scope, kEmpty, mask_of(type));
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "the neuron device has strided tensors only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only CPU memory can be pinned");
  check_dtype(type);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type,
                                   memory_format);
}

const std::string kEmptyStrided = "aten::empty_strided";
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  KernelScope scope;
  const auto type = c10::dtype_or_default(dtype);
  tracked(scope, kEmptyStrided, mask_of(type));
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "the neuron device has strided tensors only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only CPU memory can be pinned");
  check_dtype(type);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type);
}

const std::string kAsStrided = "aten::as_strided";
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> offset) {
  KernelScope scope;
  tracked(scope, kAsStrided, mask_of(self));
  std::optional<int64_t> plain = offset.has_value() ? std::optional<int64_t>(offset->expect_int()) : std::nullopt;
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           plain);
}

const std::string kView = "aten::view";
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  KernelScope scope;
  tracked(scope, kView, mask_of(self));
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

const std::string kReshapeAlias = "aten::_reshape_alias";
at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  KernelScope scope;
  tracked(scope, kReshapeAlias, mask_of(self));
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const std::string kResize = "aten::resize_";
const at::Tensor& resize(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<c10::MemoryFormat> format) {
  KernelScope scope;
  tracked(scope, kResize, mask_of(self));
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), format);
}

const std::string kCopyFrom = "aten::_copy_from";
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  KernelScope scope;
  tracked(scope, kCopyFrom, mask_of(self) | mask_of(dst));
  auto target = cpu_view(dst);
  target.copy_(cpu_view(self), non_blocking);
  return dst;
}

const std::string kCopyFromAndResize = "aten::_copy_from_and_resize";
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  KernelScope scope;
  tracked(scope, kCopyFromAndResize, mask_of(self) | mask_of(dst));
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  cpu_view(dst).copy_(cpu_view(self));
  return dst;
}

const std::string kToCopy = "aten::_to_copy";
at::Tensor to_copy(const at::Tensor& self, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                   std::optional<c10::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<c10::MemoryFormat> memory_format) {
  KernelScope scope;
  tracked(scope, kToCopy, mask_of(self));
  // The generic kernel allocates the result (pinned host memory for a non-blocking copy to the CPU, as on a
  // device) and copies into it through the kernels above.
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
}

const std::string kLocalScalar = "aten::_local_scalar_dense";
at::Scalar local_scalar_dense(const at::Tensor& self) {
  KernelScope scope;
  tracked(scope, kLocalScalar, mask_of(self));
  return alias_on_cpu(self).item();
}

const std::string kSetStorageOffset = "aten::set_.source_Storage_storage_offset";
at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                               c10::SymIntArrayRef stride) {
  KernelScope scope;
  tracked(scope, kSetStorageOffset, mask_of(self));
  return at::cpu::set_(self, source, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const std::string kSetStorage = "aten::set_.source_Storage";
at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  KernelScope scope;
  tracked(scope, kSetStorage, mask_of(self));
  return at::native::set_(self, source);
}

const std::string kSetTensor = "aten::set_.source_Tensor";
at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  KernelScope scope;
  tracked(scope, kSetTensor, mask_of(self) | mask_of(source));
  return at::native::set_tensor_(self, source);
}

const std::string kRecordStream = "aten::record_stream";
void record_stream(at::Tensor& self, c10::Stream stream) {
  KernelScope scope;
  tracked(scope, kRecordStream, mask_of(self));
  device_allocator()->recordStream(self.storage().data_ptr(), stream);
}

}  // namespace

const std::vector<std::string>& own_kernels() {
  static const std::vector<std::string> names = {
      "empty.memory_format", "empty_strided", "as_strided", "view", "_reshape_alias", "resize_", "_copy_from",
      "_copy_from_and_resize", "_to_copy", "_local_scalar_dense", "set_.source_Storage_storage_offset",
      "set_.source_Storage", "set_.source_Tensor", "record_stream"};
  return names;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_to_copy", to_copy);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("record_stream", record_stream);
}

}  // namespace neuron_standin
