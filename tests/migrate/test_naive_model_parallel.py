"""Hugging Face's naive model parallelism (`parallelize()`, removed in transformers v5) is left for a person
to remove, not ported: LAVIS's copy of T5 (review 30 rejected its 14 rewritten hunks as dead code)."""

from __future__ import annotations

from .helpers import findings, fixed

_T5 = (
    "import torch\n"
    "from transformers.utils.model_parallel_utils import assert_device_map, get_device_map\n\n\n"
    "class Stack:\n"
    "    def parallelize(self, device_map=None):\n"
    "        self.device_map = get_device_map(len(self.block), range(torch.cuda.device_count()))\n"
    "        assert_device_map(self.device_map, len(self.block))\n"
    "        self.model_parallel = True\n\n"
    "    def deparallelize(self):\n        self.model_parallel = False\n        torch.cuda.empty_cache()\n\n"
    "    def forward(self, hidden):\n"
    "        if self.model_parallel:\n            torch.cuda.set_device(hidden.device)\n"
    "        else:\n            torch.cuda.empty_cache()\n"
    "        return hidden\n"
)


def test_the_parallelize_api_and_its_blocks_are_left_for_a_person_to_remove():
    left = {f.line: f for f in findings(_T5)}
    for line, where in ((7, "parallelize()"), (13, "deparallelize()"), (17, "if self.model_parallel:")):
        assert left[line].fix is None
        assert f"Hugging Face's naive model parallelism (`{where}`" in left[line].message
        assert "remove it with that API rather than port it" in left[line].message
    assert "naive model parallelism" not in left[19].message  # the `else` branch is ordinary code
    assert "torch.cuda.device_count" in fixed(_T5) and "torch.cuda.set_device" in fixed(_T5)


def test_a_module_without_the_helpers_is_ported_as_usual():
    """A method named `parallelize` alone is not the API: the module must use `model_parallel_utils`."""
    own = _T5.replace(
        "from transformers.utils.model_parallel_utils import assert_device_map, get_device_map\n",
        "from mylib import assert_device_map, get_device_map\n",
    )
    assert all("naive model parallelism" not in f.message for f in findings(own))
    assert "torch.cuda.device_count" not in fixed(own)
