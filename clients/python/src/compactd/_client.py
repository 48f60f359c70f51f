"""Sync and async clients for compactd's gRPC API.

Both build the same requests (`_Calls`) and keep the same per-thread state:
the plan version the caller holds, so an unchanged plan is not sent again
(`known_plan_version`), and the last conversation rendered, which the
`search_context` tool is answered from.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import grpc

from compactd._errors import CompactdError, from_rpc_error
from compactd._shapes import FORMATS, Conversation, body_of, detect_format, plain, shape_of
from compactd.v1 import compactd_pb2 as pb
from compactd.v1 import compactd_pb2_grpc as pb_grpc

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
    # Bytes of the request that went on the wire: after the first call of a
    # thread, what was appended, not the whole conversation.
    request_bytes: int = 0

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
    plan: Optional[Any] = None
    conversation_json: Optional[str] = None
    # The append session: its version, the items it holds (as JSON text),
    # their shape, and everything else the body carried (system, tools).
    session_version: Optional[int] = None
    sent: List[str] = field(default_factory=list)
    shape: Optional[str] = None
    rest_json: str = ""
    # What the call in flight sends, kept once it succeeds.
    pending: Tuple[List[str], Optional[str], str] = field(default_factory=lambda: ([], None, ""))


_STALE = "SESSION_STALE"


class _Calls:
    """What both clients share: requests, per-thread state, responses."""

    def __init__(self, api_key: Optional[str], token: Optional[str]) -> None:
        if api_key and token:
            raise ValueError("give api_key or token, not both")
        self._metadata: Tuple[Tuple[str, str], ...] = ()
        if api_key:
            self._metadata = (("x-api-key", api_key),)
        elif token:
            self._metadata = (("authorization", f"Bearer {token}"),)
        self._threads: Dict[str, _Thread] = {}
        self._lock = threading.Lock()

    def _thread(self, thread_id: str) -> _Thread:
        with self._lock:
            return self._threads.setdefault(thread_id, _Thread())

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
        max_output_tokens: Optional[int],
        search_context_tool: bool,
        read_artifact_tool: bool,
        policy: Optional[Mapping[str, Any]],
        omit_pending_calls: bool = False,
    ) -> Tuple[Any, str]:
        if not thread_id:
            raise ValueError("thread_id is required: plans and artifacts are kept per thread")
        fmt = format or detect_format(plain(conversation), model)
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        body = body_of(conversation, system=system, tools=tools)
        conversation_json = json.dumps(body, ensure_ascii=False)
        state = self._thread(thread_id)
        state.conversation_json = conversation_json
        # The shape the conversation shows (the output format may differ).
        shape = shape_of(body)
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
        )
        held = state.sent
        if (
            state.session_version is not None
            # Text-only messages were read as Chat, what "openai" says.
            and (shape == state.shape or (state.shape is None and shape == "openai"))
            and rest_json == state.rest_json
            and len(sent) >= len(held)
            and sent[: len(held)] == held
        ):
            # Only what was appended since the last call goes on the wire.
            req.append.CopyFrom(
                pb.ThreadAppend(
                    thread_id=thread_id,
                    base_version=state.session_version,
                    messages_json="[" + ",".join(sent[len(held) :]) + "]",
                    messages_format=_shape_number(shape),
                )
            )
            system_text, tool_schemas = _system_and_tools(rest)
            if system_text is not None:
                req.system_prompt = system_text
            req.tools.extend(tool_schemas)
        else:
            req.input.CopyFrom(
                pb.ProviderInput(thread_id=thread_id, json=conversation_json, format=_shape_number(shape))
            )
            req.start_session = True
        state.pending = (sent, shape, rest_json)
        if max_output_tokens is not None:
            req.max_output_tokens = max_output_tokens
        if policy:
            req.policy.CopyFrom(pb.PolicyOverrides(**policy))
        if state.plan is not None:
            req.known_plan_version = state.plan.version
        return req, fmt

    def _full_again(self, req: Any, thread_id: str) -> Any:
        """The request with the whole conversation, for a session the server
        no longer has at the client's version (another client, a restart
        past its idle time)."""
        state = self._thread(thread_id)
        state.session_version = None
        full = pb.RenderRequest()
        full.CopyFrom(req)
        full.ClearField("append")
        full.ClearField("system_prompt")
        del full.tools[:]
        full.input.CopyFrom(
            pb.ProviderInput(
                thread_id=thread_id,
                json=state.conversation_json or "",
                format=_shape_number(state.pending[1]),
            )
        )
        full.start_session = True
        return full

    def _rendered(self, resp: Any, fmt: str, thread_id: str) -> Rendered:
        state = self._thread(thread_id)
        if resp.HasField("session"):
            state.session_version = resp.session.version
            state.sent, state.shape, state.rest_json = state.pending
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
            warnings=list(c.warnings) + list(resp.audit.warnings),
            plan=plan,
            response=resp,
        )

    def _search_request(self, thread_id: str, query: str, max_results: int) -> Any:
        state = self._thread(thread_id)
        if state.conversation_json is None:
            raise ValueError(f"thread {thread_id!r}: render it first (search_context searches what its plan compacted out)")
        if state.session_version is not None:
            # The thread the server holds: nothing is sent again.
            return pb.SearchContextRequest(
                append=pb.ThreadAppend(thread_id=thread_id, base_version=state.session_version),
                query=query,
                max_results=max_results,
            )
        return pb.SearchContextRequest(
            input=pb.ProviderInput(thread_id=thread_id, json=state.conversation_json),
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


def _shape_number(shape: Optional[str]) -> int:
    """The proto's value for a shape; 0 leaves it to the server."""
    return 0 if shape is None else _PB_FORMAT[shape]


