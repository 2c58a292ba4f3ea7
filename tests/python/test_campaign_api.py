"""The package's test-suite API (``cudafuzz.fuzz``, ``cudafuzz.assert_no_bugs``): what a
campaign came to, as data and as a failing assertion. No GPU needed."""

import pytest

cudafuzz = pytest.importorskip("cudafuzz", reason="cudafuzz is not installed in this interpreter (pip install the wheel)")


def test_a_campaign_that_cannot_run_says_why(tmp_path):
    with pytest.raises(cudafuzz.CampaignError, match="exited 2") as e:
        cudafuzz.assert_no_bugs(tmp_path / "missing.toml", cases=1, out=tmp_path / "out")
    assert "missing.toml" in str(e.value)


def test_a_campaign_with_bugs_fails_an_assertion_with_its_bug_table(tmp_path):
    table = "bug index: out/bugs.json\n1 bug (2 findings in 1 cases)\nid  kernel  what\nB1  k  canary_damage\n"
    c = cudafuzz.Campaign(1, tmp_path, [{"id": "B1"}], "NEW ...\n" + table, "")
    assert c.table == table.rstrip()
    assert issubclass(cudafuzz.BugsFound, AssertionError)
