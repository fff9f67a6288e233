"""A proposal whose fit raises is one counted rejection; the search goes on; the summary says so."""

import jax
import numpy as np

from launch.experiments import model_smc_report as report
from methods.model_smc import reference
from methods.model_smc import structure as st


class _Evaluator:
  """Scores a structure by its number of terms; fitting a structure with body 1 raises."""

  def __init__(self):
    self.library = st.Library(("x",), ("a*x", "a", "a*x^2"))

  def evaluate(self, structures):
    if any(k == 1 for m in structures for k, _ in m.terms[0]):
      raise FloatingPointError("the integrator overflowed")
    return np.array([float(len(m.terms[0])) for m in structures])


def test_a_fit_that_raises_is_a_counted_rejection_and_the_climb_goes_on():
  plan = iter([[(0, 1), (1, 1)], [(0, 1), (2, 1)], [(0, 1), (1, 1), (2, 1)]])

  def propose(m, u, context):
    del m, u, context
    return st.Structure.make([next(plan)])

  start = st.Structure.make([[(0, 1)]])
  res = reference.hill_climb(jax.random.key(0), _Evaluator(), propose, budget=4, start=start, chunk=1)
  assert res.rejections == {"fit": 2}
  assert res.structure == st.Structure.make([[(0, 1), (2, 1)]]) and res.log_evidence == 2.0
  assert res.proposals == 4


def test_the_summary_reports_rejections_and_warns_when_all_were_rejected():
  results = {"proposal": "llm", "smc": {"proposals": 5, "rejections": {"json": 1, "unsafe": 2}},
             "hill_climb": {"proposals": 3, "rejections": {"unsafe": 3}}}
  lines = report.rejection_lines(results)
  assert lines[0] == "ModelSMC: 3 of 5 proposals were rejected (json: 1, unsafe: 2)"
  assert lines[1].startswith("hill climbing: 3 of 3 proposals were rejected (unsafe: 3); WARNING")
  assert report.rejection_lines({"proposal": "grammar", "smc": {"proposals": 5, "rejections": {}}}) == []
