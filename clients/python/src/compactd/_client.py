"""Sync and async clients for compactd's gRPC API.

Both build the same requests (`_Calls`) and keep the same per-thread state:
the plan version the caller holds, so an unchanged plan is not sent again
(`known_plan_version`), and the last conversation rendered, which the
`search_context` tool is answered from.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from compactd._errors import CompactdError, from_rpc_error
from compactd._fallback import (
    FALL_OPEN_CODES,
    check_on_unavailable,
    count_fail_open,
    fail_open_counts,
    render_locally,
)
from compactd._shapes import FORMATS, Conversation, body_of, detect_format, plain
from compactd.v1 import compactd_pb2 as pb
from compactd.v1 import compactd_pb2_grpc as pb_grpc

_log = logging.getLogger("compactd")

DEFAULT_TARGET = "127.0.0.1:50051"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SEARCH_CONTEXT_TOOL = "search_context"
READ_ARTIFACT_TOOL = "read_artifact"

_PB_FORMAT = {
    "openai": pb.OUTPUT_FORMAT_OPENAI_CHAT,
    "responses": pb.OUTPUT_FORMAT_OPENAI_RESPONSES,
    "anthropic": pb.OUTPUT_FORMAT_ANTHROPIC_MESSAGES,
    "neutral": pb.OUTPUT_FORMAT_NEUTRAL,
}

_PB_OUTCOME = {
    "succeeded": pb.TASK_OUTCOME_SUCCEEDED,
    "failed": pb.TASK_OUTCOME_FAILED,
}


@dataclass(frozen=True)
class TLS:
    """Transport security: the CA that signs the server's certificate, and
    for mTLS the client's certificate and key (PEM bytes)."""

    root_certificates: Optional[bytes] = None
    certificate_chain: Optional[bytes] = None
    private_key: Optional[bytes] = None


@dataclass
class Rendered:
    """A rendered request, ready for the provider's SDK.

    `body` is the request body: `client.chat.completions.create(**body)`
    (format "openai"), `client.responses.create(**body)` ("responses") or
    `client.messages.create(**body)` ("anthropic"). For "neutral" it is
    `{"messages": [...], "system": ...}` in compactd's own form.

    `fell_back` is None, or the status code's name (`"UNAVAILABLE"`) when
    compactd could not answer and the body was built by the client
    (`on_unavailable="original"`): the original conversation, or its newest
    part that fits the budget by the client's local count (`counting ==
    "local"`); `response` and `plan` are None then.
    """

    body: Dict[str, Any]
    format: str
    thread_id: str
    tokens: int
    tokens_before: int
    plan_version: int
    compacted: bool
    unchanged_prefix_tokens: Optional[int]
    warnings: List[str]
    plan: Optional[Any]
    response: Any = field(repr=False)
    # Tokens the provider is expected to read from its prompt cache (None on
    # a thread's first call).
    expected_cache_read_tokens: Optional[int] = None
    # Names this body in the provider's report on it (`usage=` next call).
    body_digest: str = ""
    # What `tokens` is based on: "exact" (the model's tokenizer), "estimate"
    # (compactd's conservative one), "calibrated" (the estimate under the
    # bound learned from the provider's usage reports) or "local" (the
    # client's own count, on a call that fell open); `count_scale` is that
    # bound, counted tokens per estimated token.
    counting: str = ""
    count_scale: float = 1.0
    # Bytes of the request that went on the wire: after the first call of a
    # thread, what was appended, not the whole conversation.
    request_bytes: int = 0
    fell_back: Optional[str] = None

    @property
    def messages(self) -> List[Any]:
        """The conversation part of the body (`messages`, or Responses `input`)."""
        return self.body.get("input", self.body.get("messages", []))


@dataclass(frozen=True)
class Passage:
    """One passage `search_context` found in what was compacted out."""

    text: str
    message_id: str
    artifact_id: str
    line: int
    score: float


@dataclass
class _Thread:
    """What the client keeps of a thread between calls (only what a call
    that succeeded sent)."""

    plan: Optional[Any] = None
    conversation_json: Optional[str] = None
    # The append session: its version, the items it holds (as JSON text),
    # their shape, and everything else the body carried (system, tools).
    session_version: Optional[int] = None
    sent: List[str] = field(default_factory=list)
    shape: str = "openai"
    rest_json: str = ""
    # The digest of the body the last call returned, which the provider's
    # report on it names, and the last report sent (a report seen again,
    # the same reply read from the conversation twice, is not sent again).
    body_digest: str = ""
    reported: Optional[Tuple[int, int, int]] = None


