"""Stand-ins for the Anthropic Messages and OpenAI Chat Completions APIs with
their prompt caches, over real HTTP on loopback, so that the official SDKs
send their real requests to them.

Each counts input with its own tokenizer, `count` below: not o200k, not
compactd's estimate, and fixed so that results can be reproduced. Text is cut
into word runs, punctuation runs, newlines and other whitespace; a word run
costs one token per four UTF-8 bytes (at least one), a punctuation run one per
two characters, a newline one, other whitespace nothing. On English prose and
logs that is about o200k's count; on CJK text it is less.

The caches follow the providers' published rules:

- Anthropic: the prompt is tools, then system blocks, then each message's
  content blocks. A request reads the longest prefix written before that ends
  at one of its blocks marked `cache_control`, or at most 20 blocks before
  one; it writes the prefix up to each marked block that reaches the minimum
  (1,024 tokens). The marker is not part of the cached content. More than
  four marks is a 400, as is a `tool_result` whose `tool_use` is not in the
  message before, and a prompt over the model's 200,000-token window.
- OpenAI: the longest prefix, token by token, of any earlier request is read,
  from 1,024 tokens on in steps of 128.

Cache lifetimes are not modelled: the session's calls follow each other within
five minutes. The reply is scripted: a tool call after a user's request, a
short answer after a tool's result.
"""

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WINDOW = 200_000
MINIMUM = 1024
LOOKBACK = 20
OPENAI_STEP = 128

_PIECE = re.compile(r"\w+|[^\w\s]+|\n|[^\S\n]+")


def pieces(text):
    """The stand-in tokenizer's tokens of `text` (see the module docs)."""
    out = []
    for m in _PIECE.finditer(text):
        p = m.group(0)
        if p == "\n":
            out.append(p)
        elif p.isspace():
            continue
        elif p[0].isalnum() or p[0] == "_":
            raw = p.encode("utf-8")
            out.extend(raw[i : i + 4].decode("utf-8", "replace") for i in range(0, len(raw), 4))
        else:
            out.extend(p[i : i + 2] for i in range(0, len(p), 2))
    return out


def count(text):
    return len(pieces(text))


def _canonical(value):
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class _Rejected(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


class AnthropicCache:
    """The Messages API's cache and counts."""

    def __init__(self):
        self.written = set()
        self.calls = 0

    @staticmethod
    def blocks(body):
        out = []

        def push(at, block):
            block = dict(block)
            marked = block.pop("cache_control", None) is not None
            out.append((at + _canonical(block), marked))

        for t in body.get("tools") or []:
            push("tool", t)
        system = body.get("system")
        if isinstance(system, str):
            push("system", {"type": "text", "text": system})
        elif isinstance(system, list):
            for b in system:
                push("system", b)
        for i, m in enumerate(body.get("messages") or []):
            content = m.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for b in content or []:
                push(f"{i}{m.get('role')}", b)
        return out

    @staticmethod
    def check_pairs(messages):
        for i, m in enumerate(messages):
            content = m.get("content") if isinstance(m.get("content"), list) else []
            results = [b.get("tool_use_id") for b in content if b.get("type") == "tool_result"]
            if not results:
                continue
            before = messages[i - 1] if i > 0 else {}
            before_content = before.get("content") if isinstance(before.get("content"), list) else []
            calls = {b.get("id") for b in before_content if b.get("type") == "tool_use"}
            for r in results:
                if r not in calls:
                    raise _Rejected(f"messages.{i}: tool_result {r} has no tool_use in the message before")

    def answer(self, body):
        self.check_pairs(body.get("messages") or [])
        blocks = self.blocks(body)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        if len(marks) > 4:
            raise _Rejected(f"A maximum of 4 blocks with cache_control may be provided. Found {len(marks)}.")
        chain, cum, h, tokens = [], [], b"", 0
        for text, _ in blocks:
            h = hashlib.sha256(h + text.encode("utf-8")).digest()
            tokens += count(text)
            chain.append(h)
            cum.append(tokens)
        if tokens > WINDOW:
            raise _Rejected(f"prompt is too long: {tokens} tokens > {WINDOW} maximum")
        read = 0
        for m in marks:
            for p in range(m, max(m - LOOKBACK, 0) - 1, -1):
                if chain[p] in self.written:
                    read = max(read, cum[p])
                    break
        written_to = None
        for m in marks:
            if cum[m] >= MINIMUM:
                self.written.add(chain[m])
                written_to = cum[m]
        creation = max(written_to - read, 0) if written_to is not None else 0
        self.calls += 1
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content")
        after_result = isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
        if after_result:
            reply = [{"type": "text", "text": "The shard is healthy; nothing to do."}]
            stop = "end_turn"
        else:
            reply = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{self.calls:06d}",
                    "name": "read_file",
                    "input": {"path": f"/var/log/shard-{self.calls}.log"},
                }
            ]
            stop = "tool_use"
        return {
            "id": f"msg_{self.calls:06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": reply,
            "stop_reason": stop,
            "usage": {
                "input_tokens": tokens - read - creation,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": creation,
                "output_tokens": 12,
            },
        }


class OpenAICache:
    """Chat Completions' automatic cache and counts."""

    def __init__(self):
        self.seen = []
        self.calls = 0

    @staticmethod
    def tokens(body):
        out = []
        for t in body.get("tools") or []:
            out.extend(pieces(_canonical(t)))
        for m in body.get("messages") or []:
            out.append(f"<|{m.get('role')}|>")
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            out.extend(pieces(content or ""))
            for c in m.get("tool_calls") or []:
                out.extend(pieces(_canonical(c)))
            if m.get("tool_call_id"):
                out.append(m["tool_call_id"])
        return out

    def answer(self, body):
        toks = self.tokens(body)
        if len(toks) > WINDOW:
            raise _Rejected(f"context_length_exceeded: {len(toks)} tokens")
        common = 0
        for earlier in self.seen:
            n = 0
            for a, b in zip(toks, earlier):
                if a != b:
                    break
                n += 1
            common = max(common, n)
        cached = 0 if common < MINIMUM else MINIMUM + (common - MINIMUM) // OPENAI_STEP * OPENAI_STEP
        self.seen = (self.seen + [toks])[-8:]
        self.calls += 1
        last = (body.get("messages") or [{}])[-1]
        if last.get("role") == "tool":
            message = {"role": "assistant", "content": "The shard is healthy; nothing to do."}
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{self.calls:06d}",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"/var/log/shard-{self.calls}.log"}),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{self.calls}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {
                "prompt_tokens": len(toks),
                "completion_tokens": 12,
                "total_tokens": len(toks) + 12,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }


class CachingProvider:
    """`with CachingProvider() as p:` serves both APIs on `p.base_url`;
    `p.bodies` holds each request body received, `p.usage` each usage sent."""

    def __init__(self):
        self.anthropic = AnthropicCache()
        self.openai = OpenAICache()
        self.bodies = []
        self.usage = []
        outer = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with lock:
                    status, reply = outer._answer(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _answer(self, path, body):
        self.bodies.append(body)
        try:
            if path.endswith("/messages"):
                reply = self.anthropic.answer(body)
            elif path.endswith("/chat/completions"):
                reply = self.openai.answer(body)
            else:
                return 404, {"error": {"type": "not_found_error", "message": path}}
        except _Rejected as e:
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": e.message}}
        self.usage.append(reply["usage"])
        return 200, reply

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
