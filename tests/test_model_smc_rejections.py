"""A proposal whose fit raises is one counted rejection; the search goes on.

The summary's rejection lines are tested in ``tests/test_model_smc_scoring.py``.
"""

import jax
import numpy as np

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
