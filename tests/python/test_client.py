"""The Python package (`pip install ./clients/python`, installed into the test
venv by scripts/venv.sh) against the real `compactd serve --dev`: renders of
real logs in every provider shape, handed to the official SDKs (their HTTP
layer answered by a fake model, so the SDK builds and sends the real
request), the search_context loop, errors as exceptions, the async client.
"""

import asyncio
import json
from pathlib import Path

import anthropic
import grpc
import httpx
import httpx2  # what the anthropic SDK is built on
import openai
import pytest

import compactd
from compactd import AsyncClient, Client, CompactdError
from fake_model import reply_for

DATA = Path(__file__).resolve().parents[1] / "data"
BUDGET = 4_000


def load(name):
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="module")
def client(server_addr):
    with Client(server_addr) as c:
        yield c


class FakeModel:
    """An HTTP transport for the SDKs (in process): records each request body
    and answers as fake_model's provider does."""

    def __init__(self):
        self.bodies = []

    def transport(self, http=httpx):
        return http.MockTransport(lambda request: self.handle(request, http))

    def handle(self, request, http):
        body = json.loads(request.content)
        self.bodies.append((request.url.path, body))
        reply = reply_for(request.url.path, body)
        if reply is None:
            return http.Response(404, json={"error": request.url.path})
        return http.Response(200, json=reply)


def assert_chat_pairing(messages):
    open_calls = set()
    for m in messages:
        for c in m.get("tool_calls") or []:
            open_calls.add(c["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, m["tool_call_id"]
            open_calls.discard(m["tool_call_id"])


def test_openai_chat_log_renders_for_the_openai_sdk(client):
    messages = load("swe_agent_marshmallow.json")
    r = client.render(messages, thread_id="py-swe", model="gpt-4o", budget=BUDGET)
    assert r.format == "openai"
    assert r.tokens <= BUDGET < r.tokens_before, (r.tokens, r.tokens_before)
    assert r.compacted and r.plan is not None
    assert_chat_pairing(r.body["messages"])
    fake = FakeModel()
    sdk = openai.OpenAI(api_key="test", http_client=httpx.Client(transport=fake.transport()))
    done = sdk.chat.completions.create(**r.body)
    assert done.choices[0].message.content == "done"
    path, sent = fake.bodies[-1]
    assert sent["messages"] == r.body["messages"], "the SDK sent the rendered body as it is"


def test_the_same_log_as_responses_items_for_the_responses_api(client):
    messages = load("tau_bench_airline.json")
    r = client.render(messages, thread_id="py-tau-responses", model="gpt-4o", budget=BUDGET, format="responses")
    assert r.tokens <= BUDGET
    assert "input" in r.body
    fake = FakeModel()
    sdk = openai.OpenAI(api_key="test", http_client=httpx.Client(transport=fake.transport()))
    sdk.responses.create(**r.body)
    assert fake.bodies[-1][1]["input"] == r.body["input"]
    # Responses items render back into the same thread.
    again = client.render(r.body["input"], thread_id="py-tau-responses-2", model="gpt-4o", budget=BUDGET)
    assert again.format == "responses"


def test_anthropic_body_with_thinking_renders_for_the_anthropic_sdk(client):
    body = load("claude_code_rust_port.anthropic.json")
    r = client.render(body, thread_id="py-claude", model=body["model"], budget=BUDGET, max_output_tokens=1024)
    assert r.format == "anthropic"
    assert r.tokens <= BUDGET < r.tokens_before
    assert r.body["max_tokens"] == 1024
    fake = FakeModel()
    sdk = anthropic.Anthropic(api_key="test", http_client=httpx2.Client(transport=fake.transport(httpx2)))
    done = sdk.messages.create(**r.body)
    assert done.content[0].text == "done"
    sent = fake.bodies[-1][1]
    assert sent["messages"] == r.body["messages"]
    # Every tool_result answers a tool_use of the message just before it.
    for i, m in enumerate(sent["messages"]):
        if m["role"] != "user" or not isinstance(m["content"], list):
            continue
        results = [b["tool_use_id"] for b in m["content"] if b.get("type") == "tool_result"]
        if results:
            prev = sent["messages"][i - 1]
            uses = {b["id"] for b in prev["content"] if b.get("type") == "tool_use"}
            assert set(results) <= uses, (i, results, uses)


def _marks(body):
    """cache_control breakpoints in an Anthropic body."""
    blocks = body["system"] if isinstance(body.get("system"), list) else []
    for m in body["messages"]:
        if isinstance(m["content"], list):
            blocks = blocks + m["content"]
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def test_prompt_cache_fields_reach_the_provider_bodies(client):
    body = load("claude_code_rust_port.anthropic.json")
    # Above the model's least cacheable prefix (4,096 tokens for Opus 4.5).
    first = client.render(body, thread_id="py-cache", model=body["model"], budget=12_000)
    assert 1 <= _marks(first.body) <= 4
    assert first.expected_cache_read_tokens is None, "no render before the first"
    fake = FakeModel()
    sdk = anthropic.Anthropic(api_key="test", http_client=httpx2.Client(transport=fake.transport(httpx2)))
    sdk.messages.create(**first.body)
    assert fake.bodies[-1][1]["messages"] == first.body["messages"], "the SDK sends the marks as they are"
    # The provider's report on the first body, as the SDK's usage.
    reported = anthropic.types.Usage(
        input_tokens=12, output_tokens=5, cache_read_input_tokens=0, cache_creation_input_tokens=6_000
    )
    again = client.render(body, thread_id="py-cache", model=body["model"], budget=12_000, usage=reported)
    assert not [w for w in again.warnings if w.startswith("usage")], again.warnings
    assert again.body == first.body and again.body_digest == first.body_digest
    assert 0 < again.expected_cache_read_tokens <= again.tokens
    off = client.render(body, thread_id="py-cache-off", model=body["model"], budget=12_000, cache_breakpoints=False)
    assert _marks(off.body) == 0, "the log carries no marks of its own"
    # OpenAI's routing key and end-user id: from the body, or as given.
    chat = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "Plan the port."}],
        "prompt_cache_key": "acme/agent-7",
        "safety_identifier": "u-1f3a",
    }
    r = client.render(chat, thread_id="py-cache-chat", model="gpt-4o", budget=BUDGET)
    assert (r.body["prompt_cache_key"], r.body["safety_identifier"]) == ("acme/agent-7", "u-1f3a")
    usage = openai.types.CompletionUsage(
        prompt_tokens=2_000, completion_tokens=3, total_tokens=2_003, prompt_tokens_details={"cached_tokens": 1_024}
    )
    r = client.render(chat, thread_id="py-cache-chat", model="gpt-4o", budget=BUDGET, usage=usage)
    assert not [w for w in r.warnings if w.startswith("usage")], r.warnings
    with pytest.raises(ValueError):
        client.render(chat, thread_id="py-cache-chat", model="gpt-4o", budget=BUDGET, usage={"tokens": 3})
    r = client.render(
        chat, thread_id="py-cache-responses", model="gpt-4o", budget=BUDGET, format="responses", prompt_cache_key="other"
    )
    assert (r.body["prompt_cache_key"], r.body["safety_identifier"]) == ("other", "u-1f3a")
    with pytest.raises(CompactdError) as e:
        client.render(chat, thread_id="py-cache-bad", model="gpt-4o", budget=BUDGET, prompt_cache_key="k" * 65)
    assert e.value.field == "prompt_cache_key"


