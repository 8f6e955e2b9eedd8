// How the stand-in runs an op: every neuron tensor argument becomes a CPU tensor over the same host memory
// (no copy), the CPU kernel runs, and its results come back as neuron tensors — the same tensor for in-place
// and out= ops, a view on the same neuron storage for views, a copy into the device allocator otherwise.
// Each call is tracked against the opdb (tracking.cpp). When the CPU kernel lacks the dtype of an op the opdb
// calls native (or does not know), the op is computed in a wider dtype and converted back (recorded as such);
// an op that is a CPU fallback on neuron runs the CPU kernel there too, so its dtype gaps stay failures.
#include "kernels.h"
#include "tracking.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

namespace neuron_standin {
namespace {

bool is_neuron(const at::Tensor& t) { return t.defined() && t.device().type() == kDevice; }

void add_dtypes(const c10::IValue& v, uint64_t& mask) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (t.defined()) mask |= 1ULL << static_cast<int>(t.scalar_type());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector()) {
      if (t.defined()) mask |= 1ULL << static_cast<int>(t.scalar_type());
    }
  } else if (v.isList()) {
    for (const auto& item : v.toListRef()) {
      if (item.isTensor() && item.toTensor().defined()) mask |= 1ULL << static_cast<int>(item.toTensor().scalar_type());
    }
  }
}

const std::string& name_of(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static std::unordered_map<const void*, std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  const auto& schema = op.schema();
  auto it = names.find(&schema);
  if (it == names.end()) {
    std::string name = schema.name();
    if (!schema.overload_name().empty()) name += "." + schema.overload_name();
    it = names.emplace(&schema, std::move(name)).first;
  }
  return it->second;
}

bool optional_generator(const c10::Argument& arg) {
  const auto& type = arg.type();
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// The CPU side of one call: aliases of the neuron arguments, the neuron generators lent to the CPU kernel,
// and where the results go.
class CpuCall {
 public:
  ~CpuCall() {
    for (auto* gen : lent_) gen->lend_to_cpu(false);
  }

  c10::IValue to_cpu(const c10::IValue& v, const c10::Argument& arg) {
    if (v.isTensor()) return alias(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorVector()) out.push_back(alias(t));
      return out;
    }
    if (v.isList()) {
      auto list = v.toList();
      c10::impl::GenericList out(list.elementType());
      for (const auto& item : list) out.push_back(item.get().isTensor() ? c10::IValue(alias(item.get().toTensor()))
                                                                        : item.get());
      return out;
    }
    if (v.isDevice()) {
      auto device = v.toDevice();
      to_neuron_ = device.type() == kDevice;
      if (!to_neuron_.value()) return v;
      index_ = device.has_index() ? device.index() : current_device();
      return c10::IValue(c10::Device(c10::kCPU));
    }
    if (v.isGenerator() && v.toGenerator().device().type() == kDevice) return lend(v.toGenerator());
    if (v.isNone() && optional_generator(arg)) return lend(default_generator(-1));
    return v;
  }

  bool results_on_neuron() const { return to_neuron_.value_or(any_neuron_); }
  c10::DeviceIndex index() const { return index_ < 0 ? current_device() : index_; }

  c10::IValue to_neuron(const c10::IValue& v) {
    if (v.isTensor()) return back(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorVector()) out.push_back(back(t));
      return out;
    }
    return v;
  }

  // A mutated argument whose CPU alias was resized or given new geometry: carry that over to the neuron tensor.
  void sync_mutated() {
    for (auto& [neuron, cpu] : aliases_) {
      auto* storage = neuron.storage().unsafeGetStorageImpl();
      const auto* cpu_storage = cpu.storage().unsafeGetStorageImpl();
      if (cpu_storage->data() != storage->data() || cpu_storage->nbytes() != storage->nbytes()) {
        auto fresh = device_allocator()->allocate(cpu_storage->nbytes());
        if (cpu_storage->nbytes() > 0) std::memcpy(fresh.get(), cpu_storage->data(), cpu_storage->nbytes());
        storage->set_data_ptr_noswap(std::move(fresh));
        storage->set_nbytes(cpu_storage->nbytes());
      }
      if (neuron.sizes() != cpu.sizes() || neuron.strides() != cpu.strides() ||
          neuron.storage_offset() != cpu.storage_offset()) {
        neuron.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
      }
    }
  }

  const at::Tensor* original_of(const at::Tensor& cpu) const {
    for (const auto& [neuron, alias] : aliases_) {
      if (alias.unsafeGetTensorImpl() == cpu.unsafeGetTensorImpl()) return &neuron;
    }
    return nullptr;
  }

 private:
  at::Tensor alias(const at::Tensor& t) {
    if (!is_neuron(t)) return t;
    any_neuron_ = true;
    if (index_ < 0) index_ = t.device().index();
    for (const auto& [neuron, cpu] : aliases_) {
      if (neuron.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return cpu;  // x.add_(x) stays one tensor
    }
    auto cpu = alias_on_cpu(t);
    aliases_.emplace_back(t, cpu);
    return cpu;
  }

  c10::IValue lend(const at::Generator& gen) {
    auto* impl = static_cast<NeuronGenerator*>(gen.unsafeGetGeneratorImpl());
    impl->lend_to_cpu(true);
    lent_.push_back(impl);
    return c10::IValue(gen);
  }

  at::Tensor back(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::kCPU) return t;
    if (const auto* original = original_of(t)) return *original;
    if (!results_on_neuron()) return t;
    for (const auto& [neuron, cpu] : aliases_) {  // a view of an argument: same neuron storage, new geometry
      if (cpu.storage().unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl()) {
        return make_neuron_tensor(neuron.storage(), t);
      }
    }
    const auto* storage = t.storage().unsafeGetStorageImpl();
    return make_neuron_tensor(storage_copy_of(storage->data(), storage->nbytes(), index()), t);
  }

  std::vector<std::pair<at::Tensor, at::Tensor>> aliases_;
  std::vector<NeuronGenerator*> lent_;
  std::optional<bool> to_neuron_;
  bool any_neuron_ = false;
  c10::DeviceIndex index_ = -1;
};

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // Straight to the CPU kernel: no dispatch mode (the recorder) sees the aliases.
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

