"""The LLM proposer and its HTTP client (``launch.llm_client``) against a local OpenAI-compatible server on 127.0.0.1."""

import http.server
import json
import os
import threading
import time

import jax
import pytest

from envs import ode_systems
from launch import llm_client
from launch import runner
from launch.configs import model_smc as smc_config
import model_smc_problems as tp
from methods.model_smc import llm
from methods.model_smc import reference
from methods.model_smc import structure as st


class _Handler(http.server.BaseHTTPRequestHandler):
  replies: list = []  # each: (status, body text, delay seconds)
  requests: list = []

  def do_POST(self):  # noqa: N802 (http.server API)
    length = int(self.headers.get("Content-Length", 0))
    _Handler.requests.append({"path": self.path, "headers": dict(self.headers),
                              "body": json.loads(self.rfile.read(length))})
    status, body, delay = _Handler.replies.pop(0) if _Handler.replies else (200, _chat('{"equations": {}}'), 0)
    if delay:
      time.sleep(delay)
    try:
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.end_headers()
      self.wfile.write(body.encode())
    except (BrokenPipeError, ConnectionResetError):
      pass

  def log_message(self, *args):
    del args


def _chat(content: str) -> str:
  return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})


@pytest.fixture
def server():
  _Handler.replies, _Handler.requests = [], []
  srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
  thread = threading.Thread(target=srv.serve_forever, daemon=True)
  thread.start()
  yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
  srv.shutdown()
  srv.server_close()


GOOD = json.dumps({"rationale": "damped oscillator",
                   "equations": {"x": "k*v", "v": "-w*x - c*v"},
                   "params": {"k": {"init": 1.0, "prior": {"loc": 0.0, "scale": 1.0}}}})


def _proposer(url, timeout_s=2.0):
  lib = st.Library(("x", "v"), ["a*x", "a*v"])
  client = llm_client.ChatClient.from_config(llm_client.LLMConfig(base_url=url, model="test-model", timeout_s=timeout_s),
                                      env={"OPENAI_API_KEY": "sk-test"})
  return llm.LLMProposer(client, lib, "Simulated oscillator data."), lib


def _current(lib):
  return llm.describe(st.from_equations({"x": "a*v", "v": "-b*x"}, lib), lib, -12.5)


def test_valid_reply_becomes_a_structure(server):
  _Handler.replies = [(200, _chat("Here you go:\n```json\n" + GOOD + "\n```"), 0)]
  proposer, lib = _proposer(server)
  m, rationale = proposer.propose(_current(lib), [])
  assert st.key(m, lib) == "dx/dt = +[c0*v]; dv/dt = -[c0*v] -[c0*x]"
  assert rationale == "damped oscillator"
  req = _Handler.requests[0]
  assert req["path"] == "/v1/chat/completions"
  assert req["headers"]["Authorization"] == "Bearer sk-test"
  assert req["body"]["model"] == "test-model"
  assert "dx/dt = p1*v" in req["body"]["messages"][1]["content"]


