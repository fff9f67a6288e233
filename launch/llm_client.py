"""HTTP client of an OpenAI-compatible chat-completions endpoint.

Used by ModelSMC's LLM proposer (``methods.model_smc.llm.LLMProposer``, which
takes any object with ``complete(messages) -> str``). The base URL, model and
API key come from the config or the environment (``MODEL_SMC_LLM_BASE_URL`` /
``OPENAI_BASE_URL``, ``MODEL_SMC_LLM_MODEL``, and the variable named by
``api_key_env``, default ``OPENAI_API_KEY``). Only the standard library is
used (``http.client``; proxies from the environment are not used). Every
failure -- bad configuration, timeout, network or HTTP error, a response
that is not a chat completion -- raises ``LLMError`` with a kind and a
reason; the samplers turn it into a logged, rejected proposal.

``timeout_s`` is a deadline for the whole request -- connecting, sending,
the headers and the whole body -- not for each read: a reply that trickles
in one byte a second ends at the deadline, when a timer shuts the socket.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Mapping, Optional, Sequence

from methods.common import hparams
from methods.model_smc.llm import LLMError


@dataclasses.dataclass(frozen=True)
class LLMConfig(hparams.Hyperparameters):
  """Endpoint settings (config section ``llm``; empty strings are filled from the environment)."""

  base_url: str = hparams.field("", "Endpoint base URL ('': MODEL_SMC_LLM_BASE_URL or OPENAI_BASE_URL).")
  model: str = hparams.field("", "Model name ('': MODEL_SMC_LLM_MODEL).")
  api_key_env: str = hparams.field("OPENAI_API_KEY", "Environment variable holding the API key.")
  timeout_s: float = hparams.field(60.0, "Deadline of each request in seconds (connect, send and the whole reply).",
                                   low=0, low_open=True, high=86400)
  temperature: float = hparams.field(0.7, "Sampling temperature.", low=0)
  max_tokens: int = hparams.field(800, "Most tokens per reply.", low=1)
  max_params: int = hparams.field(16, "Most parameters of a proposed structure.", low=1)


class ChatClient:
  """Minimal client of ``POST {base_url}/chat/completions``."""

  def __init__(self, base_url: str, model: str, api_key: Optional[str] = None, *,
               timeout_s: float = 60.0, temperature: float = 0.7, max_tokens: int = 800):
    if not base_url or not model:
      raise LLMError("config", "an LLM proposer needs a base URL and a model name "
                     "(--config.llm.base_url=URL --config.llm.model=NAME, or MODEL_SMC_LLM_BASE_URL / "
                     "MODEL_SMC_LLM_MODEL in the environment)")
    if not re.match(r"^https?://", base_url):
      raise LLMError("config", f"base URL must start with http:// or https:// (got {base_url!r})")
    self.url = base_url.rstrip("/") + "/chat/completions"
    try:
      parts = urllib.parse.urlsplit(self.url)
      port = parts.port
    except ValueError as e:
      raise LLMError("config", f"base URL {base_url!r} does not parse ({e})") from None
    if not parts.hostname:
      raise LLMError("config", f"base URL {base_url!r} has no host")
    self._https, self._host, self._port = parts.scheme == "https", parts.hostname, port
    self._path = parts.path + (f"?{parts.query}" if parts.query else "")
    self.model, self.api_key = model, api_key
    self.timeout_s, self.temperature, self.max_tokens = timeout_s, temperature, max_tokens
    self.calls = 0

  @classmethod
  def from_config(cls, cfg: LLMConfig, env: Optional[Mapping[str, str]] = None) -> "ChatClient":
    env = os.environ if env is None else env
    base_url = cfg.base_url or env.get("MODEL_SMC_LLM_BASE_URL") or env.get("OPENAI_BASE_URL", "")
    model = cfg.model or env.get("MODEL_SMC_LLM_MODEL", "")
    return cls(base_url, model, env.get(cfg.api_key_env) or None, timeout_s=cfg.timeout_s,
               temperature=cfg.temperature, max_tokens=cfg.max_tokens)

  def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
    """The assistant message of one chat completion (raises :class:`LLMError`)."""
    body = json.dumps({
        "model": self.model,
        "messages": list(messages),
        "temperature": self.temperature,
        "max_tokens": self.max_tokens,
        "response_format": {"type": "json_object"},
    }).encode()
    headers = {"Content-Type": "application/json"}
    if self.api_key:
      headers["Authorization"] = f"Bearer {self.api_key}"
    self.calls += 1
    raw = self._post(body, headers)
    try:
      envelope = json.loads(raw.decode("utf-8"))
      content = envelope["choices"][0]["message"]["content"]
    except (ValueError, RecursionError) as e:  # undecodable, not JSON, nested too deep, huge integers
      raise LLMError("json", f"the endpoint's response is not usable JSON ({type(e).__name__}: {str(e)[:120]})") from None
    except (KeyError, IndexError, TypeError):
      raise LLMError("schema", "the response has no choices[0].message.content") from None
    if not isinstance(content, str):
      raise LLMError("schema", "choices[0].message.content is not a string")
    return content

  def _post(self, body: bytes, headers: dict) -> bytes:
    """The response body (at most 1 MiB) of one POST, within ``timeout_s`` in all (raises :class:`LLMError`)."""
    deadline = time.monotonic() + self.timeout_s
    if self._https:
      conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s,
                                         context=ssl.create_default_context())
    else:
      conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
    expired = threading.Event()

    def expire():  # ends a read that is blocked, or one that keeps receiving a byte at a time
      expired.set()
      if conn.sock is not None:
        try:
          conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
          pass

    timer = threading.Timer(self.timeout_s, expire)
    timer.daemon = True
    timer.start()
    timeout = LLMError("timeout", f"no complete reply from {self.url} within {self.timeout_s:g} s")
    try:
      conn.request("POST", self._path, body=body, headers=headers)
      response = conn.getresponse()
      if response.status >= 400:
        detail = response.read(300).decode("utf-8", "replace")
        raise LLMError("http", f"HTTP {response.status} from {self.url}: {detail.strip()[:200]}")
      raw = bytearray()
      while len(raw) < 1 << 20:
        if time.monotonic() >= deadline:
          raise timeout
        chunk = response.read1(1 << 16)
        if not chunk:
          break
        raw += chunk
      if expired.is_set():
        raise timeout
      return bytes(raw[:1 << 20])
    except LLMError:
      raise
    except (socket.timeout, TimeoutError):
      raise timeout from None
    except (OSError, http.client.HTTPException) as e:
      if expired.is_set():
        raise timeout from None
      raise LLMError("network", f"connection to {self.url} failed: {type(e).__name__}: {e}") from None
    finally:
      timer.cancel()
      conn.close()
