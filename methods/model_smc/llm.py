"""An LLM proposer over an OpenAI-compatible chat-completions endpoint.

The proposer sends the current model (and up to three ancestors with their
scores) to ``POST {base_url}/chat/completions`` and asks for one JSON object::

  {"rationale": "...",
   "equations": {"<state>": "<right-hand side>", ...},
   "params": {"<name>": {"init": 0.5, "prior": {"loc": -1.0, "scale": 1.0}}, ...}}

The equations go through the same safe parser as everything else
(:func:`methods.model_smc.structure.from_equations`); ``params`` is validated
and recorded, but the fit uses the configured priors and its own starts, so
every proposal is scored the same way and an LLM cannot raise a model's
evidence by narrowing its prior. Any failure -- timeout, network or HTTP
error, a reply that is not the JSON asked for, an unsafe or invalid
expression -- raises :class:`LLMError` with a ``kind`` and a reason; the
samplers turn it into a rejected proposal and go on.

This module is pure: it builds the messages and validates the replies. The
HTTP transport (``launch/llm_client.py``, standard library only) is passed in
as a :class:`Completer`, so ``methods`` does no I/O of its own.
"""

from __future__ import annotations

import collections
import json
import math
import re
from typing import Mapping, Optional, Protocol, Sequence

from methods.model_smc import expr as ex
from methods.model_smc import structure as st

# "exception": anything else raised while handling one proposal (its type is in the reason).
ERROR_KINDS = ("config", "timeout", "network", "http", "json", "schema", "unsafe", "invalid", "exception")
MAX_REPLY_CHARS = 100_000


class LLMError(RuntimeError):
  """A failed LLM proposal; ``kind`` is one of :data:`ERROR_KINDS`."""

  def __init__(self, kind: str, reason: str):
    self.kind, self.reason = kind, reason
    super().__init__(f"{kind}: {reason}")


class Completer(Protocol):
  """Anything that returns the assistant's reply to chat ``messages``.

  ``launch.llm_client.ChatClient`` is the HTTP implementation; tests and
  offline runs can pass any object with this method. It raises
  :class:`LLMError` on failure.
  """

  def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
    ...


def _json_object(text: str) -> dict:
  """The JSON object in a reply (code fences and surrounding prose allowed)."""
  if not isinstance(text, str):
    raise LLMError("schema", f"the reply is a {type(text).__name__}, not text")
  if len(text) > MAX_REPLY_CHARS:
    raise LLMError("json", f"the reply has {len(text):,} characters (at most {MAX_REPLY_CHARS:,})")
  fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
  candidate = fenced.group(1) if fenced else text[text.find("{"): text.rfind("}") + 1]
  if not candidate:
    raise LLMError("json", "the reply contains no JSON object")
  try:
    obj = json.loads(candidate)
  except json.JSONDecodeError as e:
    raise LLMError("json", f"the reply's JSON does not parse ({e.msg} at position {e.pos})") from None
  except RecursionError:
    raise LLMError("json", "the reply's JSON is nested too deeply") from None
  except ValueError as e:  # e.g. an integer longer than Python's int-string limit
    raise LLMError("json", f"the reply's JSON does not parse ({e})") from None
  if not isinstance(obj, dict):
    raise LLMError("schema", f"expected a JSON object, got {type(obj).__name__}")
  return obj


def _finite(x) -> Optional[float]:
  """``x`` as a float if it is a number that is finite in float32, else ``None`` (never raises)."""
  if isinstance(x, bool) or not isinstance(x, (int, float)):
    return None
  try:
    value = float(x)
  except OverflowError:  # an integer with hundreds of digits
    return None
  return value if math.isfinite(value) and abs(value) < 1e38 else None