bool cpu_lacks_it(const std::string& what) {
  return what.find("not implemented for '") != std::string::npos || what.rfind("Could not run '", 0) == 0;
}

bool is_index_argument(const std::string& name) {
  static const std::set<std::string> names = {"target", "index", "indices", "offsets", "lengths", "batch_sizes",
                                              "boundaries", "sorted_sequence", "cu_seqlens_q", "cu_seqlens_k"};
  return names.count(name) > 0;
}

std::vector<c10::ScalarType> wider(c10::ScalarType t) {
  using S = c10::ScalarType;
  switch (t) {
    case S::Bool: case S::Byte: case S::Char: case S::Short: case S::Int: return {S::Long, S::Double};
    case S::Long: return {S::Double};  // exact only below 2**53: run_widened checks the values
    case S::Half: case S::BFloat16: return {S::Float, S::Double};
    case S::Float: return {S::Double};
    case S::ComplexHalf: return {S::ComplexFloat, S::ComplexDouble};
    case S::ComplexFloat: return {S::ComplexDouble};
    default: return {};
  }
}

// Run the op with its floating and integer arguments widened (`level` 0: the next wider dtype, 1: float64 /
// complex128), then narrow results and mutated arguments back. False when no widening made the CPU kernel run.
bool run_widened(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::vector<c10::IValue>& originals,
                 const std::string& name, uint64_t mask, Support support) {
  const auto& schema = op.schema();
  const size_t base = stack->size() - originals.size();
  for (int level = 0; level < 2; ++level) {
    CpuCall call;
    std::unordered_map<int, c10::ScalarType> back_to;  // widened dtype -> the dtype it stands for
    struct Widened {
      at::Tensor wide, original;
      bool written;
    };
    std::vector<Widened> widened_args;
    uint64_t widened_mask = 0;
    bool written = false;
    bool exact = true;
    auto widen = [&](const at::Tensor& cpu, const at::Tensor& original) -> at::Tensor {
      auto ladder = wider(cpu.scalar_type());
      if (!cpu.defined() || ladder.empty()) return cpu;
      auto to = ladder[std::min<size_t>(level, ladder.size() - 1)];
      constexpr int64_t limit = int64_t{1} << 53;
      if (cpu.scalar_type() == c10::ScalarType::Long && cpu.numel() > 0 &&
          (cpu.max().item<int64_t>() > limit || cpu.min().item<int64_t>() < -limit)) {
        exact = false;  // float64 cannot hold these int64 values exactly
        return cpu;
      }
      back_to.emplace(static_cast<int>(to), cpu.scalar_type());
      widened_mask |= 1ULL << static_cast<int>(to);
      auto wide = cpu.to(to);
      widened_args.push_back({wide, original, written});
      return wide;
    };
    stack->resize(base);
    for (size_t i = 0; i < originals.size(); ++i) {
      auto cpu = call.to_cpu(originals[i], schema.arguments()[i]);
      const auto* info = schema.arguments()[i].alias_info();
      written = info != nullptr && info->isWrite();
      if (is_index_argument(schema.arguments()[i].name())) {
        stack->push_back(std::move(cpu));  // class labels and indices keep their integer dtype
        continue;
      }
      if (cpu.isTensor()) {
        cpu = widen(cpu.toTensor(), originals[i].toTensor());
      } else if (cpu.isTensorList()) {
        c10::List<at::Tensor> list;
        auto neuron = originals[i].toTensorList();
        auto cpus = cpu.toTensorList();
        for (size_t j = 0; j < cpus.size(); ++j) list.push_back(widen(cpus.get(j), neuron.get(j)));
        cpu = list;
      }
      stack->push_back(std::move(cpu));
    }
    if (!exact) return false;
    try {
      c10::impl::ExcludeDispatchKeyGuard no_python(
          c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    } catch (const c10::Error&) {
      continue;  // not computable this way (the original failure was the dtype gap): try the next level
    }
    call.sync_mutated();
    // Widened mutated arguments: write the narrowed values into the neuron tensors the caller holds.
    for (auto& arg : widened_args) {
      if (!arg.written || !is_neuron(arg.original)) continue;
      if (arg.original.sizes() != arg.wide.sizes()) arg.original.resize_(arg.wide.sizes());
      alias_on_cpu(arg.original).copy_(arg.wide);
    }
    const size_t returns = schema.returns().size();
    for (size_t j = stack->size() - returns; j < stack->size(); ++j) {
      auto& value = (*stack)[j];
      auto narrow = [&](const at::Tensor& t) -> at::Tensor {
        for (auto& arg : widened_args) {
          if (arg.wide.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return arg.original;
        }
        auto it = t.defined() ? back_to.find(static_cast<int>(t.scalar_type())) : back_to.end();
        return it == back_to.end() ? t : t.to(it->second);
      };
      if (value.isTensor()) {
        value = call.to_neuron(narrow(value.toTensor()));
      } else if (value.isTensorList()) {
        c10::List<at::Tensor> list;
        for (const at::Tensor& t : value.toTensorVector()) list.push_back(narrow(t));
        value = call.to_neuron(list);
      }
    }
    note_widened(name, mask, "the stand-in computed it in " + dtype_names(widened_mask) +
                                 " and converted the result back: its CPU kernel has no " + dtype_names(mask) +
                                 (support == Support::Native ? " (the opdb calls it native on neuron)"
                                                             : " (the opdb does not know it on neuron)"));
    return true;
  }
  return false;
}

}  // namespace

at::Tensor alias_on_cpu(const at::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), storage->nbytes(),
                           c10::DataPtr(storage->mutable_data(), c10::Device(c10::kCPU)), c10::GetCPUAllocator(),
                           /*resizable=*/true);
  auto cpu = at::detail::make_tensor<c10::TensorImpl>(std::move(cpu_storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                      t.dtype());
  cpu.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) cpu.unsafeGetTensorImpl()->set_wrapped_number(true);
  return cpu;
}