def test_sdk_objects_are_taken_as_they_are(client):
    """An assistant reply appended as the SDK returned it (a pydantic model)."""
    fake = FakeModel()
    sdk = openai.OpenAI(api_key="test", http_client=httpx.Client(transport=fake.transport()))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan the port."}]
    r = client.render(messages, thread_id="py-objects", model="gpt-4o", budget=BUDGET)
    reply = sdk.chat.completions.create(**r.body).choices[0].message
    messages += [reply, {"role": "user", "content": "Go on."}]
    r = client.render(messages, thread_id="py-objects", model="gpt-4o", budget=BUDGET)
    assert [m["role"] for m in r.body["messages"]] == ["system", "user", "assistant", "user"]
    assert r.body["messages"][2]["content"] == "done"


def test_a_held_plan_is_not_sent_again(client):
    messages = load("claude_code_rust_port.json")
    first = client.render(messages[:60], thread_id="py-held", model="gpt-4o", budget=BUDGET)
    assert first.plan is not None and not first.response.compaction.plan_omitted
    again = client.render(messages[:60], thread_id="py-held", model="gpt-4o", budget=BUDGET)
    assert again.plan_version == first.plan_version
    assert again.response.compaction.plan_omitted
    assert not again.response.compaction.HasField("plan")
    assert again.plan is first.plan, "the client fills in the plan it holds"
    assert again.body == first.body
    grown = client.render(messages[:62], thread_id="py-held", model="gpt-4o", budget=BUDGET)
    assert grown.plan.version == grown.plan_version


