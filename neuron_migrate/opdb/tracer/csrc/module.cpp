// Python bindings of the stand-in device (imported by neuron_migrate/opdb/tracer/native_device.py).
#include "kernels.h"
#include "tracking.h"

#include <torch/csrc/Generator.h>
#include <torch/extension.h>

namespace py = pybind11;
using namespace neuron_standin;

namespace {

Support support_of(const std::string& status) {
  if (status == "native") return Support::Native;
  if (status == "cpu_fallback") return Support::Fallback;
  if (status == "unsupported") return Support::Unsupported;
  return Support::Unknown;
}

void configure(py::function resolve, const std::string& neuron_prefix, const std::string& stand_in_prefix,
               const std::string& version, bool keep_going) {
  // Deliberately leaked: a py::function destroyed at interpreter exit (without the GIL) aborts the process.
  auto* holder = new py::function(std::move(resolve));
  Resolver resolver = [holder](const std::string& name, const std::vector<std::string>& dtypes) {
    py::gil_scoped_acquire gil;
    py::tuple names(dtypes.size());
    for (size_t i = 0; i < dtypes.size(); ++i) names[i] = py::str(dtypes[i]);
    return support_of((*holder)(name, names).cast<std::string>());
  };
  configure_tracking(std::move(resolver), Message{neuron_prefix, stand_in_prefix, version}, keep_going);
}

py::dict tracked() {
  auto ops = tracked_ops();
  py::dict out;
  out["executed"] = ops.executed;
  out["fallback"] = ops.fallback;
  out["unsupported"] = ops.unsupported;
  py::list widened;
  for (const auto& w : ops.widened) widened.append(py::make_tuple(w.op, w.dtypes, w.note));
  out["widened"] = widened;
  return out;
}

py::object generator(int index) {
  return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(index)));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The stand-in neuron device (PrivateUse1 over host memory)";
  m.def("set_device_count", &set_device_count, "How many neuron devices the stand-in has (before first use).");
  m.def("device_count", []() { return static_cast<int>(device_count()); });
  m.def("current_device", []() { return static_cast<int>(current_device()); });
  m.def("set_device", [](int index) { set_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("configure", &configure, "Set the opdb resolver, message prefixes, snapshot version and keep_going.");
  m.def("register_kernels", &register_boxed_kernels, "Register the tracked CPU kernel for these aten overloads.");
  m.def("own_kernels", &own_kernels, "The overloads the extension implements itself.");
  m.def("tracked", &tracked, "Executed / fallback / unsupported op names and widened (op, dtypes, note).");
  m.def("clear_tracking", &clear_tracking);
  m.def("default_generator", &generator, "The default generator of neuron:index.");
}
