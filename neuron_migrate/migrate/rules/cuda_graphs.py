"""NM407: CUDA graph capture and replay (`torch.cuda.CUDAGraph`, `graph`, `make_graphed_callables`)."""

from __future__ import annotations

from typing import ClassVar

from neuron_migrate.migrate.patterns import QualifiedNameRule
from neuron_migrate.migrate.rule import Invalid

_GRAPH_API = (
    "CUDAGraph",
    "graph",
    "make_graphed_callables",
    "graph_pool_handle",
    "is_current_stream_capturing",
)


class CudaGraphs(QualifiedNameRule):
    """CUDA graphs: `torch.cuda.CUDAGraph`, `torch.cuda.graph(...)`, `torch.cuda.make_graphed_callables`.

    What it does
    Flags uses of `torch.cuda.CUDAGraph`, `graph`, `make_graphed_callables`, `graph_pool_handle` and
    `is_current_stream_capturing` (also through `torch.cuda.graphs`).

    Why it matters on Trainium
    TorchNeuron has no CUDA graphs and no equivalent of graph trees. The generic `torch.accelerator.Graph`
    of torch 2.13 is not supported on the `neuron` device either. Launch overhead on Trainium is removed by
    compiling: `torch.compile` picks the `neuron` backend on a Neuron device and runs the whole graph as one
    compiled program.

    Example
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = model(static_in)
    g.replay()

    Use instead
    compiled = torch.compile(model)  # backend "neuron" on Trainium
    out = compiled(x)

    Fix safety
    No automatic fix: capture, static buffers and replay have to be removed by hand.
    """

    code = "NM407"
    name = "cuda-graphs"
    message = (
        "`{short}` is a CUDA graph API with no Trainium equivalent: remove the capture and replay and "
        'use `torch.compile(model)` (backend "neuron")'
    )
    severity = "error"
    fix_safety = "none"
    cuda_design = True
    triggers = ((b"cuda", b"graph"), (b"cuda", b"Graph"))
    names_only = True
    NAMES: ClassVar[dict[str, str | None]] = {
        f"torch.cuda{sub}.{name}": None for sub in ("", ".graphs") for name in _GRAPH_API
    }
    VALID = (
        "import torch\ncompiled = torch.compile(model)\n",
        "import torch\ng = torch.fx.Graph()\n",
        "import networkx as nx\ng = nx.graph()\n",
    )
    INVALID = (
        Invalid(
            "import torch\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    out = model(x)\n"
            "g.replay()\n",
            count=2,
        ),
        Invalid(
            "from torch.cuda import make_graphed_callables\nmodel = make_graphed_callables(model, (x,))\n",
        ),
        Invalid(
            "import torch.cuda.graphs as graphs\npool = graphs.graph_pool_handle()\n",
        ),
    )
