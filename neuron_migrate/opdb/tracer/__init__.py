"""The tracer: the stand-in `neuron` device (`device`: a C++ PrivateUse1 backend built on first use, with the
pure-Python `python_device` as fallback), the op recorder, the child process that runs a target (`child`), the
targets it can run (`targets`) and the parent-side runner that bounds that child (`runner`)."""
