"""The real-log evaluation (eval/realworld.py) runs end to end against the
binary under test on one small public log (tests/data/) at one budget in one
format: it writes a row for compactd and for each peer, the keep-the-newest
and LangChain peers stay within the budget, and compactd's row is a valid
body within the budget. The full table comes from
`scripts/eval-realworld.sh`; this proves the runner, not compactd's numbers.
"""

import json
import subprocess
import sys

from conftest import REPO, _binary

LOG = REPO / "tests" / "data" / "swe_agent_marshmallow.json"
BUDGET = 8000


def test_realworld_runner_on_one_log(tmp_path):
    binary = _binary()  # fails (not skips) with a clear message when the binary is missing
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        str(REPO / "eval" / "realworld.py"),
        "--logs", str(LOG),
        "--budgets", str(BUDGET),
        "--formats", "openai",
        "--compactd-bin", str(binary),
        "--out-dir", str(out),
        "--workdir", str(tmp_path / "work"),
        "--timeout", "300",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert [lg["name"] for lg in results["logs"]] == [LOG.stem]
    rows = {r["system"]: r for r in results["rows"]}
    assert set(rows) == {"compactd", "truncate", "langchain", "masking", "bm25"}, rows.keys()
    for r in results["rows"]:
        assert r["budget"] == BUDGET and r["format"] == "openai", r
    for peer in ("truncate", "langchain", "bm25"):
        r = rows[peer]
        assert r["status"] == "ok", r
        assert r["tokens"] <= BUDGET and r["within_budget"], r
    # The BM25 baseline keeps whole turns: its pairs are valid.
    assert rows["bm25"]["valid"], rows["bm25"]
    # compactd refuses only the impossible: on a real log at 8,000 tokens it
    # returns a valid body within the budget.
    ours = rows["compactd"]
    assert ours["status"] == "ok", ours
    assert ours["valid"] and ours["within_budget"], ours
    assert ours["tokens"] <= BUDGET, ours
    table = (out / "table.md").read_text()
    assert LOG.stem in table and "langchain" in table
