"""`compactd inspect --html` in a real browser: Debian's `chromium`, headless.

The page is loaded from disk (`file://`), its DOM dumped after the page's
own script ran, and parsed with the stdlib's html.parser. Every span of the
plan that `compactd compact` makes of the same input at the same budget must
be an element of the rendered DOM (`data-span="first..last"`, with its
fate), every message one with `data-message-id`; hostile message text must
arrive as text, never as markup. A screenshot is taken into pytest's tmp
dir and checked to be a PNG of the window's size.

Needs `chromium` on PATH: `scripts/chromium.sh` installs Debian's package
(scripts/test.sh runs it first). Without it the test fails; it never skips.
"""

import json
import shutil
import struct
import subprocess
from html.parser import HTMLParser

import pytest

from conftest import REPO, _binary

LOG = REPO / "tests" / "data" / "tau_bench_airline.json"
BUDGET = "8000"
WINDOW = (1280, 2000)
TIMEOUT_S = 120

# What the page calls each kind of plan record (a record whose passages
# are back in the recall block is shown as recalled).
FATE_OF = {
    "clearings": "cleared",
    "summarizations": "summarized",
    "externalizations": "externalized",
    "drops": "dropped",
}


def _chromium():
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "chromium is not installed (needed to render the inspect page headless): "
            "run scripts/chromium.sh, which installs Debian's chromium package"
        )
    return path


def _run(args, **kw):
    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, **kw)
    assert done.returncode == 0, f"{args[:2]} exited {done.returncode}:\n{done.stderr}"
    return done


def _browser(tmp_path, *args):
    """Headless chromium on its own profile under tmp_path."""
    return [
        _chromium(),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *args,
    ]


def _dump_dom(tmp_path, page):
    return _run(_browser(tmp_path, "--dump-dom", page.as_uri())).stdout


def _screenshot(tmp_path, page):
    png = tmp_path / "inspect.png"
    _run(_browser(tmp_path, f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri()))
    return png


class Dom(HTMLParser):
    """What the tests read from the dumped DOM."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.spans = {}  # data-span -> data-fate
        self.span_order = []
        self.messages = []  # data-message-id, in document order
        self.tags = {}  # tag -> count
        self.body = {}
        self.message_text = {}  # message id -> text inside its element
        self._open = []  # (tag, message id or None)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "body":
            self.body = a
        if "data-span" in a:
            self.spans[a["data-span"]] = a.get("data-fate")
            self.span_order.append(a["data-span"])
        mid = a.get("data-message-id")
        if mid is not None:
            self.messages.append(mid)
            self.message_text[mid] = ""
        if tag not in ("meta", "input", "br", "img", "link"):
            self._open.append((tag, mid))

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data):
        for _, mid in reversed(self._open):
            if mid is not None:
                self.message_text[mid] += data
                break


def _parse(html):
    dom = Dom()
    dom.feed(html)
    dom.close()
    return dom


def _plan_spans(plan):
    """(first..last, fate) of every record of a plan."""
    out = []
    for key, fate in FATE_OF.items():
        for record in plan.get(key, []):
            ids = record["span"]["message_ids"]
            out.append((f"{ids[0]}..{ids[-1]}", fate))
    return out


def _inspect(tmp_path, source, *extra):
    page = tmp_path / "inspect.html"
    _run([str(_binary()), "inspect", "--input", str(source), *extra, "--html", str(page)])
    assert page.stat().st_size > 0
    return page


def test_every_plan_span_is_in_the_rendered_dom(tmp_path):
    _chromium()
    compacted = json.loads(_run([str(_binary()), "compact", "--input", str(LOG), "--max-input-tokens", BUDGET]).stdout)
    expected = _plan_spans(compacted["plan"])
    assert expected, f"nothing compacted at {BUDGET} tokens"
    page = _inspect(tmp_path, LOG, "--max-input-tokens", BUDGET)

    dom = _parse(_dump_dom(tmp_path, page))
    missing = [span for span, _ in expected if span not in dom.spans]
    assert not missing, f"plan spans missing from the rendered DOM: {missing}; present: {dom.span_order}"
    for span, fate in expected:
        assert dom.spans[span] in (fate, "recalled"), (span, fate, dom.spans[span])
    # Kept spans fill the rest: every message once, in thread order.
    n = len(json.loads(LOG.read_text()))
    assert dom.messages == [f"m{i}" for i in range(n)]
    assert set(dom.spans.values()) <= {"kept", "cleared", "summarized", "externalized", "dropped", "recalled"}
    # The page's own script ran (its CSP hash matches) and is the only one.
    assert dom.body.get("data-ready") == "true", dom.body
    assert dom.tags.get("script") == 1
    assert "link" not in dom.tags and "img" not in dom.tags

    png = _screenshot(tmp_path, page)
    data = png.read_bytes()
    assert len(data) > 1000, f"screenshot {png} is {len(data)} bytes"
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == WINDOW, (width, height)


def test_hostile_message_text_stays_text(tmp_path):
    _chromium()
    hostile = "Quote: <script>alert(1)</script> then </details></li></ol> and <img src=x onerror=alert(2)>"
    thread = tmp_path / "hostile.json"
    thread.write_text(
        json.dumps(
            [
                {"role": "user", "content": hostile},
                {"role": "assistant", "content": "Noted </details><script>alert(3)</script>"},
                {"role": "user", "content": "ok"},
            ]
        )
    )
    page = _inspect(tmp_path, thread)
    dom = _parse(_dump_dom(tmp_path, page))
    assert dom.tags.get("script") == 1, "message text became a script element"
    assert "img" not in dom.tags, "message text became an image"
    assert dom.messages == ["m0", "m1", "m2"]
    assert hostile in dom.message_text["m0"]
    assert "Noted </details><script>alert(3)</script>" in dom.message_text["m1"]
    assert dom.body.get("data-ready") == "true"
