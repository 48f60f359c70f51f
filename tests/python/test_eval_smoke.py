"""The fact-retention evaluation (eval/run.py) runs end to end against the
binary under test on small seeded threads, and what it measures holds the
lines that are not a matter of degree: compactd never orphans a tool pair,
never exceeds the budget, never fails, and keeps far more planted facts than
both baselines on the same threads. The full table in docs/evaluation.md comes from
`scripts/eval.sh`; this only proves the runner and those invariants.
"""

import json
import subprocess
import sys

from conftest import REPO, _binary


def test_eval_runner_on_small_threads(tmp_path):
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        str(REPO / "eval" / "run.py"),
        "--sizes", "160",
        "--seeds", "11",
        "--ratios", "4,20",
        "--compactd-bin", str(_binary()),
        "--out-dir", str(out),
        "--workdir", str(tmp_path / "work"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    rows = {(r["system"], r["ratio"]): r for r in results["aggregate"]}
    for ratio in (4, 20):
        ours = rows[("compactd", ratio)]
        assert ours["failed"] == 0, ours
        assert ours["orphans"] == 0, ours
        assert ours["over_budget"] == 0, ours
        for baseline in ("langchain", "truncate"):
            theirs = rows[(baseline, ratio)]
            assert ours["kept_pct"] >= theirs["kept_pct"] + 20, (ours, theirs)
    assert (out / "table.md").exists() and (out / "retention.png").exists()
