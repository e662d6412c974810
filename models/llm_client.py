"""A client for a user's own OpenAI-compatible model server (``/v1/chat/completions``).

Configured by the server's base URL and a model name; used by FuzzEval and NEMO in place of their
offline generators when a user points them at a server. Standard library only (``urllib``).
Tests never call it: they check the request it would send and how code is read from a reply.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class ChatClient:
    base_url: str  # e.g. http://localhost:8000/v1
    model: str
    api_key: str | None = None
    temperature: float = 0.8
    max_tokens: int = 1024
    timeout_s: float = 120.0

    def __post_init__(self):
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the model the server serves")

    def request(self, prompt: str, seed: int | None = None, system: str | None = None) -> urllib.request.Request:
        """The HTTP request for one completion (built, not sent)."""
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": self.max_tokens}
        if seed is not None:
            body["seed"] = seed
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return urllib.request.Request(self.base_url.rstrip("/") + "/chat/completions",
                                      data=json.dumps(body).encode(), headers=headers, method="POST")

    def complete(self, prompt: str, seed: int | None = None, system: str | None = None) -> str:
        """The text of the first choice of the server's reply."""
        with urllib.request.urlopen(self.request(prompt, seed, system), timeout=self.timeout_s) as reply:
            payload = json.loads(reply.read())
        try:
            return payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"reply from {self.base_url} is not a chat completion: {str(payload)[:200]}") from None


def extract_code(reply: str) -> str:
    """The last fenced Python block of a reply, else the whole reply."""
    blocks = _FENCE.findall(reply)
    return (blocks[-1] if blocks else reply).strip("\n") + "\n"
