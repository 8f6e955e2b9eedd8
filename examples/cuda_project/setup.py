"""Build the optional fused bias+GELU extension used by model.BiasGelu.

    python setup.py build_ext --inplace

Needs nvcc; without the extension the model falls back to plain PyTorch ops.
"""
from setuptools import setup
from torch.utils import cpp_extension

setup(
    name="tinygpt",
    version="0.1.0",
    description="Tiny GPT training example with a fused CUDA bias+GELU kernel",
    py_modules=["model", "train", "bench"],
    ext_modules=[
        cpp_extension.CUDAExtension(
            name="fused_op",
            sources=["csrc/fused_op.cpp", "csrc/fused_op_kernel.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--use_fast_math"]},
        ),
    ],
    cmdclass={"build_ext": cpp_extension.BuildExtension},
)
