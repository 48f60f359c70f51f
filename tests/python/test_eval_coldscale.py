"""The cold-path harness (eval/coldscale.py) runs end to end against the
binary under test on two small threads built from the real logs: each row
has compactd's time and peak RSS and both LangChain timings, compactd's
output was checked (within the budget, no orphaned tool message) and the
growth exponent is reported. The table in docs/performance.md comes from the full run;
this proves the harness, not the numbers.
"""

import json
import subprocess
import sys

from conftest import REPO, _binary


def test_coldscale_harness_on_small_threads(tmp_path):
    binary = _binary()  # fails (not skips) with a clear message when the binary is missing
    out = tmp_path / "coldscale.json"
    cmd = [
        sys.executable, str(REPO / "eval" / "coldscale.py"),
        "--sizes", "0.3,0.6", "--repeat", "1", "--budget", "8000", "--out", str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={"COMPACTD_BIN": str(binary), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    # Whole logs are laid end to end, so a thread ends at or a little past
    # its size (which logs exist depends on the checkout: ../shared may not).
    assert len(rows) == 2 and 0.25 <= rows[0]["mb"] < rows[1]["mb"], rows
    for r in rows:
        assert 0 < r["tokens_after"] <= 8000, r
        assert r["compactd_s"] > 0 and r["compactd_rss_mb"] > 0, r
        assert r["langchain_approx_s"] > 0 and r["langchain_exact_s"] > 0, r
        assert r["messages"] > 20, r
    assert result["exponent"] is not None and len(result["steps"]) == 1
    assert "| thread | messages | compactd" in done.stdout, done.stdout