at::Tensor make_neuron_tensor(c10::Storage storage, const at::Tensor& like) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                    like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return t;
}

void neuron_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  KernelScope scope;
  const auto& schema = op.schema();
  const size_t count = schema.arguments().size();
  const size_t base = stack->size() - count;
  std::vector<c10::IValue> originals(stack->begin() + static_cast<long>(base), stack->end());
  uint64_t mask = 0;
  for (const auto& v : originals) add_dtypes(v, mask);
  const std::string& name = name_of(op);
  Support support = Support::Native;
  const bool tracked_first = scope.outermost() && mask != 0;
  if (tracked_first) support = track(&schema, name, mask);
  try {
    CpuCall call;
    for (size_t i = 0; i < count; ++i) (*stack)[base + i] = call.to_cpu(originals[i], schema.arguments()[i]);
    run_on_cpu(op, stack);
    call.sync_mutated();
    for (size_t j = stack->size() - schema.returns().size(); j < stack->size(); ++j) {
      (*stack)[j] = call.to_neuron((*stack)[j]);
    }
  } catch (const c10::Error& err) {
    const std::string what = err.what_without_backtrace();
    if (!cpu_lacks_it(what)) throw;
    if (support == Support::Fallback) {
      TORCH_CHECK(false, messages().neuron, name, " (", dtype_names(mask), ") runs through the CPU fallback on "
                  "neuron, and the CPU kernel does not take this dtype: ", what);
    }
    if (!run_widened(op, stack, originals, name, mask, support)) {
      TORCH_CHECK(false, messages().stand_in, name, " (", dtype_names(mask), ") is ",
                  support == Support::Native ? "native" : "unknown", " on neuron in the opdb, but the stand-in "
                  "computes on the CPU, whose kernel does not take this dtype, and no wider dtype works: ", what);
    }
  }
  if (scope.outermost() && !tracked_first) {  // factories: the outputs' dtypes decide
    uint64_t out_mask = 0;
    for (size_t j = stack->size() - schema.returns().size(); j < stack->size(); ++j) add_dtypes((*stack)[j], out_mask);
    track(&schema, name, out_mask);
  }
}

namespace {
std::mutex g_library_mutex;
std::vector<std::unique_ptr<torch::Library>> g_libraries;  // a Library removes its kernels when destroyed
}  // namespace

void register_boxed_kernels(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(g_library_mutex);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                                  __FILE__, __LINE__);
  for (const auto& name : names) {
    library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_kernel>());
  }
  g_libraries.push_back(std::move(library));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_kernel>());
}

}  // namespace neuron_standin
