"""The samplers' states in checkpoints: a round trip through arrays and JSON gives the state back."""

import json

import numpy as np

from methods.model_smc import codec
from methods.model_smc import reference
from methods.model_smc import smc
from methods.model_smc import structure as st


def _library():
  return st.Library(("x", "v"), ("a*x", "a*v", "a*x^3"))


def _structures(lib):
  return (st.from_equations({"x": "a*v", "v": "-b*x"}, lib),
          st.from_equations({"x": "a*v - b*x", "v": "-c*x^3"}, lib),
          st.from_equations({"x": "0", "v": "-a*v"}, lib))


def _through_json(arrays, meta):
  """What a checkpoint keeps: float64 arrays and a JSON document."""
  return {k: np.asarray(v, np.float64) for k, v in arrays.items()}, json.loads(json.dumps(meta))


def _assert_same(a, b):
  assert type(a) is type(b)
  for name, x, y in zip(a._fields, a, b):
    if isinstance(x, np.ndarray):
      np.testing.assert_array_equal(x, y, err_msg=name)
      assert y.dtype == np.float64, name
    else:
      assert x == y, name
      assert type(x) is type(y), name


def test_smc_state_round_trip():
  lib = _library()
  a, b, c = _structures(lib)
  state = smc.SMCState(
      particles=(a, b, b), log_weights=np.array([0.0, -np.inf, -1.5]), log_evidence=np.array([-3.0, -2.5, -2.5]),
      beta=0.75, log_normalizer=-4.25, iteration=7, proposals=96, elites=(b, c), sweeps=2, moves=0.875,
      final_mass=(((a, 0.25), (b, 0.75)), ((c, 1.0),)))
  arrays, meta = _through_json(*codec.encode_smc(state, lib))
  assert set(arrays) == set(codec.SMC_ARRAYS)
  _assert_same(state, codec.decode_smc(arrays, meta, lib))
  # Before the final phase: no elites, no final sweeps.
  early = state._replace(elites=None, sweeps=0, moves=0.0, final_mass=())
  _assert_same(early, codec.decode_smc(*_through_json(*codec.encode_smc(early, lib)), lib))


def test_structures_decode_into_a_library_that_lacks_their_bodies():
  lib = _library()
  m = _structures(lib)[1]
  fresh = st.Library(("x", "v"), ("a*v",))
  back = codec.decode_structure(json.loads(json.dumps(codec.encode_structure(m, lib))), fresh)
  assert st.key(back, fresh) == st.key(m, lib) and len(fresh) == 3


def test_reference_state_round_trip():
  lib = _library()
  a, b, _ = _structures(lib)
  state = reference.ReferenceState(
      particles=(a, b), log_evidence=np.array([-3.0, -np.inf]), ancestry=((0,), ()),
      history=({"equations": "dx/dt = a*v", "score": -3.0},), iteration=2, proposals=5, rejections={"json": 1})
  _assert_same(state, codec.decode_reference(*_through_json(*codec.encode_reference(state, lib)), lib))
