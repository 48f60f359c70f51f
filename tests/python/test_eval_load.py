"""The load harness (eval/load.py) runs end to end against the binary under
test, small: one race round on two replicas and moto, four Renders at two
`in_flight_bytes`, one 2,000-message request. The tables in
docs/performance.md come from the full runs; this proves the harness (and
that a race round gives one OK), not the numbers.
"""

import re
import subprocess
import sys

from conftest import REPO, _binary


def run(*args):
    binary = _binary()  # fails (not skips) with a clear message when the binary is missing
    cmd = [sys.executable, str(REPO / "eval" / "load.py"), *args, "--bin", str(binary)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def test_race_round_gives_one_commit():
    out = run("race", "--rounds", "1")
    rounds = [line for line in out.splitlines() if line.strip().startswith("round ")]
    assert len(rounds) == 1, out
    answers = [(code, int(n)) for code, n in re.findall(r"'replica \d: (\w+)': (\d+)", rounds[0])]
    assert {code for code, _ in answers} <= {"OK", "ABORTED"}, out
    assert sum(n for code, n in answers if code == "OK") == 1, out
    assert sum(n for _, n in answers) == 32, out


def test_memory_and_cpu_report():
    log = str(REPO / "tests" / "data" / "claude_code_rust_port.json")
    out = run("memory", "--calls", "4", "--in-flight", "0,65536", "--logs", log)
    assert len(re.findall(r"in_flight_bytes \d+: idle \d+ MB; peak \d+ MB", out)) == 2, out
    out = run("cpu", "--messages", "2000", "--repeat", "1")
    assert len(re.findall(r"CPU [\d.]+ s; wall [\d.]+ s", out)) == 4, out
