"""Static analysis and codemods: find CUDA-specific code (`scan`) and rewrite it device-agnostically
(`fix`)."""
