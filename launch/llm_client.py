"""HTTP client of an OpenAI-compatible chat-completions endpoint.

Used by ModelSMC's LLM proposer (``methods.model_smc.llm.LLMProposer``, which
takes any object with ``complete(messages) -> str``). The base URL, model and
API key come from the config or the environment (``MODEL_SMC_LLM_BASE_URL`` /
``OPENAI_BASE_URL``, ``MODEL_SMC_LLM_MODEL``, and the variable named by
``api_key_env``, default ``OPENAI_API_KEY``). Only the standard library is
used. Every failure -- bad configuration, timeout, network or HTTP error, a
response that is not a chat completion -- raises ``LLMError`` with a kind and
a reason; the samplers turn it into a logged, rejected proposal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import urllib.error
import urllib.request
from typing import Mapping, Optional, Sequence

from methods.common import hparams
from methods.model_smc.llm import LLMError


@dataclasses.dataclass(frozen=True)
class LLMConfig(hparams.Hyperparameters):
  """Endpoint settings (config section ``llm``; empty strings are filled from the environment)."""

  base_url: str = hparams.field("", "Endpoint base URL ('': MODEL_SMC_LLM_BASE_URL or OPENAI_BASE_URL).")
  model: str = hparams.field("", "Model name ('': MODEL_SMC_LLM_MODEL).")
  api_key_env: str = hparams.field("OPENAI_API_KEY", "Environment variable holding the API key.")
  timeout_s: float = hparams.field(60.0, "Seconds per request.", low=0, low_open=True)
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
    request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
    self.calls += 1
    try:
      with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 (http(s) only)
        raw = response.read(1 << 20)
    except urllib.error.HTTPError as e:
      detail = e.read(300).decode("utf-8", "replace") if e.fp is not None else ""
      raise LLMError("http", f"HTTP {e.code} from {self.url}: {detail.strip()[:200]}") from None
    except (socket.timeout, TimeoutError):
      raise LLMError("timeout", f"no reply from {self.url} within {self.timeout_s:g} s") from None
    except urllib.error.URLError as e:
      if isinstance(e.reason, (socket.timeout, TimeoutError)):
        raise LLMError("timeout", f"no reply from {self.url} within {self.timeout_s:g} s") from None
      raise LLMError("network", f"cannot reach {self.url}: {e.reason}") from None
    except OSError as e:
      raise LLMError("network", f"connection to {self.url} failed: {e}") from None
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
