// One thread per element: out = gelu_tanh(x + bias[col]).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

namespace {

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t width) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float z = x[i] + bias[i % width];
  const float u = 0.7978845608f * (z + 0.044715f * z * z * z);  // sqrt(2/pi) * (z + 0.044715 z^3)
  out[i] = 0.5f * z * (1.0f + tanhf(u));
}

}  // namespace

torch::Tensor bias_gelu_cuda(const torch::Tensor& x, const torch::Tensor& bias) {
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  bias_gelu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, bias.size(0));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
