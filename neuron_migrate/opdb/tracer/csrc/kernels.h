// The stand-in's kernels (kernels.cpp: the tracked CPU kernel for every op; minimal.cpp: allocation, views,
// copies), for the bindings and each other.
#pragma once

#include "standin.h"

#include <ATen/ATen.h>

namespace neuron_standin {

void register_boxed_kernels(const std::vector<std::string>& names);
const std::vector<std::string>& own_kernels();  // the kernels minimal.cpp registers itself
at::Tensor alias_on_cpu(const at::Tensor& tensor);  // a CPU tensor over the same memory
at::Tensor make_neuron_tensor(c10::Storage storage, const at::Tensor& like);  // `like`'s geometry on `storage`

}  // namespace neuron_standin