@dataclass
class _Pending:
    """One call's request and what to keep of it once it succeeds."""

    request: Any
    format: str
    thread_id: str
    conversation_json: str
    sent: List[str]
    shape: str
    rest_json: str
    report: Optional[Tuple[int, int, int]] = None
    # What a call that falls open renders from without the server.
    local: Optional[Dict[str, Any]] = None


# Counting.Basis values, by name.
_COUNTING = {1: "exact", 2: "estimate", 3: "calibrated"}


def _provider_usage(usage: Any, digest: str) -> Any:
    """A provider response's `usage` (an SDK object or its dict: Anthropic,
    OpenAI Chat or Responses, LangChain's usage_metadata) as the report on
    the body `digest` names."""
    u = plain(usage)
    if not isinstance(u, Mapping):
        raise ValueError("usage: not a provider response's usage (no input or prompt tokens)")
    read, write = u.get("cache_read_input_tokens"), u.get("cache_creation_input_tokens")
    if "input_token_details" in u:
        # LangChain's usage_metadata: input_tokens counts the cache's too.
        total = u.get("input_tokens") or 0
        details = u["input_token_details"]
        read, write = details.get("cache_read") or 0, details.get("cache_creation") or 0
    elif read is not None or write is not None:
        # Anthropic: input_tokens counts only what follows the last breakpoint.
        read, write = read or 0, write or 0
        total = (u.get("input_tokens") or 0) + read + write
    elif "prompt_tokens" in u:
        # OpenAI: the cache's reads and writes are within the prompt's count.
        total = u["prompt_tokens"]
        details = u.get("prompt_tokens_details") or {}
        read, write = details.get("cached_tokens") or 0, details.get("cache_write_tokens") or 0
    elif "input_tokens" in u:
        total = u["input_tokens"]
        details = u.get("input_tokens_details") or {}
        read, write = details.get("cached_tokens") or 0, details.get("cache_write_tokens") or 0
    else:
        raise ValueError("usage: not a provider response's usage (no input or prompt tokens)")
    return pb.ProviderUsage(
        body_digest=digest, input_tokens=int(total), cache_read_tokens=int(read), cache_write_tokens=int(write)
    )


_STALE = "SESSION_STALE"
# Threads whose state a client keeps (the least recently used is dropped:
# its next call sends the conversation whole).
MAX_THREADS = 1024


def _appendable(held: List[str], shape: str) -> bool:
    """Whether items appended after `held` read as they would in the whole:
    a Responses model response (reasoning, text, calls) joins one assistant
    message, so the held items must not end inside one."""
    if shape != "responses" or not held:
        return True
    last = json.loads(held[-1])
    return last.get("type") == "function_call_output" or last.get("role") in ("user", "system", "developer")


def _task_outcome(value: Optional[str]) -> int:
    if value is None:
        return pb.TASK_OUTCOME_UNSPECIFIED
    if not isinstance(value, str) or value not in _PB_OUTCOME:
        raise ValueError(f"task_outcome must be one of {', '.join(map(repr, _PB_OUTCOME))} or None, not {value!r}")
    return _PB_OUTCOME[value]


def _injections(value: Union[Sequence[Tuple[str, str]], Mapping[str, str], None]) -> List[Any]:
    """`(hook, text)` pairs (or a hook → text mapping) as Injection messages, in order."""
    if value is None:
        return []
    pairs = value.items() if isinstance(value, Mapping) else value
    if isinstance(pairs, (str, bytes)):
        raise ValueError("injections must be (hook, text) pairs or a mapping of hook to text, not a string")
    out = []
    for i, pair in enumerate(pairs):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"injections[{i}] must be a (hook, text) pair, not {pair!r}")
        hook, text = pair
        if not isinstance(hook, str) or not isinstance(text, str):
            raise ValueError(f"injections[{i}]: hook and text must be strings")
        out.append(pb.Injection(hook=hook, text=text))
    return out


