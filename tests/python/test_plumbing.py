"""Python targets' plumbing, without a GPU: every offset, stride and dtype a plan can hold lands
in the callable's view exactly where the plan says (address, shape, strides, type, and the bits
of every element), read by a DLPack reader of our own and, where numpy knows the type, by
numpy.from_dlpack; dims and scalars arrive as Python ints, floats and bools, positionally and by
keyword. Run by tests/python_targets.rs (or pytest here) in an interpreter with cudafuzz
installed."""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

cudafuzz_native = pytest.importorskip("cudafuzz._native", reason="cudafuzz is not installed in this interpreter (pip install the wheel)")

import plumbing_target  # noqa: E402

# DLPack type codes: int 0, uint 1, float 2, bfloat 4.
DTYPES = {"f16": [2, 16, 1], "bf16": [4, 16, 1], "f32": [2, 32, 1], "f64": [2, 64, 1], "i8": [0, 8, 1], "u8": [1, 8, 1], "i32": [0, 32, 1], "u32": [1, 32, 1], "i64": [0, 64, 1]}
CASES = int(os.environ.get("CUDAFUZZ_PLUMBING_CASES", "300"))


@pytest.fixture(scope="module")
def report():
    plumbing_target.SEEN.clear()
    cases = json.loads(cudafuzz_native.plumbing(os.path.join(HERE, "plumbing.toml"), CASES, 7))
    assert len(plumbing_target.SEEN) == len(cases) == CASES
    return list(zip(cases, plumbing_target.SEEN))


def test_every_call_returned(report):
    for case, _ in report:
        assert case["outcome"] == {"outcome": "returned"}, case["case"]


def test_each_view_is_where_the_plan_put_it(report):
    for case, seen in report:
        for t in case["tensors"]:
            v = t["view"]
            got = seen["tensors"][v["name"]]
            where = f'{case["case"]}: {v["name"]}'
            assert seen["names"][v["name"]] == v["name"], where
            assert got["ptr"] == v["ptr"], where
            assert got["byte_offset"] == 0, where
            assert got["shape"] == v["shape"], where
            assert got["strides"] == v["strides"], where
            assert got["dtype"] == DTYPES[v["dtype"]], where
            assert got["device"] == [1, 0], where
            assert got["bits"] == t["bits"], where


def test_numpy_reads_the_same_elements(report):
    checked = 0
    for case, seen in report:
        if seen["numpy"] is None:
            pytest.skip("numpy is not installed in this interpreter")
        for t in case["tensors"]:
            name = t["view"]["name"]
            if name in seen["numpy"]:
                assert seen["numpy"][name] == t["bits"], f'{case["case"]}: {name}'
                checked += 1
    assert checked > 0


def test_the_cases_cover_offsets_strides_broadcast_and_types(report):
    residues, dtypes, broadcast, padded, permuted = set(), set(), False, False, False
    for case, _ in report:
        for t in case["tensors"]:
            v = t["view"]
            size = DTYPES[v["dtype"]][1] // 8
            residues.add(v["ptr"] % 16 if v["ptr"] % size == 0 else "misaligned")
            dtypes.add(v["dtype"])
            broadcast |= 0 in v["strides"] and all(n > 1 for n in v["shape"])
            dense = [1]
            for n in reversed(v["shape"][1:]):
                dense.insert(0, dense[0] * n)
            positive = [s for s, n in zip(v["strides"], v["shape"]) if n > 1]
            padded |= len(positive) > 1 and v["strides"] != dense and positive == sorted(positive, reverse=True)
            permuted |= positive != sorted(positive, reverse=True)
    assert dtypes == {"f16", "bf16", "f32", "f64", "i8", "i32", "u8", "u32", "i64"}, dtypes
    assert len([r for r in residues if r != "misaligned"]) >= 4, residues
    assert broadcast and padded and permuted


def test_dims_and_scalars_arrive_as_python_numbers(report):
    for case, seen in report:
        s, types = seen["scalars"], seen["types"]
        assert types == {"rows": "int", "flag": "bool", "scale": "float", "count": "int"}, case["case"]
        x = next(t["view"] for t in case["tensors"] if t["view"]["name"] == "x")
        assert s["rows"] == x["shape"][0]
        assert s["cols_depth"] == x["shape"][1] * x["shape"][2]
        assert s["stride"] == x["strides"][0]
        assert s["scale"] in (0.5, 2.0)