def test_search_context_calls_are_answered_for_the_caller(client):
    messages = load("swe_agent_marshmallow.json")
    r = client.render(messages, thread_id="py-search", model="gpt-4o", budget=BUDGET, search_context_tool=True)
    names = [t["function"]["name"] for t in r.body.get("tools", [])]
    assert "search_context" in names
    text = client.answer_tool_call("py-search", "search_context", json.dumps({"query": "marshmallow TimeDelta"}))
    assert text and "line" in text
    assert client.answer_tool_call("py-search", "some_other_tool", "{}") is None


def test_errors_carry_the_code_and_the_field(client):
    orphan = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c9", "content": "x"}]
    with pytest.raises(CompactdError) as info:
        client.render(orphan, thread_id="py-bad", model="gpt-4o", budget=BUDGET)
    e = info.value
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.field == "input.json.messages[1].tool_call_id", e.field
    assert e.reason
    with pytest.raises(ValueError):
        client.render([], thread_id="", model="gpt-4o")


def test_the_async_client_renders_the_same(server_addr, client):
    messages = load("tau_bench_airline.json")
    sync = client.render(messages, thread_id="py-async", model="gpt-4o", budget=BUDGET)

    async def run():
        async with AsyncClient(server_addr) as c:
            return await c.render(messages, thread_id="py-async", model="gpt-4o", budget=BUDGET)

    r = asyncio.run(run())
    assert r.body == sync.body
    assert not r.compacted, "the same thread and settings reuse the committed plan"


def test_the_package_is_the_installed_one():
    assert compactd.__version__
    assert Path(compactd.__file__).parent.joinpath("v1", "compactd_pb2.py").is_file(), "stubs generated at build"


API_KEY = "ck_test_0123456789abcdef"
HS256_SECRET = "a-test-secret-of-at-least-thirty-two-bytes!!"