def _context_files(name: str, files: Optional[Mapping[str, str]]) -> List[Any]:
    """A name → text mapping as ContextFile messages, in order."""
    if files is None:
        return []
    if not isinstance(files, Mapping):
        raise ValueError(f"{name} must be a mapping of file name to text")
    out = []
    for file_name, text in files.items():
        if not isinstance(file_name, str) or not isinstance(text, str):
            raise ValueError(f"{name}[{file_name!r}]: name and text must be strings")
        out.append(pb.ContextFile(name=file_name, text=text))
    return out


class _Calls:
    """What both clients share: requests, per-thread state, responses."""

    def __init__(self, api_key: Optional[str], token: Optional[str], on_unavailable: str = "raise") -> None:
        if api_key and token:
            raise ValueError("give api_key or token, not both")
        self._on_unavailable = check_on_unavailable(on_unavailable)
        # Calls of this client that fell open (fail_open_counts() is the process's, by code).
        self.fail_open_count = 0
        self._metadata: Tuple[Tuple[str, str], ...] = ()
        if api_key:
            self._metadata = (("x-api-key", api_key),)
        elif token:
            self._metadata = (("authorization", f"Bearer {token}"),)
        self._threads: "OrderedDict[str, _Thread]" = OrderedDict()
        self._lock = threading.Lock()

    def _thread(self, thread_id: str) -> _Thread:
        with self._lock:
            state = self._threads.pop(thread_id, None) or _Thread()
            self._threads[thread_id] = state
            while len(self._threads) > MAX_THREADS:
                self._threads.popitem(last=False)
            return state

    def _forget(self, thread_id: str) -> None:
        with self._lock:
            self._threads.pop(thread_id, None)

    def _render_request(
        self,
        conversation: Conversation,
        *,
        thread_id: str,
        model: str,
        budget: int,
        format: Optional[str],
        system: Optional[str],
        tools: Optional[Sequence[Any]],
        shape: Optional[str] = None,
        max_output_tokens: Optional[int],
        search_context_tool: bool,
        read_artifact_tool: bool,
        policy: Optional[Mapping[str, Any]],
        omit_pending_calls: bool = False,
        task_outcome: Optional[str] = None,
        injections: Union[Sequence[Tuple[str, str]], Mapping[str, str], None] = None,
        bootstrap: Optional[Mapping[str, str]] = None,
        workspace: Optional[Mapping[str, str]] = None,
        cache_breakpoints: Optional[bool] = None,
        prompt_cache_key: Optional[str] = None,
        safety_identifier: Optional[str] = None,
        usage: Any = None,
    ) -> _Pending:
        if not thread_id:
            raise ValueError("thread_id is required: plans and artifacts are kept per thread")
        fmt = format or detect_format(plain(conversation), model)
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        # Per-request fields, not part of the thread: sent on every call,
        # appends and the whole-conversation retry (_full_again) included.
        outcome = _task_outcome(task_outcome)
        hooks = _injections(injections)
        context = pb.AssemblyContext(
            bootstrap=_context_files("bootstrap", bootstrap),
            workspace=_context_files("workspace", workspace),
        )
        body = body_of(conversation, system=system, tools=tools)
        conversation_json = json.dumps(body, ensure_ascii=False)
        state = self._thread(thread_id)
        # The shape the conversation is in (the output format may differ):
        # as the caller says (an SDK adapter knows it), else as it shows;
        # text-only messages are Chat's.
        if shape is not None and shape not in FORMATS:
            raise ValueError(f"shape must be one of {', '.join(FORMATS)}, not {shape!r}")
        shape = shape or detect_format(body)
        key = "input" if "input" in body else "messages"
        items = body.get(key)
        items = items if isinstance(items, list) else [items]
        sent = [json.dumps(i, ensure_ascii=False, sort_keys=True) for i in items]
        rest = {k: v for k, v in body.items() if k != key}
        rest_json = json.dumps(rest, ensure_ascii=False, sort_keys=True)
        req = pb.RenderRequest(
            compact_first=True,
            format=_PB_FORMAT[fmt],
            model=model,
            max_input_tokens=budget,
            search_context_tool=search_context_tool,
            read_artifact_tool=read_artifact_tool,
            omit_pending_calls=omit_pending_calls,
            task_outcome=outcome,
            injections=hooks,
        )
        if context.bootstrap or context.workspace:
            req.context.CopyFrom(context)
        held = state.sent
        if (
            state.session_version is not None
            and shape == state.shape
            and rest_json == state.rest_json
            and len(sent) >= len(held)
            and sent[: len(held)] == held
            and _appendable(held, shape)
        ):
            # Only what was appended since the last call goes on the wire.
            req.append.CopyFrom(
                pb.ThreadAppend(
                    thread_id=thread_id,
                    base_version=state.session_version,
                    messages_json="[" + ",".join(sent[len(held) :]) + "]",
                    messages_format=_PB_FORMAT[shape],
                )
            )
            system_text, tool_schemas = _system_and_tools(rest, shape)
            if system_text is not None:
                req.system_prompt = system_text
            req.tools.extend(tool_schemas)
        else:
            req.input.CopyFrom(pb.ProviderInput(thread_id=thread_id, json=conversation_json, format=_PB_FORMAT[shape]))
            req.start_session = True
        if max_output_tokens is not None:
            req.max_output_tokens = max_output_tokens
        if cache_breakpoints is not None:
            req.cache_breakpoints = cache_breakpoints
        # OpenAI's cache routing key and end-user id: as given, else as the
        # conversation's body carries them.
        for name, value in (("prompt_cache_key", prompt_cache_key), ("safety_identifier", safety_identifier)):
            value = value if value is not None else rest.get(name)
            if isinstance(value, str):
                setattr(req, name, value)
        report = None
        if usage is not None and state.body_digest:
            u = _provider_usage(usage, state.body_digest)
            report = (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens)
            if report != state.reported:
                req.usage.append(u)
        if policy:
            req.policy.CopyFrom(pb.PolicyOverrides(**policy))
        if state.plan is not None:
            req.known_plan_version = state.plan.version
        local = dict(
            body=body,
            shape=shape,
            format=fmt,
            model=model,
            budget=budget,
            max_output_tokens=max_output_tokens,
            prompt_cache_key=prompt_cache_key,
            safety_identifier=safety_identifier,
        )
        return _Pending(req, fmt, thread_id, conversation_json, sent, shape, rest_json, report, local)

    def _mode(self, on_unavailable: Optional[str]) -> str:
        return self._on_unavailable if on_unavailable is None else check_on_unavailable(on_unavailable)

    def _fallen_open(self, p: _Pending, error: CompactdError, mode: str) -> Optional[Rendered]:
        """The body built without the server, when `error` falls open under
        `mode`; None when it must be raised. The thread's state keeps what
        the last call that succeeded sent, except the digest the provider's
        next usage report would be named by (that report is on this body)."""
        if mode != "original" or error.code not in FALL_OPEN_CODES or p.local is None:
            return None
        local = render_locally(**p.local)
        if local is None:
            return None
        code = error.code.name
        state = self._thread(p.thread_id)
        state.body_digest = ""
        with self._lock:
            self.fail_open_count += 1
        count_fail_open(code)
        s = local.selection
        if s.start == s.head:
            what = f"the original conversation ({local.total} message{'' if local.total == 1 else 's'})"
        else:
            what = f"its newest {local.sent} of {local.total} messages"
        note = f"compactd {code}: sent {what}, {s.tokens} tokens by the local count"
        if p.local["budget"] > 0:
            note += f" (budget {p.local['budget']})"
        if not s.fits and s.start > s.head:
            note += "; over the budget: the newest user turn alone does not fit"
        elif not s.fits:
            note += "; over the budget: no user message to start a smaller part at"
        _log.warning("thread %r: %s", p.thread_id, note)
        return Rendered(
            body=local.body,
            format=p.format,
            thread_id=p.thread_id,
            tokens=s.tokens,
            tokens_before=s.tokens_whole,
            plan_version=0,
            compacted=False,
            unchanged_prefix_tokens=None,
            warnings=[note],
            plan=None,
            response=None,
            counting="local",
            fell_back=code,
        )

    def _full_again(self, p: _Pending) -> _Pending:
        """The call with the whole conversation, for a session the server no
        longer has at the client's version (another client, a restart past
        its idle time, DeleteThread). What the client held of the thread is
        dropped: after a delete, plan versions start over. The per-call
        fields (task_outcome, injections, context, policy, ...) are kept."""
        self._forget(p.thread_id)
        full = pb.RenderRequest()
        full.CopyFrom(p.request)
        full.ClearField("append")
        full.ClearField("system_prompt")
        full.ClearField("known_plan_version")
        del full.tools[:]
        full.input.CopyFrom(
            pb.ProviderInput(thread_id=p.thread_id, json=p.conversation_json, format=_PB_FORMAT[p.shape])
        )
        full.start_session = True
        p.request = full
        return p

    def _rendered(self, resp: Any, p: _Pending) -> Rendered:
        fmt, thread_id = p.format, p.thread_id
        state = self._thread(thread_id)
        state.conversation_json = p.conversation_json
        state.body_digest = resp.body_digest
        if p.report is not None:
            state.reported = p.report
        if resp.HasField("session"):
            state.session_version = resp.session.version
            state.sent, state.shape, state.rest_json = p.sent, p.shape, p.rest_json
        c = resp.compaction
        if c.plan_omitted:
            plan = state.plan
        else:
            plan = c.plan if c.HasField("plan") else None
            state.plan = plan
        if fmt == "neutral":
            body: Dict[str, Any] = {"messages": [_neutral_message(m) for m in resp.messages]}
            if resp.HasField("system_prompt"):
                body["system"] = resp.system_prompt
        else:
            body = json.loads(resp.provider_payload_json)
        return Rendered(
            body=body,
            format=fmt,
            thread_id=thread_id,
            tokens=resp.tokens.total,
            tokens_before=c.tokens_before,
            plan_version=resp.plan_version,
            compacted=not c.reused,
            unchanged_prefix_tokens=(
                resp.unchanged_prefix_tokens if resp.HasField("unchanged_prefix_tokens") else None
            ),
            expected_cache_read_tokens=(
                resp.expected_cache_read_tokens if resp.HasField("expected_cache_read_tokens") else None
            ),
            body_digest=resp.body_digest,
            counting=_COUNTING.get(resp.counting.basis, ""),
            count_scale=resp.counting.scale or 1.0,
            warnings=list(c.warnings) + list(resp.audit.warnings),
            plan=plan,
            response=resp,
        )

    def _search_request(self, thread_id: str, query: str, max_results: int, whole: bool = False) -> Any:
        state = self._thread(thread_id)
        if state.conversation_json is None:
            raise ValueError(f"thread {thread_id!r}: render it first (search_context searches what its plan compacted out)")
        if state.session_version is not None and not whole:
            # The thread the server holds: nothing is sent again.
            return pb.SearchContextRequest(
                append=pb.ThreadAppend(thread_id=thread_id, base_version=state.session_version),
                query=query,
                max_results=max_results,
            )
        return pb.SearchContextRequest(
            input=pb.ProviderInput(thread_id=thread_id, json=state.conversation_json, format=_PB_FORMAT[state.shape]),
            query=query,
            max_results=max_results,
        )

    @staticmethod
    def _tool_arguments(arguments: Any) -> Dict[str, Any]:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                raise ValueError(f"tool arguments are not JSON: {e}") from e
        if not isinstance(arguments, Mapping):
            raise ValueError("tool arguments must be a JSON object")
        return dict(arguments)


