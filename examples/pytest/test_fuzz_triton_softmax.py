"""A PyTorch / Triton user's test suite running cudafuzz: each test fuzzes one kernel through
its Python entry point and fails with the bug table when cudafuzz finds a bug.

    pip install target/wheels/cudafuzz-*.whl   # the wheel, into the environment with torch
    pytest examples/pytest -q

The tutorial's softmax passes; the copy with an unmasked store fails, by design, showing what a
failure looks like: the bug, its site in the Triton source and the seed that replays it.
"""

from pathlib import Path

import pytest

cudafuzz = pytest.importorskip("cudafuzz", reason="cudafuzz is not installed in this interpreter (pip install the wheel)")

KERNELS = Path(__file__).resolve().parents[2] / "kernels" / "python"


@pytest.mark.parametrize("manifest", ["triton_softmax.toml", "triton_softmax_unmasked_store.toml"])
def test_softmax_has_no_bugs(manifest):
    try:
        cudafuzz.assert_no_bugs(KERNELS / manifest, cases=500, jobs=4, seed=1)
    except cudafuzz.NoGpu as e:
        pytest.skip(str(e))