@pytest.fixture(scope="module")
def authed_server(tmp_path_factory):
    """A second `compactd serve` with authentication configured (no --dev):
    an API key and HS256 JWTs."""
    import hashlib
    import os
    import subprocess

    from conftest import _binary

    d = tmp_path_factory.mktemp("authed")
    secret = d / "hs256"
    secret.write_text(HS256_SECRET)
    config = d / "config.yaml"
    perms = "[compact, render, rehydrate, delete, 'artifact:read:public', 'artifact:read:internal']"
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"data_dir: {d / 'data'}\n"
        "auth:\n"
        "  api_keys:\n"
        f"    - sha256: {hashlib.sha256(API_KEY.encode()).hexdigest()}\n"
        "      tenant: acme\n"
        "      requester: python-client-test\n"
        f"      permissions: {perms}\n"
        "  jwt:\n"
        "    issuer: https://issuer.test\n"
        "    audience: compactd\n"
        f"    hs256_secret_file: {secret}\n"
    )
    env = {k: v for k, v in os.environ.items() if not (k.startswith("COMPACTD__") or k == "COMPACTD_CONFIG")}
    proc = subprocess.Popen(
        [str(_binary()), "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        first = proc.stdout.readline().decode().strip()
        prefix = "compactd listening on "
        assert first.startswith(prefix), f"no address: {first!r} {proc.stderr.read1().decode(errors='replace')}"
        yield first[len(prefix) :]
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_api_keys_and_jwts_authenticate(authed_server):
    import time

    import jwt

    messages = load("tau_bench_airline.json")
    with Client(authed_server) as anonymous:
        with pytest.raises(CompactdError) as info:
            anonymous.render(messages, thread_id="auth-1", model="gpt-4o", budget=BUDGET)
        assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    with Client(authed_server, api_key="not-the-key") as wrong:
        with pytest.raises(CompactdError) as info:
            wrong.render(messages, thread_id="auth-1", model="gpt-4o", budget=BUDGET)
        assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    with Client(authed_server, api_key=API_KEY) as keyed:
        by_key = keyed.render(messages, thread_id="auth-1", model="gpt-4o", budget=BUDGET)
    now = int(time.time())
    claims = {
        "iss": "https://issuer.test",
        "aud": "compactd",
        "sub": "python-client-test",
        "tenant": "acme",
        "permissions": ["compact", "render"],
        "iat": now,
        "exp": now + 300,
    }
    token = jwt.encode(claims, HS256_SECRET, algorithm="HS256")

    async def run():
        async with AsyncClient(authed_server, token=token) as c:
            return await c.render(messages, thread_id="auth-1", model="gpt-4o", budget=BUDGET)

    by_token = asyncio.run(run())
    # The same tenant (acme) either way: the committed plan is reused.
    assert not by_token.compacted and by_token.body == by_key.body
    with pytest.raises(ValueError):
        Client(authed_server, api_key=API_KEY, token=token)


def growing(items):
    """The conversation as an agent sends it: up to each model call (before
    every assistant message), then whole."""
    cuts = [i for i, m in enumerate(items) if i > 0 and m.get("role") == "assistant"]
    return [items[:i] for i in cuts] + [items]


@pytest.mark.parametrize(
    "log, model, fmt",
    [
        ("swe_agent_marshmallow.json", "gpt-4o", "openai"),
        ("claude_code_rust_port.anthropic.json", "claude-sonnet-5", "anthropic"),
    ],
)
def test_a_growing_conversation_sends_only_what_was_appended(server_addr, log, model, fmt):
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    tools = (
        [{"name": "read_file", "description": "Read a file.", "input_schema": schema}]
        if fmt == "anthropic"
        else [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": schema}}]
    )
    data = load(log)
    items = data["messages"] if isinstance(data, dict) else data
    thread = f"py-session-{fmt}"
    steps = growing(items)
    assert len(steps) > 4
    with Client(server_addr) as c:
        for n, conversation in enumerate(steps):
            r = c.render(
                conversation, thread_id=thread, model=model, budget=2 * BUDGET, format=fmt, system="You port code.", tools=tools
            )
            assert r.response.HasField("session")
            # The first call, and the one where the conversation first shows
            # Anthropic blocks (read as Chat before), send it whole.
            if n > 1:
                whole = len(json.dumps(conversation))
                assert r.request_bytes < whole / 2, (n, r.request_bytes, whole)
        last = r
    # The server holds exactly the conversation: a fresh client sending it
    # whole starts a session over the same messages (the digest is over them).
    with Client(server_addr) as fresh:
        again = fresh.render(
            items, thread_id=thread + "-whole", model=model, budget=2 * BUDGET, format=fmt, system="You port code.", tools=tools
        )
    assert again.response.session.messages == last.response.session.messages
    assert again.response.session.digest == last.response.session.digest
    # The appends carried the same system prompt and tools as the body did.
    assert again.response.tokens.system == last.response.tokens.system > 0
    assert again.response.tokens.tools == last.response.tokens.tools > 0


def test_a_stale_session_is_resent_whole(server_addr):
    items = load("tau_bench_airline.json")
    steps = growing(items)
    with Client(server_addr) as c, Client(server_addr) as other:
        c.render(steps[0], thread_id="py-stale", model="gpt-4o", budget=BUDGET)
        c.render(steps[1], thread_id="py-stale", model="gpt-4o", budget=BUDGET)
        # Another client erases the thread, session and all.
        other.delete_thread("py-stale")
        r = c.render(steps[2], thread_id="py-stale", model="gpt-4o", budget=BUDGET)
        assert r.request_bytes > len(json.dumps(steps[2])) / 2, "sent whole after SESSION_STALE"
        r = c.render(steps[3], thread_id="py-stale", model="gpt-4o", budget=BUDGET)
        assert r.request_bytes < len(json.dumps(steps[3])) / 2, "and appends again"
        # An edited history starts over.
        edited = [dict(m) for m in steps[4]]
        edited[0]["content"] = "A different opening."
        r = c.render(edited, thread_id="py-stale", model="gpt-4o", budget=BUDGET)
        assert r.request_bytes > len(json.dumps(edited)) / 2


def test_a_fresh_venv_installs_the_package_and_runs_the_readme_langchain_example(server_addr, tmp_path):
    """`pip install "./clients/python[langchain]"` into an empty venv is all
    a caller needs (its own dependencies, stubs generated at build): the
    plain client and the README's LangChain example, as written but for the
    address and the budget, with langchain-core's fake chat model."""
    import re
    import subprocess
    import venv

    repo = Path(__file__).resolve().parents[2]
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    package = str(repo / "clients" / "python") + "[langchain]"
    done = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", package],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    readme = (repo / "README.md").read_text()
    example = re.search(r"<!-- example: langchain -->\n```python\n(.*?)```", readme, flags=re.S).group(1)
    example = example.replace("127.0.0.1:50051", server_addr).replace("32_000", str(BUDGET))
    script = (
        "import json\n"
        "from compactd import Client\n"
        "from langchain_core.language_models.fake_chat_models import GenericFakeChatModel\n"
        "from langchain_core.messages import AIMessage\n"
        f"messages = json.load(open({str(DATA / 'swe_agent_marshmallow.json')!r}))\n"
        f"with Client({server_addr!r}) as c:\n"
        f"    r = c.render(messages, thread_id='fresh-venv', model='gpt-4o', budget={BUDGET})\n"
        "class Model(GenericFakeChatModel):\n"
        "    def bind_tools(self, tools, **kwargs):\n"
        "        return self\n"
        "model = Model(messages=iter([AIMessage(content='done')]))\n"
        + example
        + "print(json.dumps({'before': r.tokens_before, 'after': r.tokens, 'state': len(state['messages']), "
        "'reply': state['messages'][-1].content}))\n"
    )
    run = subprocess.run([str(py), "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["after"] <= BUDGET < out["before"], out
    assert out["state"] == len(json.loads((DATA / "swe_agent_marshmallow.json").read_text())) + 1, out
    assert out["reply"] == "done"


def _certificates(d):
    """A CA, a server certificate for 127.0.0.1, and a client certificate
    whose SPIFFE id names tenant acme (PEM files in `d`)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject, subject_key, issuer, issuer_key, *, ca=False, sans=None, usage=None):
        b = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(subject_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        if usage:
            b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    def pem_key(k):
        return k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = key()
    ca = cert("compactd test CA", ca_key, "compactd test CA", ca_key, ca=True)
    server_key = key()
    server = cert(
        "localhost",
        server_key,
        "compactd test CA",
        ca_key,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client_key = key()
    client = cert(
        "agent",
        client_key,
        "compactd test CA",
        ca_key,
        sans=[x509.UniformResourceIdentifier("spiffe://test.local/tenant/acme/agent")],
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    files = {
        "ca.pem": ca.public_bytes(serialization.Encoding.PEM),
        "server.pem": server.public_bytes(serialization.Encoding.PEM),
        "server.key": pem_key(server_key),
        "client.pem": client.public_bytes(serialization.Encoding.PEM),
        "client.key": pem_key(client_key),
    }
    for n, data in files.items():
        (d / n).write_bytes(data)
    return files


def test_mtls_authenticates_with_the_client_certificate(tmp_path):
    import os
    import subprocess

    from compactd import TLS
    from conftest import _binary

    files = _certificates(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        "listen: 127.0.0.1:0\n"
        f"data_dir: {tmp_path / 'data'}\n"
        "auth:\n"
        "  mtls:\n"
        f"    ca_file: {tmp_path / 'ca.pem'}\n"
        f"    cert_file: {tmp_path / 'server.pem'}\n"
        f"    key_file: {tmp_path / 'server.key'}\n"
        "    trust_domain: test.local\n"
        "    permissions: [compact, render]\n"
    )
    env = {k: v for k, v in os.environ.items() if not (k.startswith("COMPACTD__") or k == "COMPACTD_CONFIG")}
    proc = subprocess.Popen(
        [str(_binary()), "serve", "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        first = proc.stdout.readline().decode().strip()
        assert first.startswith("compactd listening on "), proc.stderr.read1().decode(errors="replace")
        addr = first[len("compactd listening on ") :]
        messages = load("tau_bench_airline.json")
        tls = TLS(
            root_certificates=files["ca.pem"], certificate_chain=files["client.pem"], private_key=files["client.key"]
        )
        with Client(addr, tls=tls) as c:
            r = c.render(messages, thread_id="mtls-1", model="gpt-4o", budget=BUDGET)
            assert r.tokens <= BUDGET
        # TLS without a client certificate is not a credential.
        with Client(addr, tls=TLS(root_certificates=files["ca.pem"]), timeout=10) as anonymous:
            with pytest.raises(CompactdError) as info:
                anonymous.render(messages, thread_id="mtls-1", model="gpt-4o", budget=BUDGET)
            assert info.value.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE), info.value
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_responses_items_with_a_built_in_tool_append(server_addr):
    """Responses bodies carry built-in tools the server does not count; the
    appends after the first call must leave them out as the import does."""
    with Client(server_addr) as c:
        items = c.render(load("tau_bench_airline.json"), thread_id="py-rsrc", model="gpt-4o", budget=200_000, format="responses").body["input"]
    tools = [
        {"type": "web_search_preview"},
        {"type": "function", "name": "lookup", "description": "Look up a booking.", "parameters": {"type": "object"}},
    ]
    cuts = [i for i in range(1, len(items)) if items[i - 1].get("type") == "function_call_output" or items[i - 1].get("role") == "user"]
    with Client(server_addr) as c:
        sizes = []
        for cut in cuts[-4:] + [len(items)]:
            body = {"input": items[:cut], "instructions": "Help the traveller.", "tools": tools}
            r = c.render(body, thread_id="py-builtin", model="gpt-4o", budget=BUDGET)
            sizes.append(r.request_bytes)
            assert r.format == "responses"
    assert max(sizes[1:]) < sizes[0] / 2, sizes


def test_concurrent_calls_on_one_thread_do_not_cross(server_addr):
    """Calls on one thread from several OS threads run one at a time, each on
    what the last one sent."""
    from concurrent.futures import ThreadPoolExecutor

    items = load("tau_bench_airline.json")
    steps = growing(items)
    with Client(server_addr) as c:
        c.render(steps[0], thread_id="py-threads", model="gpt-4o", budget=BUDGET)
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda s: c.render(s, thread_id="py-threads", model="gpt-4o", budget=BUDGET), steps[1:9]))
    assert all(r.tokens <= BUDGET for r in results)
    versions = sorted(r.response.session.version for r in results)
    assert len(set(versions)) == len(versions), versions


def _token_fields(model, prefix=""):
    """Every token count an SDK usage type has, nested ones by dotted path."""
    import typing

    import pydantic

    out = []
    for name, field in model.model_fields.items():
        args = typing.get_args(field.annotation) or (field.annotation,)
        nested = [a for a in args if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
        if nested:
            out += _token_fields(nested[0], prefix + name + ".")
        elif "tokens" in name:
            out.append(prefix + name)
    return set(out)


# Per provider usage type: the counts the client reads, and the rest (a part
# of a count it reads, or not input at all). A count a new SDK version adds
# fails the test until it is read or placed here.
USAGE_TYPES = {
    "anthropic": (
        "anthropic.types.Usage",
        {"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"},
        {"cache_creation.ephemeral_1h_input_tokens", "cache_creation.ephemeral_5m_input_tokens",
         "output_tokens", "output_tokens_details.thinking_tokens"},
    ),
    "chat": (
        "openai.types.CompletionUsage",
        {"prompt_tokens", "prompt_tokens_details.cached_tokens", "prompt_tokens_details.cache_write_tokens"},
        {"prompt_tokens_details.audio_tokens", "prompt_tokens_details.image_tokens",
         "prompt_tokens_details.text_tokens", "completion_tokens", "total_tokens",
         "completion_tokens_details.accepted_prediction_tokens", "completion_tokens_details.audio_tokens",
         "completion_tokens_details.reasoning_tokens", "completion_tokens_details.rejected_prediction_tokens",
         "completion_tokens_details.text_tokens"},
    ),
    "responses": (
        "openai.types.responses.ResponseUsage",
        {"input_tokens", "input_tokens_details.cached_tokens", "input_tokens_details.cache_write_tokens"},
        {"input_tokens_details.cache_write_tokens_details.ttl_12h_tokens",
         "input_tokens_details.cache_write_tokens_details.ttl_30m_tokens",
         "output_tokens", "output_tokens_details.reasoning_tokens", "total_tokens"},
    ),
}


@pytest.mark.parametrize("provider", sorted(USAGE_TYPES))
def test_every_token_count_of_the_sdks_usage_types_is_read_or_placed(provider):
    import importlib

    from compactd._client import _provider_usage

    path, read, placed = USAGE_TYPES[provider]
    module, name = path.rsplit(".", 1)
    usage_type = getattr(importlib.import_module(module), name)
    assert _token_fields(usage_type) == read | placed, f"{path} changed: read the new count or place it"
    # Each count the client reads carries its own value through.
    values = {f: 1_000 * (i + 1) for i, f in enumerate(sorted(read))}
    nested = {}
    for f, v in values.items():
        head, _, tail = f.partition(".")
        (nested.setdefault(head, {}) if tail else nested)[tail or head] = v
    u = _provider_usage(nested, "12")
    got = {u.input_tokens, u.cache_read_tokens, u.cache_write_tokens}
    if provider == "anthropic":
        # Anthropic's input_tokens counts only what follows the last breakpoint.
        assert u.input_tokens == sum(values.values()), u
        got = {values["input_tokens"], u.cache_read_tokens, u.cache_write_tokens}
    assert got == set(values.values()), (u, values)
