"""Hostile LLM replies and expressions: every failure of one proposal is one named rejection.

Before the hardening, a reply with ``1/0``, JSON nested 5,000 deep or a
401-digit integer crashed the run with ZeroDivisionError, RecursionError or
OverflowError; a library body folding to a division by zero raised
ZeroDivisionError once compilation had started.
"""

import io
import json
import urllib.request

import jax.numpy as jnp
import numpy as np
import pytest

from launch import errors
from launch import llm_client
from methods.model_smc import expr as ex
from methods.model_smc import interpret
from methods.model_smc import llm
from methods.model_smc import structure as st

STATES = ("x", "v")


def _library():
  return st.Library(STATES, ("a*x", "a*v"))


def _reply(**fields) -> str:
  return json.dumps({"rationale": "r", "equations": {"x": "a*v", "v": "-b*x"}, **fields})


HOSTILE = {
    "division by zero": _reply(equations={"x": "a*v + 1/0", "v": "-b*x"}),
    "folded division by zero": _reply(equations={"x": "a*v", "v": "-b*x*(1/(2 - 2))"}),
    "json nested 5,000 deep": '{"equations": ' + "[" * 5000 + "]" * 5000 + "}",
    "object nested 5,000 deep": '{"a": ' * 5000 + "1" + "}" * 5000,
    "401-digit init": _reply(params={"a": {"init": int("9" * 401)}}),
    "401-digit prior": _reply(params={"a": {"prior": {"loc": int("9" * 401), "scale": 1}}}),
    "5,000-digit integer": '{"equations": {"x": "a*v", "v": "-b*x"}, "n": ' + "7" * 5000 + "}",
    "401-digit constant": _reply(equations={"x": "a*v*" + "9" * 401, "v": "-b*x"}),
    "exp overflow constant": _reply(equations={"x": "a*v*exp(1000000)", "v": "-b*x"}),
    "log of zero constant": _reply(equations={"x": "a*v + log(0)", "v": "-b*x"}),
    "equations not strings": _reply(equations={"x": ["a"], "v": 3}),
    "huge reply": "{" + " " * (2 << 20) + "}",
    "lone surrogate": '{"equations": {"x": "a*\\ud800v", "v": "-b*x"}}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_reply_is_one_llm_error(name):
  with pytest.raises(llm.LLMError) as e:
    llm.parse_reply(HOSTILE[name], _library(), max_params=8)
  assert e.value.kind in llm.ERROR_KINDS and e.value.reason


class _Scripted:
  def __init__(self, replies):
    self.replies = list(replies)

  def complete(self, messages):
    del messages
    reply = self.replies.pop(0)
    if isinstance(reply, BaseException):
      raise reply
    return reply


def test_the_proposer_turns_every_failure_into_a_rejection():
  """Anything raised while asking, parsing, validating or building a proposal is an LLMError."""
  replies = [HOSTILE[k] for k in sorted(HOSTILE)] + [ZeroDivisionError("x"), RecursionError(), KeyError("k")]
  proposer = llm.LLMProposer(_Scripted(replies), _library(), "task", max_params=8)
  current = {"equations": ["a*v", "-b*x"], "score": 0.0}
  kinds = []
  for _ in replies:
    with pytest.raises(llm.LLMError) as e:
      proposer.propose(current, [])
    kinds.append(e.value.kind)
  assert set(kinds) <= set(llm.ERROR_KINDS)
  # A good reply still goes through.
  structure, _ = llm.LLMProposer(_Scripted([_reply()]), _library(), "task").propose(current, [])
  assert structure.num_terms() == 2


def test_reject_counter_reports_reasons_and_warns_when_all_are_rejected():
  counts = llm.RejectionCounter()
  counts.add(llm.LLMError("json", "bad"))
  counts.add(llm.LLMError("unsafe", "1/0"))
  counts.add(llm.LLMError("unsafe", "1/0"))
  assert counts.as_dict() == {"json": 1, "unsafe": 2} and counts.total == 3
  assert "3 of 5 proposals were rejected (json: 1, unsafe: 2)" in counts.summary(5)
  assert "WARNING: every proposal was rejected" in counts.summary(3)
  assert counts.summary(4).count("\n") == 0


@pytest.mark.parametrize("body", [b"[" * 5000 + b"]" * 5000, b'{"choices": ' + b"1" * 5000 + b"}",
                                  b'{"choices": [{"message": {"content": 1e999}}]}'])
def test_client_turns_a_hostile_envelope_into_an_llm_error(monkeypatch, body):
  class _Response(io.BytesIO):
    def __enter__(self):
      return self

    def __exit__(self, *args):
      return False

  monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: _Response(body))
  client = llm_client.ChatClient("http://127.0.0.1:1/v1", "m")
  with pytest.raises(llm.LLMError):
    client.complete([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("text", ["a + 1/0", "a*x/(2 - 2)", "a + 1/(0*3)", "x*(1/-(1 - 1))"])
def test_a_body_folding_to_a_division_by_zero_is_refused_by_the_parser(text):
  with pytest.raises(ex.UnsafeExpression, match="division by zero"):
    ex.parse(text, states=STATES)
  with pytest.raises(ex.UnsafeExpression, match="division by zero"):
    st.Library(STATES, ("a*x", text))


@pytest.mark.parametrize("text", ["exp(1000000)*a", "a + log(0)", "a*sqrt(-1)", "a*(1e6^8)^8"])
def test_a_constant_that_folds_to_a_non_finite_number_is_refused(text):
  with pytest.raises(ex.UnsafeExpression, match="not finite"):
    ex.parse(text, states=STATES)


def test_constants_that_fold_fine_still_parse_and_compile():
  for text in ("a*x/(2 - 1)", "a*x*exp(1)", "a + 1/x", "a*x/(x - x)", "x/0.5"):
    e = ex.parse(text, states=STATES)
    params = ex.params_of(e)
    fn = interpret.compile_expr(e, states=STATES, params=params)
    value = fn(jnp.asarray([1.0, 2.0]), jnp.ones(len(params)), 0.0)
    assert np.shape(value) == ()


def test_unsafe_expressions_are_user_errors():
  assert issubclass(ex.UnsafeExpression, errors.user_error_types())