def _system_and_tools(rest: Mapping[str, Any], shape: str) -> Tuple[Optional[str], List[Any]]:
    """The system prompt and tools of a body as the server reads them from
    ProviderInput (an append carries them in the request's own fields):
    Responses' `instructions` and function tools; `system` (a string, or
    text blocks) and every named tool otherwise."""
    responses = shape == "responses"
    system = rest.get("instructions") if responses else rest.get("system")
    if isinstance(system, list):
        system = "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))
    tools = []
    for t in rest.get("tools") or []:
        if not isinstance(t, Mapping):
            continue
        if responses and t.get("type", "function") != "function":
            continue  # a Responses built-in tool
        f = t.get("function", t)
        if not f.get("name"):
            continue
        params = f.get("parameters", f.get("input_schema"))
        tools.append(
            pb.ToolSchema(
                name=str(f["name"]),
                description=str(f.get("description", "")),
                parameters_json="" if params is None else json.dumps(params),
            )
        )
    return (None if system is None else str(system)), tools


def _neutral_message(m: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {"role": pb.Role.Name(m.role).removeprefix("ROLE_").lower(), "content": m.text}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in m.tool_calls
        ]
    if m.HasField("tool_call_id"):
        out["tool_call_id"] = m.tool_call_id
    if m.source_id:
        out["source_id"] = m.source_id
    return out


