// Python binding for the fused bias + tanh-GELU forward (see fused_op_kernel.cu).
#include <torch/extension.h>

torch::Tensor bias_gelu_cuda(const torch::Tensor& x, const torch::Tensor& bias);

torch::Tensor bias_gelu(const torch::Tensor& x, const torch::Tensor& bias) {
  TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "bias_gelu: x and bias must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
              "bias_gelu: float32 only (model.BiasGelu casts under autocast)");
  TORCH_CHECK(bias.dim() == 1 && x.size(-1) == bias.size(0),
              "bias_gelu: bias must be 1-D and match the last dimension of x");
  return bias_gelu_cuda(x.contiguous(), bias.contiguous());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bias_gelu", &bias_gelu, "gelu_tanh(x + bias), forward only");
}