def parse_reply(text: str, library: st.Library, *, max_params: int) -> tuple[st.Structure, str, dict]:
  """Validates a reply and builds its structure.

  Returns:
    ``(structure, rationale, params)``; ``params`` maps names to validated
    ``{"init", "prior"}`` entries.

  Raises:
    LLMError: kinds ``json``, ``schema``, ``unsafe`` or ``invalid``.
  """
  obj = _json_object(text)
  eqs = obj.get("equations")
  if not isinstance(eqs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in eqs.items()):
    raise LLMError("schema", "'equations' must be an object mapping state names to expression strings")
  rationale = obj.get("rationale", "")
  if not isinstance(rationale, str):
    raise LLMError("schema", "'rationale' must be a string")
  params = obj.get("params", {})
  if not isinstance(params, dict):
    raise LLMError("schema", "'params' must be an object")
  checked = {}
  for name, spec in params.items():
    if not isinstance(spec, dict):
      raise LLMError("schema", f"params[{name!r}] must be an object with 'init' and 'prior'")
    init = spec.get("init")
    if init is not None:
      init = _finite(init)
      if init is None or init <= 0:
        raise LLMError("schema", f"params[{name!r}].init must be a positive number below 1e38")
    prior = spec.get("prior")
    if prior is not None:
      if not isinstance(prior, dict):
        raise LLMError("schema", f"params[{name!r}].prior must be {{'loc': number, 'scale': number}}")
      loc, scale = _finite(prior.get("loc")), _finite(prior.get("scale"))
      if loc is None or scale is None or scale <= 0:
        raise LLMError("schema", f"params[{name!r}].prior needs a finite loc and a positive scale (numbers below 1e38)")
      prior = {"loc": loc, "scale": scale}
    checked[str(name)[:32]] = {"init": init, "prior": prior}
  try:
    structure = st.from_equations(eqs, library, max_params=max_params)
  except ex.UnsafeExpression as e:
    raise LLMError("unsafe", e.reason) from None
  except st.StructureError as e:
    raise LLMError("invalid", str(e)) from None
  except RecursionError:
    raise LLMError("unsafe", "an expression is nested too deeply") from None
  return structure, rationale[:500], checked


SYSTEM_PROMPT = """You propose mechanistic ordinary differential equation models.
Write each right-hand side in this language only: numbers, the state names, t,
parameter names (letters/digits/_; positive values, fitted automatically),
+ - * / ^ and the functions exp log sqrt sin cos tanh abs. Exponents are numbers
(|e| <= 8) or a single parameter. Anything else is rejected.
Reply with one JSON object and nothing else:
{"rationale": "<one or two sentences>",
 "equations": {<state>: "<right-hand side>", ...},
 "params": {<name>: {"init": <positive number>, "prior": {"loc": <log-scale mean>, "scale": <log-scale sd>}}}}"""


def build_messages(task: str, library: st.Library, current: dict, ancestors: Sequence[dict]) -> list[dict]:
  """Chat messages asking for one modification of ``current``.

  ``current`` and each ancestor are ``{"equations": [text per state],
  "score": log evidence}``.
  """
  def show(m):
    eqs = "\n".join(f"  d{s}/dt = {e}" for s, e in zip(library.states, m["equations"]))
    return f"{eqs}\n  log evidence: {m['score']:.2f}"

  lines = [task.strip(), "", f"States: {', '.join(library.states)}.", "", "Current model:", show(current)]
  if ancestors:
    lines += ["", "Its ancestors (most recent first):"] + [show(a) for a in ancestors[:3]]
  lines += ["", "Propose ONE modified model that should explain the data better while staying "
            "simple (higher log evidence). Return the JSON object only."]
  return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]


class LLMProposer:
  """Proposals ``m' ~ q_LLM(. | m, ancestors, scores)``; density unknown (``exact = False``)."""

  exact = False

  def __init__(self, client: Completer, library: st.Library, task: str, *, max_params: int = 24):
    self.client, self.library, self.task, self.max_params = client, library, task, max_params

  def propose(self, current: dict, ancestors: Sequence[dict]) -> tuple[st.Structure, str]:
    """``(structure, rationale)``; raises :class:`LLMError` on any failure.

    Whatever goes wrong while asking for, parsing, validating or building one
    proposal -- including exceptions no check foresaw (kind ``"exception"``,
    the type named in the reason) -- is this one exception type, so a sampler
    counts it as a rejected proposal and goes on.
    """
    try:
      reply = self.client.complete(build_messages(self.task, self.library, current, ancestors))
      structure, rationale, _ = parse_reply(reply, self.library, max_params=self.max_params)
    except LLMError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise LLMError("exception", f"{type(e).__name__}: {str(e)[:200]}") from e
    return structure, rationale


class RejectionCounter:
  """Rejected proposals by kind, and the summary line a run reports."""

  def __init__(self, counts: Optional[Mapping[str, int]] = None):
    self.counts = collections.Counter(dict(counts or {}))

  def add(self, error: LLMError) -> None:
    self.counts[getattr(error, "kind", "exception")] += 1

  @property
  def total(self) -> int:
    return sum(self.counts.values())

  def as_dict(self) -> dict:
    return dict(sorted(self.counts.items()))

  def summary(self, proposals: int) -> str:
    """``"3 of 5 proposals were rejected (json: 1, unsafe: 2)"``, with a warning when all were."""
    why = ", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items()))
    line = f"{self.total} of {proposals} proposals were rejected" + (f" ({why})" if why else "")
    if proposals and self.total >= proposals:
      line += "; WARNING: every proposal was rejected, so the search never left its starting models"
    return line


def describe(structure: st.Structure, library: st.Library, score: float) -> dict:
  """``{"equations", "score"}`` of a structure for a prompt."""
  return {"equations": st.equations(structure, library)[0], "score": float(score)}