def _passages(resp: Any) -> List[Passage]:
    return [
        Passage(text=p.text, message_id=p.message_id, artifact_id=p.artifact_id, line=p.line, score=p.score)
        for p in resp.passages
    ]


def _search_text(passages: List[Passage]) -> str:
    if not passages:
        return "No earlier passage matches."
    return "\n\n".join(
        f"[{p.message_id} line {p.line}; artifact {p.artifact_id or 'none'}]\n{p.text}" for p in passages
    )


def _options(max_message_bytes: int) -> List[Tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def _credentials(tls: TLS) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=tls.root_certificates,
        private_key=tls.private_key,
        certificate_chain=tls.certificate_chain,
    )


class Client(_Calls):
    """A blocking client.

    >>> client = Client("127.0.0.1:50051")            # `compactd serve --dev`
    >>> r = client.render(messages, thread_id="t1", model="gpt-4o", budget=32_000)
    >>> openai.OpenAI().chat.completions.create(**r.body)

    `on_unavailable="raise"` (the default) raises CompactdError when
    compactd cannot answer; "original" sends the conversation as it is (or
    its newest part within the budget) instead ([`Client.render`]).
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        api_key: Optional[str] = None,
        token: Optional[str] = None,
        tls: Optional[TLS] = None,
        timeout: Optional[float] = 60.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        on_unavailable: str = "raise",
    ) -> None:
        super().__init__(api_key, token, on_unavailable)
        options = _options(max_message_bytes)
        self._channel = (
            grpc.secure_channel(target, _credentials(tls), options=options)
            if tls is not None
            else grpc.insecure_channel(target, options=options)
        )
        self._stub = pb_grpc.CompactionServiceStub(self._channel)
        self._timeout = timeout
        self._locks: Dict[str, threading.Lock] = {}

    def _thread_lock(self, thread_id: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(thread_id, threading.Lock())

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def render(
        self,
        conversation: Conversation,
        *,
        thread_id: str,
        model: str = "",
        budget: int = 0,
        format: Optional[str] = None,
        shape: Optional[str] = None,
        system: Optional[str] = None,
        tools: Optional[Sequence[Any]] = None,
        max_output_tokens: Optional[int] = None,
        search_context_tool: bool = False,
        read_artifact_tool: bool = False,
        policy: Optional[Mapping[str, Any]] = None,
        omit_pending_calls: bool = False,
        task_outcome: Optional[str] = None,
        injections: Union[Sequence[Tuple[str, str]], Mapping[str, str], None] = None,
        bootstrap: Optional[Mapping[str, str]] = None,
        workspace: Optional[Mapping[str, str]] = None,
        cache_breakpoints: Optional[bool] = None,
        prompt_cache_key: Optional[str] = None,
        safety_identifier: Optional[str] = None,
        usage: Any = None,
        on_unavailable: Optional[str] = None,
    ) -> Rendered:
        """Compacts the conversation if it needs it and renders it within
        `budget` tokens (0: the server's default) for `model`, in `format`
        (default: the shape the conversation is in; a Claude model's plain
        text is rendered for Anthropic). `shape` is the format the
        conversation is in, when the caller knows it (an SDK adapter
        converting to one); detected otherwise.

        Per-call content around the thread (sent on every call, never kept
        as part of the thread; docs/api.md, "Context assembly"):

        - `injections`: `(hook, text)` pairs, or a hook → text mapping, in
          order: per-turn content of the caller's hooks (memory, retrieved
          documents, the date), placed just before the latest user message.
          Together they must fit `policy["injection_reserve_tokens"]`
          (0 unless the server or `policy` sets it); the first that does
          not raises CompactdError with `field == "injections[i]"`.
        - `bootstrap`: file name → text, stable instructions (AGENTS.md, a
          persona) appended to the system prompt as
          `<bootstrap name="...">` blocks. Change them rarely: they are part
          of the cached prefix.
        - `workspace`: file name → text, working files (the open file, a
          task list) sent as one user message of `<workspace_file
          name="...">` blocks right after the compacted history.
          Compaction leaves room for both, and never compacts them.
        - `task_outcome`: "succeeded" or "failed", how the agent's task
          ended since the last call (a quality signal the server counts);
          anything else raises ValueError.

        The provider's prompt cache (docs/api.md, "Prompt caching"): Anthropic
        bodies get cache breakpoints unless `cache_breakpoints=False`;
        `prompt_cache_key` and `safety_identifier` go into OpenAI bodies (by
        default as the conversation's body carries them).
        `Rendered.expected_cache_read_tokens` is what the provider should
        read from its cache. `usage` is the provider response's `usage` for
        the body the previous call returned (the SDK's object or its dict):
        the server sets it beside what it expected.

        When compactd cannot answer (UNAVAILABLE, DEADLINE_EXCEEDED,
        RESOURCE_EXHAUSTED) the call raises CompactdError, unless
        `on_unavailable` (this call's, else the client's) is "original":
        then it returns a body built here, `Rendered.fell_back` naming the
        code: the original conversation in its own shape if it fits
        `budget` by a local count, else its newest part that does (from a
        user message, the system prompt and every call with its result
        kept); logged as a warning and counted (`fail_open_count`,
        `compactd.fail_open_counts()`). Every other error raises, and so do
        these when the conversation's shape cannot be sent as `format`
        without the server (docs/python.md, "When compactd is unavailable").
        """
        # One call per thread at a time: each builds on what the last sent.
        mode = self._mode(on_unavailable)
        with self._thread_lock(thread_id):
            p = self._render_request(
                conversation,
                thread_id=thread_id,
                model=model,
                budget=budget,
                format=format,
                shape=shape,
                system=system,
                tools=tools,
                max_output_tokens=max_output_tokens,
                search_context_tool=search_context_tool,
                read_artifact_tool=read_artifact_tool,
                policy=policy,
                omit_pending_calls=omit_pending_calls,
                task_outcome=task_outcome,
                injections=injections,
                bootstrap=bootstrap,
                workspace=workspace,
                cache_breakpoints=cache_breakpoints,
                prompt_cache_key=prompt_cache_key,
                safety_identifier=safety_identifier,
                usage=usage,
            )
            try:
                try:
                    resp = self._call(self._stub.Render, p.request)
                except CompactdError as e:
                    if e.reason != _STALE:
                        raise
                    p = self._full_again(p)
                    resp = self._call(self._stub.Render, p.request)
            except CompactdError as e:
                fallen = self._fallen_open(p, e, mode)
                if fallen is None:
                    raise
                return fallen
            out = self._rendered(resp, p)
            out.request_bytes = p.request.ByteSize()
            return out

    def search_context(self, thread_id: str, query: str, max_results: int = 0) -> List[Passage]:
        """What the thread's plan compacted out that matches `query`."""
        try:
            resp = self._call(self._stub.SearchContext, self._search_request(thread_id, query, max_results))
        except CompactdError as e:
            if e.reason != _STALE:
                raise
            resp = self._call(self._stub.SearchContext, self._search_request(thread_id, query, max_results, whole=True))
        return _passages(resp)

    def rehydrate(self, thread_id: str, artifact_id: str, max_tokens: int = 0) -> str:
        """An externalized artifact's content (cut at `max_tokens`)."""
        req = pb.RehydrateRequest(thread_id=thread_id, artifact_id=artifact_id, max_tokens=max_tokens)
        return self._call(self._stub.Rehydrate, req).content

    def delete_thread(self, thread_id: str) -> None:
        """Erases the thread's plan, artifacts and summaries on the server."""
        self._call(self._stub.DeleteThread, pb.DeleteThreadRequest(thread_id=thread_id))
        self._forget(thread_id)

    def answer_tool_call(self, thread_id: str, name: str, arguments: Any) -> Optional[str]:
        """The result text of a call to compactd's own tools
        (`search_context`, `read_artifact`); None for any other tool."""
        if name == SEARCH_CONTEXT_TOOL:
            args = self._tool_arguments(arguments)
            return _search_text(self.search_context(thread_id, str(args.get("query", "")), int(args.get("max_results", 0))))
        if name == READ_ARTIFACT_TOOL:
            args = self._tool_arguments(arguments)
            return self.rehydrate(thread_id, str(args.get("artifact_id", "")), int(args.get("max_tokens", 0)))
        return None


class AsyncClient(_Calls):
    """The same calls as [`Client`], on `grpc.aio` (await each)."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        api_key: Optional[str] = None,
        token: Optional[str] = None,
        tls: Optional[TLS] = None,
        timeout: Optional[float] = 60.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        on_unavailable: str = "raise",
    ) -> None:
        super().__init__(api_key, token, on_unavailable)
        options = _options(max_message_bytes)
        self._channel = (
            grpc.aio.secure_channel(target, _credentials(tls), options=options)
            if tls is not None
            else grpc.aio.insecure_channel(target, options=options)
        )
        self._stub = pb_grpc.CompactionServiceStub(self._channel)
        self._timeout = timeout
        self._locks: Dict[str, asyncio.Lock] = {}

    def _thread_lock(self, thread_id: str) -> asyncio.Lock:
        with self._lock:
            return self._locks.setdefault(thread_id, asyncio.Lock())

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def render(
        self,
        conversation: Conversation,
        *,
        thread_id: str,
        model: str = "",
        budget: int = 0,
        format: Optional[str] = None,
        shape: Optional[str] = None,
        system: Optional[str] = None,
        tools: Optional[Sequence[Any]] = None,
        max_output_tokens: Optional[int] = None,
        search_context_tool: bool = False,
        read_artifact_tool: bool = False,
        policy: Optional[Mapping[str, Any]] = None,
        omit_pending_calls: bool = False,
        task_outcome: Optional[str] = None,
        injections: Union[Sequence[Tuple[str, str]], Mapping[str, str], None] = None,
        bootstrap: Optional[Mapping[str, str]] = None,
        workspace: Optional[Mapping[str, str]] = None,
        cache_breakpoints: Optional[bool] = None,
        prompt_cache_key: Optional[str] = None,
        safety_identifier: Optional[str] = None,
        usage: Any = None,
        on_unavailable: Optional[str] = None,
    ) -> Rendered:
        """See [`Client.render`]."""
        mode = self._mode(on_unavailable)
        async with self._thread_lock(thread_id):
            p = self._render_request(
                conversation,
                thread_id=thread_id,
                model=model,
                budget=budget,
                format=format,
                shape=shape,
                system=system,
                tools=tools,
                max_output_tokens=max_output_tokens,
                search_context_tool=search_context_tool,
                read_artifact_tool=read_artifact_tool,
                policy=policy,
                omit_pending_calls=omit_pending_calls,
                task_outcome=task_outcome,
                injections=injections,
                bootstrap=bootstrap,
                workspace=workspace,
                cache_breakpoints=cache_breakpoints,
                prompt_cache_key=prompt_cache_key,
                safety_identifier=safety_identifier,
                usage=usage,
            )
            try:
                try:
                    resp = await self._call(self._stub.Render, p.request)
                except CompactdError as e:
                    if e.reason != _STALE:
                        raise
                    p = self._full_again(p)
                    resp = await self._call(self._stub.Render, p.request)
            except CompactdError as e:
                fallen = self._fallen_open(p, e, mode)
                if fallen is None:
                    raise
                return fallen
            out = self._rendered(resp, p)
            out.request_bytes = p.request.ByteSize()
            return out

    async def search_context(self, thread_id: str, query: str, max_results: int = 0) -> List[Passage]:
        try:
            resp = await self._call(self._stub.SearchContext, self._search_request(thread_id, query, max_results))
        except CompactdError as e:
            if e.reason != _STALE:
                raise
            req = self._search_request(thread_id, query, max_results, whole=True)
            resp = await self._call(self._stub.SearchContext, req)
        return _passages(resp)

    async def rehydrate(self, thread_id: str, artifact_id: str, max_tokens: int = 0) -> str:
        req = pb.RehydrateRequest(thread_id=thread_id, artifact_id=artifact_id, max_tokens=max_tokens)
        return (await self._call(self._stub.Rehydrate, req)).content

    async def delete_thread(self, thread_id: str) -> None:
        await self._call(self._stub.DeleteThread, pb.DeleteThreadRequest(thread_id=thread_id))
        self._forget(thread_id)

    async def answer_tool_call(self, thread_id: str, name: str, arguments: Any) -> Optional[str]:
        if name == SEARCH_CONTEXT_TOOL:
            args = self._tool_arguments(arguments)
            found = await self.search_context(thread_id, str(args.get("query", "")), int(args.get("max_results", 0)))
            return _search_text(found)
        if name == READ_ARTIFACT_TOOL:
            args = self._tool_arguments(arguments)
            return await self.rehydrate(thread_id, str(args.get("artifact_id", "")), int(args.get("max_tokens", 0)))
        return None


__all__ = ["Client", "AsyncClient", "Rendered", "Passage", "TLS", "CompactdError", "fail_open_counts"]