@pytest.mark.parametrize("reply,kind", [
    ((200, _chat("not json at all"), 0), "json"),
    ((200, _chat('{"equations": {"x": "k*v", "v": '), 0), "json"),
    ((200, _chat('{"equations": ["k*v"]}'), 0), "schema"),
    ((200, _chat('{"equations": {"x": "k*v"}}'), 0), "invalid"),
    ((200, _chat('{"equations": {"x": "k*v", "v": "-w*x"}, "params": {"k": {"init": -1}}}'), 0), "schema"),
    ((200, _chat(json.dumps({"equations": {"x": "__import__('os').system('touch pwned')", "v": "x"}})), 0), "unsafe"),
    ((200, _chat(json.dumps({"equations": {"x": "v.__class__", "v": "x"}})), 0), "unsafe"),
    ((200, _chat(json.dumps({"equations": {"x": "9**9**9", "v": "x"}})), 0), "unsafe"),
    ((200, "<html>oops</html>", 0), "json"),
    ((200, json.dumps({"result": "no choices"}), 0), "schema"),
    ((500, json.dumps({"error": "overloaded"}), 0), "http"),
    ((429, json.dumps({"error": "rate limit"}), 0), "http"),
    ((200, _chat(GOOD), 2.0), "timeout"),
])
def test_failures_are_rejections_with_a_reason(server, reply, kind, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  _Handler.replies = [reply]
  proposer, lib = _proposer(server, timeout_s=0.5)
  with pytest.raises(llm.LLMError) as info:
    proposer.propose(_current(lib), [])
  assert info.value.kind == kind and info.value.reason
  assert not os.path.exists("pwned")


def test_unreachable_endpoint_and_missing_config():
  with pytest.raises(llm.LLMError) as info:
    llm_client.ChatClient("http://127.0.0.1:9/v1", "m", timeout_s=0.5).complete([{"role": "user", "content": "x"}])
  assert info.value.kind in ("network", "timeout")
  with pytest.raises(llm.LLMError, match="base URL"):
    llm_client.ChatClient.from_config(llm_client.LLMConfig(), env={})
  with pytest.raises(llm.LLMError, match="http"):
    llm_client.ChatClient("file:///etc/passwd", "m")


@pytest.mark.slow
def test_evidence_weighted_run_goes_on_through_failures(server):
  """The reference scheme with the LLM proposer: failures are logged and counted, the run continues."""
  problem = tp.oscillator()
  lib = problem.library
  evaluator = tp.evaluator(problem)
  client = llm_client.ChatClient(server, "test-model", timeout_s=0.5)
  propose = reference.llm_proposer(llm.LLMProposer(client, lib, ode_systems.DAMPED_OSCILLATOR.description))
  good2 = json.dumps({"equations": {"x": "k*v - e*x", "v": "-w*x"}})
  _Handler.replies = [(200, _chat(GOOD), 0), (500, "{}", 0), (200, _chat("garbage"), 0),
                      (200, _chat(json.dumps({"equations": {"x": "lambda: 1", "v": "x"}})), 0),
                      (200, _chat(good2), 0)] * 4
  cfg = reference.ReferenceConfig(num_particles=4, alpha=0.0, iterations=2)
  start = st.from_equations({"x": "a*v", "v": "-b*x"}, lib)
  state = reference.run_reference(jax.random.key(0), evaluator, propose, cfg, prior=problem.prior, start=start)
  assert state.iteration == 2 and state.proposals == 1 + 8
  # Replies 1-8: good, 500, garbage, lambda, good2, good, 500, garbage.
  assert state.rejections == {"http": 2, "json": 2, "unsafe": 1}
  keys = {evaluator.key(m) for m in state.particles}
  assert keys <= {"dx/dt = +[c0*v]; dv/dt = -[c0*v] -[c0*x]", "dx/dt = +[c0*v] -[c0*x]; dv/dt = -[c0*x]",
                  "dx/dt = +[c0*v]; dv/dt = -[c0*x]"}
  assert len(_Handler.requests) == 8
  # Ancestors reach the prompt of the second generation.
  assert any("ancestors" in r["body"]["messages"][1]["content"] for r in _Handler.requests[4:])


@pytest.mark.slow
def test_launcher_runs_the_llm_proposer_from_the_config(server, tmp_path, monkeypatch):
  """``proposal=llm`` end to end: endpoint from the config, key from the environment."""
  monkeypatch.setenv("MODEL_SMC_TEST_KEY", "sk-env")
  config = smc_config.get_config("smoke,task=pelts")
  config.algorithm = "evidence_weighted"
  config.proposal = "llm"
  config.llm.base_url = server
  config.llm.model = "test-model"
  config.llm.api_key_env = "MODEL_SMC_TEST_KEY"
  config.llm.timeout_s = 2.0
  config.reference.num_particles = 3
  config.reference.iterations = 2
  config.reference.alpha = 0.0
  config.baselines = ("hill_climb",)
  lv = json.dumps({"rationale": "predator-prey", "equations": {"hare": "a*hare - b*hare*lynx",
                                                                "lynx": "c*hare*lynx - d*lynx"}})
  _Handler.replies = [(200, _chat(lv), 0), (200, _chat("{oops"), 0)] * 10
  results = runner.run(config, str(tmp_path / "llm"))
  assert results["algorithm"] == "evidence_weighted" and results["proposal"] == "llm"
  assert results["smc"]["rejections"].get("json", 0) >= 1
  assert results["smc"]["proposals"] == 3 + 6
  assert all(r["headers"]["Authorization"] == "Bearer sk-env" for r in _Handler.requests)
  lv_key = "dhare/dt = +[c0*hare] -[c0*hare*lynx]; dlynx/dt = +[c0*hare*lynx] -[c0*lynx]"
  assert lv_key in [row["key"] for row in results["smc"]["top"]]
  assert results["hill_climb"]["proposals"] == results["smc"]["proposals"]
