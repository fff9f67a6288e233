"""Hostile LLM replies and expressions: every failure of one proposal is one named rejection.

Before the hardening, a reply with ``1/0``, JSON nested 5,000 deep or a
401-digit integer crashed the run with ZeroDivisionError, RecursionError or
OverflowError; a library body folding to a division by zero raised
ZeroDivisionError once compilation had started.
"""

import http.server
import json
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from launch import errors
from launch import llm_client
from launch import runner
from launch.configs import model_smc as smc_config
from launch.experiments.model_smc import intervals as intervals_lib
from launch.experiments.model_smc import report
import model_smc_problems as mp
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


class _Server:
  """A local chat-completions endpoint: ``handler(request_handler)`` writes each reply (a thread per request)."""

  def __init__(self, handler):
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_POST(self):  # noqa: N802 (the standard library's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
          handler(self)
        except OSError:  # the client hung up (its deadline)
          outer.hung_up += 1

      def log_message(self, *args):
        del args

    self.hung_up = 0
    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.httpd.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
    threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

  def __enter__(self):
    return self

  def __exit__(self, *args):
    self.httpd.shutdown()
    self.httpd.server_close()


def _send(body: bytes, status: int = 200):
  def handler(h):
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
  return handler


def _completion(content: str) -> bytes:
  return json.dumps({"choices": [{"message": {"content": content}}]}).encode()


@pytest.mark.parametrize("body", [b"[" * 5000 + b"]" * 5000, b'{"choices": ' + b"1" * 5000 + b"}",
                                  b'{"choices": [{"message": {"content": 1e999}}]}'])
def test_client_turns_a_hostile_envelope_into_an_llm_error(body):
  with _Server(_send(body)) as server:
    client = llm_client.ChatClient(server.url, "m", timeout_s=30.0)
    with pytest.raises(llm.LLMError):
      client.complete([{"role": "user", "content": "hi"}])


def test_a_good_reply_and_an_http_error_through_a_local_endpoint():
  with _Server(_send(_completion(_reply()))) as server:
    assert json.loads(llm_client.ChatClient(server.url, "m", timeout_s=30.0).complete([]))["equations"]
  with _Server(_send(b"overloaded", status=503)) as server:
    with pytest.raises(llm.LLMError, match="HTTP 503 .*overloaded") as e:
      llm_client.ChatClient(server.url, "m", timeout_s=30.0).complete([])
    assert e.value.kind == "http"


def test_the_timeout_is_a_deadline_for_the_whole_request_not_for_each_read():
  """A valid reply that trickles in one byte at a time must stop at the deadline, not arrive whole.

  The reply takes 50 x 0.1 s = 5 s to send and every single read returns
  within 0.1 s, so a per-read timeout of 1 s would wait for it and return
  its content; the request's deadline of 1 s ends it with a timeout.
  """
  body = _completion(_reply())
  pause = 0.1
  slow = body[:50]

  def trickle(h):
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    for byte in slow:
      h.wfile.write(bytes([byte]))
      h.wfile.flush()
      time.sleep(pause)
    h.wfile.write(body[len(slow):])

  with _Server(trickle) as server:
    client = llm_client.ChatClient(server.url, "m", timeout_s=1.0)
    with pytest.raises(llm.LLMError) as e:
      client.complete([{"role": "user", "content": "hi"}])
  assert e.value.kind == "timeout" and "within 1 s" in e.value.reason


def test_a_server_that_never_answers_is_a_timeout():
  gate = threading.Event()
  with _Server(lambda h: gate.wait(30)) as server:
    with pytest.raises(llm.LLMError) as e:
      llm_client.ChatClient(server.url, "m", timeout_s=0.5).complete([])
    gate.set()
  assert e.value.kind == "timeout"


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


# ----------------------------------------------------------------------------
# A reply with a term outside the library: the library grows, and every structure fitted before the growth
# stays scorable (its fit is moved to the larger layout), so the run finishes.


@pytest.mark.slow  # compiles the fit for two libraries, the predictive draws and a refit
def test_structures_fitted_before_the_library_grew_are_scored_in_the_new_layout():
  problem = mp.oscillator()
  ev = mp.evaluator(problem, batch_size=2)
  old = st.from_equations({"x": "a*v", "v": "-b*x"}, ev.library)
  ev.evaluate([old])
  phi_before, h_before = ev.phi(old), ev.neg_hessian(old)
  reply = _reply(equations={"x": "a*v", "v": "-b*x/(1 + c*x^2)"})
  new, _, _ = llm.parse_reply(reply, ev.library, max_params=8)
  assert len(ev.library) == 3  # the reply's body joined the library
  ev.evaluate([new])
  d = ev.layout().dim
  assert ev.phi(old).shape == (d,) and ev.neg_hessian(old).shape == (d, d) and d > len(phi_before)
  idx = ev.layout().embed_index(ev.layout(2))
  np.testing.assert_array_equal(ev.phi(old)[idx], phi_before)
  np.testing.assert_array_equal(ev.neg_hessian(old)[np.ix_(idx, idx)], h_before)
  kw = dict(num_samples=8, num_fit=8, num_points=12)
  scores = report.predictive_scores(jax.random.key(0), ev, [old, new], [0.5, 0.5], **kw)
  assert np.isfinite(float(scores["heldout_lpd"]))
  table = intervals_lib.ParameterIntervals(ev).table(old)
  assert set(table) == {"p1", "p2", "sigma_x", "sigma_v"}
  # After a resume the Hessian is not in memory: it is refitted in the library the record was fitted in.
  ev.hessians.clear()
  np.testing.assert_allclose(ev.neg_hessian(old)[np.ix_(idx, idx)], h_before, rtol=1e-5, atol=1e-5)


ISSUE_REPLIES = (  # the issue's replies, each with a term outside the pelts' library
    {"hare": "a*hare/(1 + lynx)", "lynx": "b*hare*lynx - c*lynx"},
    {"hare": "a*hare/(lynx - lynx)", "lynx": "b*hare*lynx - c*lynx"},
)


@pytest.mark.slow
def test_an_llm_run_whose_replies_grow_the_library_finishes(tmp_path):
  """No ``TypeError: mul got incompatible shapes for broadcasting`` in the predictive draws: the run has results.

  The replies add ``c0*hare/(1 + lynx)`` and ``c0*hare/(lynx - lynx)`` (the
  second fails every fit: a counted failed fit, never a particle with mass)
  to the library after the first structures were fitted.
  """
  calls = []

  def reply(h):
    eqs = ISSUE_REPLIES[len(calls) % len(ISSUE_REPLIES)]
    calls.append(eqs)
    _send(_completion(json.dumps({"rationale": "r", "equations": eqs})))(h)

  config = smc_config.get_config("smoke,task=pelts")
  config.algorithm, config.proposal = "evidence_weighted", "llm"
  config.baselines = ("hill_climb",)
  with _Server(reply) as server:
    config.llm.base_url, config.llm.model, config.llm.timeout_s = server.url, "scripted", 30.0
    results = runner.run(config, str(tmp_path / "llm"))
  assert calls and os.path.exists(tmp_path / "llm" / "results.json")
  assert "c0*hare/(1 + lynx)" in results["library"] and len(results["library"]) > 6
  assert results["smc"]["top"] and all(np.isfinite(float(r["log_evidence"])) for r in results["smc"]["top"])
  assert "ModelSMC (posterior mixture)" in results["comparison"]
