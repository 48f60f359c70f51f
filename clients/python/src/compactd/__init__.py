"""compactd's Python client: compact and render agent conversations in the
shapes the OpenAI and Anthropic SDKs use, through a compactd service.

    from compactd import Client
    client = Client("127.0.0.1:50051")
    r = client.render(messages, thread_id="t1", model="gpt-4o", budget=32_000)
    openai.OpenAI().chat.completions.create(**r.body)

Integrations (each imports its framework only when used):
`compactd.integrations.langchain` (agent middleware),
`compactd.integrations.langgraph` (pre-model hook),
`compactd.integrations.agents` (OpenAI Agents SDK model input filter).
"""

from compactd._client import TLS, AsyncClient, Client, Passage, Rendered
from compactd._errors import CompactdError
from compactd._fallback import fail_open_counts
from compactd._shapes import detect_format

__all__ = ["Client", "AsyncClient", "Rendered", "Passage", "TLS", "CompactdError", "detect_format", "fail_open_counts"]
__version__ = "0.1.0"
