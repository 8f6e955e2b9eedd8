"""The harness is not a test that cannot fail: deliberately wrong rewrites are caught, equivalent ones pass.

All programs run in one child interpreter under the CUDA emulation (`run_jobs`); `same_behaviour` itself is
exercised once.
"""

from __future__ import annotations

import pytest

from tests.differential.compare import difference
from tests.differential.harness import Job, run_jobs, same_behaviour

pytestmark = pytest.mark.xdist_group("differential")

TIMING = """\
import torch
model = torch.nn.Linear(4, 4).to("cuda:1")
x = torch.ones(2, 4, device="cuda:1")
torch.cuda.synchronize()
y = model(x)
torch.cuda.synchronize()
print(y.device, round(y.sum().item(), 4))
"""

#: name -> (rewrite of TIMING or of its own original, what the difference must mention; None: no difference)
REWRITES = {
    "equivalent": (TIMING.replace("torch.cuda.synchronize()", "torch.accelerator.synchronize()"), None),
    "guarded": (
        TIMING.replace(
            "torch.cuda.synchronize()",
            "if torch.accelerator.is_available():\n    torch.accelerator.synchronize()",
        ),
        None,
    ),
    "drops a synchronize": (
        TIMING.replace("y = model(x)\ntorch.cuda.synchronize()\n", "y = model(x)\n"),
        "synchronize(cuda)",
    ),
    "loses the index": (TIMING.replace('device="cuda:1"', 'device="cuda"'), "alloc(cuda:1)"),
    "moves to the wrong device": (TIMING.replace('.to("cuda:1")', '.to("cuda:0")'), "to(cuda:1"),
    "synchronize(device=)": (
        TIMING.replace("torch.cuda.synchronize()", "torch.accelerator.synchronize(device=None)"),
        "positional-only",
    ),
    "changes a result": (TIMING.replace("model(x)", "model(x) * 2"), "printed line 1"),
    "stays on the host": (TIMING.replace('.to("cuda:1")', ""), "to(cuda:1, non_blocking=False)"),
}
#: name -> (original, rewrite, what the difference must mention)
PAIRS = {
    "seeds the CPU too": (
        "import torch\ntorch.cuda.manual_seed(1)\n",
        "import torch\ntorch.manual_seed(1)\n",
        "manual_seed(cpu, 1)",
    ),
    "seeds twice": (
        "import torch\ntorch.manual_seed(1)\ntorch.cuda.manual_seed_all(1)\n",
        "import torch\ntorch.manual_seed(1)\ntorch.manual_seed(1)\n",
        None,
    ),
    "set_device without index": (
        "import torch\nd = 'cuda'\nif d.startswith('cuda:'):\n    torch.cuda.set_device(d)\n",
        (
            "import torch\nd = 'cuda'\nif torch.device(d).type != 'cpu':\n"
            "    torch.accelerator.set_device_index(d)\n"
        ),
        "ValueError",
    ),
    "autocast dtype": (
        "import torch\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    pass\n",
        "import torch\nwith torch.autocast('cuda'):\n    pass\n",
        "torch.bfloat16",
    ),
    "nccl vs both backends": (
        "import torch.distributed as d\nd.init_process_group('nccl')\n",
        "import torch.distributed as d\nd.init_process_group('cpu:gloo,cuda:nccl')\n",
        "cpu:gloo,cuda:nccl",
    ),
    "nccl vs default": (
        "import torch.distributed as d\nd.init_process_group('nccl')\n",
        "import torch.distributed as d\nd.init_process_group()\n",
        None,
    ),
    "rank lost in map_location": (
        (
            "import torch, os\ntorch.save({'w': torch.ones(1)}, 'c.pt')\n"
            "s = torch.load('c.pt', map_location=f\"cuda:{os.environ['LOCAL_RANK']}\")\n"
        ),
        "import torch, os\ntorch.save({'w': torch.ones(1)}, 'c.pt')\n"
        "s = torch.load('c.pt', map_location='cuda')\n",
        "torch.load(cuda:1)",
    ),
}


@pytest.fixture(scope="module")
def runs():
    jobs = {"TIMING": Job(TIMING)}
    jobs.update({name: Job(text) for name, (text, _) in REWRITES.items()})
    for name, (original, rewritten, _) in PAIRS.items():
        jobs[f"{name}/original"], jobs[f"{name}/rewritten"] = Job(original), Job(rewritten)
    return run_jobs("cuda", jobs)


@pytest.mark.parametrize("name", list(REWRITES))
def test_wrong_rewrites_are_caught_and_right_ones_pass(runs, name):
    assert runs["TIMING"].error is None, runs["TIMING"]
    found = difference(runs["TIMING"], runs[name])
    expected = REWRITES[name][1]
    if expected is None:
        assert found is None, found
    else:
        assert found is not None and expected in found, found


@pytest.mark.parametrize("name", list(PAIRS))
def test_pairs(runs, name):
    found = difference(runs[f"{name}/original"], runs[f"{name}/rewritten"])
    expected = PAIRS[name][2]
    if expected is None:
        assert found is None, found
    else:
        assert found is not None and expected in found, found


def test_same_behaviour_reports_the_first_difference():
    verdict = same_behaviour(TIMING, REWRITES["drops a synchronize"][0])
    assert not verdict.same
    assert verdict.difference.startswith("device call #")
    assert [c[0] for c in verdict.original.calls].count("synchronize(cuda)") == 2


def test_a_rewrite_that_still_needs_cuda_fails_on_cpu():
    runs = run_jobs(
        "cpu",
        {
            "left": Job("import torch\nx = torch.ones(1).cuda()\n"),
            "fixed": Job(
                "import torch\n"
                "x = torch.ones(1).to(torch.accelerator.current_accelerator(check_available=True)"
                " or torch.device('cpu'))\n"
            ),
        },
    )
    assert runs["left"].error == "AssertionError: Torch not compiled with CUDA enabled", runs["left"]
    assert runs["fixed"].error is None, runs["fixed"]
    assert runs["fixed"].values["x"].startswith("tensor(shape=[1], dtype=torch.float32, device=cpu")
