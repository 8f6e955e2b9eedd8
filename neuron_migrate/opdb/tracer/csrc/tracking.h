// Op tracking of the stand-in (see tracking.cpp); used by the kernels and the bindings.
#pragma once

#include "standin.h"

#include <functional>

namespace neuron_standin {

using Resolver = std::function<Support(const std::string& name, const std::vector<std::string>& dtypes)>;

struct WidenedOp {
  std::string op;
  std::string dtypes;  // comma-separated, sorted
  std::string note;
};

struct TrackedOps {
  std::vector<std::string> executed, fallback, unsupported;
  std::vector<WidenedOp> widened;
};

std::vector<std::string> dtype_list(uint64_t mask);
void configure_tracking(Resolver resolver, Message messages, bool keep_going);
TrackedOps tracked_ops();
void clear_tracking();

}  // namespace neuron_standin