def _system_and_tools(rest: Mapping[str, Any]) -> Tuple[Optional[str], List[Any]]:
    """The system prompt and function tools of a body, as compactd reads them
    from ProviderInput (an append carries them in the request's own fields)."""
    system = rest.get("instructions", rest.get("system"))
    if isinstance(system, list):
        system = "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))
    tools = []
    for t in rest.get("tools") or []:
        if not isinstance(t, Mapping):
            continue
        if "input" in rest and t.get("type", "function") != "function":
            continue  # a Responses built-in tool
        f = t.get("function", t)
        params = f.get("parameters", f.get("input_schema"))
        tools.append(
            pb.ToolSchema(
                name=str(f.get("name", "")),
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
    ) -> None:
        super().__init__(api_key, token)
        options = _options(max_message_bytes)
        self._channel = (
            grpc.secure_channel(target, _credentials(tls), options=options)
            if tls is not None
            else grpc.insecure_channel(target, options=options)
        )
        self._stub = pb_grpc.CompactionServiceStub(self._channel)
        self._timeout = timeout

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
        system: Optional[str] = None,
        tools: Optional[Sequence[Any]] = None,
        max_output_tokens: Optional[int] = None,
        search_context_tool: bool = False,
        read_artifact_tool: bool = False,
        policy: Optional[Mapping[str, Any]] = None,
        omit_pending_calls: bool = False,
    ) -> Rendered:
        """Compacts the conversation if it needs it and renders it within
        `budget` tokens (0: the server's default) for `model`, in `format`
        (default: the shape the conversation is in; a Claude model's plain
        text is rendered for Anthropic)."""
        req, fmt = self._render_request(
            conversation,
            thread_id=thread_id,
            model=model,
            budget=budget,
            format=format,
            system=system,
            tools=tools,
            max_output_tokens=max_output_tokens,
            search_context_tool=search_context_tool,
            read_artifact_tool=read_artifact_tool,
            policy=policy,
            omit_pending_calls=omit_pending_calls,
        )
        try:
            resp = self._call(self._stub.Render, req)
        except CompactdError as e:
            if e.reason != _STALE:
                raise
            req = self._full_again(req, thread_id)
            resp = self._call(self._stub.Render, req)
        out = self._rendered(resp, fmt, thread_id)
        out.request_bytes = req.ByteSize()
        return out

    def search_context(self, thread_id: str, query: str, max_results: int = 0) -> List[Passage]:
        """What the thread's plan compacted out that matches `query`."""
        return _passages(self._call(self._stub.SearchContext, self._search_request(thread_id, query, max_results)))

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
    ) -> None:
        super().__init__(api_key, token)
        options = _options(max_message_bytes)
        self._channel = (
            grpc.aio.secure_channel(target, _credentials(tls), options=options)
            if tls is not None
            else grpc.aio.insecure_channel(target, options=options)
        )
        self._stub = pb_grpc.CompactionServiceStub(self._channel)
        self._timeout = timeout

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
        system: Optional[str] = None,
        tools: Optional[Sequence[Any]] = None,
        max_output_tokens: Optional[int] = None,
        search_context_tool: bool = False,
        read_artifact_tool: bool = False,
        policy: Optional[Mapping[str, Any]] = None,
        omit_pending_calls: bool = False,
    ) -> Rendered:
        """See [`Client.render`]."""
        req, fmt = self._render_request(
            conversation,
            thread_id=thread_id,
            model=model,
            budget=budget,
            format=format,
            system=system,
            tools=tools,
            max_output_tokens=max_output_tokens,
            search_context_tool=search_context_tool,
            read_artifact_tool=read_artifact_tool,
            policy=policy,
            omit_pending_calls=omit_pending_calls,
        )
        try:
            resp = await self._call(self._stub.Render, req)
        except CompactdError as e:
            if e.reason != _STALE:
                raise
            req = self._full_again(req, thread_id)
            resp = await self._call(self._stub.Render, req)
        out = self._rendered(resp, fmt, thread_id)
        out.request_bytes = req.ByteSize()
        return out

    async def search_context(self, thread_id: str, query: str, max_results: int = 0) -> List[Passage]:
        return _passages(await self._call(self._stub.SearchContext, self._search_request(thread_id, query, max_results)))

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


__all__ = ["Client", "AsyncClient", "Rendered", "Passage", "TLS", "CompactdError"]
