"""cudafuzz: finds memory-safety and correctness bugs in CUDA kernels.

This package is the command line (``python -m cudafuzz``, or the ``cudafuzz`` script) running
inside your own interpreter, so that kernels you call from Python (PyTorch extensions, Triton
kernels, CuPy ``RawKernel``s) can be fuzzed where they live: a manifest's ``[target]`` names
the callable, and cudafuzz calls it with views of its guarded allocations.

From a test suite, :func:`assert_no_bugs` runs a campaign and fails with its bug table::

    def test_my_softmax_has_no_bugs():
        cudafuzz.assert_no_bugs("kernels/my_softmax.toml", cases=2000)
"""

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ._native import __version__, main as _main  # noqa: F401

__all__ = ["__version__", "run", "fuzz", "assert_no_bugs", "Campaign", "BugsFound", "NoGpu", "CampaignError"]

# The command line's exit statuses (README, "Exit codes").
_OK, _FINDINGS, _NO_GPU = 0, 1, 3


def run(*args: str) -> int:
    """Runs a cudafuzz command line (``run("fuzz", "--kernel", "my.toml")``) and returns its
    exit status."""
    return _main(["cudafuzz", *args])


@dataclass
class Campaign:
    """What a :func:`fuzz` campaign came to."""

    #: The command line's exit status: 0 no finding, 1 findings, 3 no GPU, 4 setup error.
    exit_code: int
    #: The output folder: seeds, ``bugs.json``, the journal. Kept: its seeds replay the bugs.
    out: Path
    #: The bug index (``bugs.json``), one dict per bug (id, kernel, what, site, smallest seed).
    bugs: list = field(default_factory=list)
    #: The campaign's standard output and error.
    stdout: str = ""
    stderr: str = ""

    @property
    def table(self) -> str:
        """The bug table the campaign printed (from its ``bug index:`` line on)."""
        at = self.stdout.find("bug index:")
        return self.stdout[at:].rstrip() if at >= 0 else self.stdout.rstrip()


class BugsFound(AssertionError):
    """The campaign found bugs; the message is its bug table."""


class NoGpu(RuntimeError):
    """No GPU (or no usable driver) on this machine: nothing was run."""


class CampaignError(RuntimeError):
    """The campaign could not run (a bad manifest, a setup that failed): the message says why."""


def fuzz(kernel, *, cases=None, time=None, seed=0, jobs=None, out=None, args=()) -> Campaign:
    """Runs ``cudafuzz fuzz`` on ``kernel`` (a manifest path or a shipped kernel's name) in this
    interpreter and returns the :class:`Campaign`. ``time`` is a duration such as ``"30s"``;
    ``out`` defaults to a new temporary folder (kept); ``args`` are more command-line options."""
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="cudafuzz-"))
    cmd = [sys.executable, "-m", "cudafuzz", "fuzz", "--kernel", os.fspath(kernel), "--seed", str(seed), "--out", os.fspath(out)]
    if cases is not None:
        cmd += ["--cases", str(cases)]
    if time is not None:
        cmd += ["--time", str(time)]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    cmd += [str(a) for a in args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    bugs = []
    index = out / "bugs.json"
    if index.is_file():
        bugs = json.loads(index.read_text()).get("bugs", [])
    return Campaign(done.returncode, out, bugs, done.stdout, done.stderr)


def assert_no_bugs(kernel, **options) -> Campaign:
    """Runs :func:`fuzz` and returns its campaign when it found nothing; raises
    :class:`BugsFound` (an ``AssertionError``, so a test fails) with the bug table when it found
    bugs, :class:`NoGpu` when there is no GPU, :class:`CampaignError` when it could not run."""
    c = fuzz(kernel, **options)
    if c.exit_code == _OK:
        return c
    if c.exit_code == _FINDINGS:
        raise BugsFound(f"cudafuzz found {len(c.bugs)} bug(s) in {kernel} (seeds in {c.out}):\n{c.table}")
    tail = "\n".join(c.stderr.strip().splitlines()[-5:])
    if c.exit_code == _NO_GPU:
        raise NoGpu(f"cudafuzz fuzz {kernel}: no GPU here: {tail}")
    raise CampaignError(f"cudafuzz fuzz {kernel} exited {c.exit_code}: {tail}")
