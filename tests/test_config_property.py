"""Every experiment's validator, fed configs whose values come from the edges of each key's type.

Property: ``runner.validate`` either accepts the config or raises one
:class:`launch.config_schema.ConfigError` whose message is one line and names
config keys of the experiment; it never raises anything else (a TypeError, an
OverflowError, a MemoryError from a check that believed a value). Values are
drawn from the edges of each key's type -- ``1e308``, the float32 limit,
subnormals, NaN and infinities, ints past int32 and int64, wrong types,
strings where numbers are expected, empty and nested sequences -- a few keys at
a time, on top of a preset's defaults. Validation only: nothing runs, so the
module takes seconds.

A second, smaller property feeds the same kind of values as command-line
strings (``--config.KEY=VALUE``) through the launcher's own parser
(:func:`launch.main.config_from_args`): a bad value is a one-line ``FlagsError``
or ``ConfigError``, never a traceback.
"""

import copy
import math
import re

from hypothesis import HealthCheck, given, settings, strategies as st
import ml_collections
import pytest

from launch import config_schema
from launch import errors
from launch import main as launcher
from launch import registry
from launch import runner
from launch.configs import common

FLOAT_EDGES = (1e308, -1e308, 3.4028234663852886e38, 3.5e38, -3.5e38, 5e-324, -5e-324, 1e-45, 1e-40, 1.2e-38,
               0.0, -0.0, 1.5, -1.0, math.nan, math.inf, -math.inf)
INT_EDGES = (0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**32, 2**63, 10**20, -(10**20))
WRONG = ("", "x", "1.5", "nan", None, True, False, {"a": 1})

_floats = st.one_of(st.sampled_from(FLOAT_EDGES), st.floats(allow_nan=True, allow_infinity=True))
_ints = st.one_of(st.sampled_from(INT_EDGES), st.integers(min_value=-(2**70), max_value=2**70))
_scalars = st.one_of(_floats, _ints, st.sampled_from(WRONG), st.text(max_size=8))


def _edge_values(reference):
  """Values at the edges of ``reference``'s type, and values of every other type."""
  if isinstance(reference, bool):
    return st.one_of(st.booleans(), _scalars)
  if isinstance(reference, (int, float)):
    return st.one_of(_floats, _ints, st.sampled_from(WRONG), st.text(max_size=8))
  if isinstance(reference, (tuple, list)):
    return st.one_of(st.lists(_scalars, max_size=3).map(tuple), st.just(()), _scalars,
                     st.lists(st.lists(_ints, max_size=2).map(tuple), min_size=1, max_size=2).map(tuple))
  return st.one_of(st.text(max_size=12), _scalars)


def _leaves(config) -> list[str]:
  return sorted(k for k, v in config_schema.flatten(config).items()
                if v is not config_schema._SUBTREE and k != "experiment")  # pylint: disable=protected-access


def _set(config: ml_collections.ConfigDict, key: str, value) -> None:
  *path, last = key.split(".")
  node = config
  for part in path:
    node = node[part]
  with config.ignore_type():
    node[last] = value


_KEY = re.compile(r"^'([^']+)'|^(?:unknown|missing) key '([^']+)'")


def _check_error(error: config_schema.ConfigError, config) -> None:
  """The launcher prints one line, and each problem begins with a config key of the experiment."""
  line = errors.one_line(error)
  assert "\n" not in line and line.startswith("invalid config: "), line
  keys = set(config_schema.flatten(config))
  for problem in error.problems:
    m = _KEY.match(problem)
    assert m, f"problem names no key: {problem!r}"
    key = re.sub(r"\[\d+\]$", "", m[1] or m[2])  # 'library[6]': an element of a sequence key
    assert key in keys, f"{key!r} is not a key of {config.experiment}: {problem!r}"


def _ranges(constraint):
  """The :class:`Range` and :class:`OneOf` parts of a key's constraint (inside ``All`` and ``Each``)."""
  if constraint is None:
    return []
  if isinstance(constraint, (config_schema.Range, config_schema.OneOf)):
    return [constraint]
  parts = getattr(constraint, "parts", None)
  if parts is not None:
    return [r for p in parts for r in _ranges(p)]
  return _ranges(getattr(constraint, "inner", None))


def _bounds(constraint) -> list:
  """A declared range's ends and the values just past them; a declared set's members."""
  out = []
  for part in _ranges(constraint):
    if isinstance(part, config_schema.OneOf):
      out += list(part.values)
      continue
    for end in (part.lo, part.hi):
      if end is not None:
        out += [end, float(end), math.nextafter(float(end), math.inf), math.nextafter(float(end), -math.inf),
                end + 1, end - 1]
  return out


def key_edges(reference, constraint) -> list:
  """One key's edge values: its type's extremes that pass the type check, its declared bounds, and some that do not."""
  if isinstance(reference, bool):
    return [not reference, 1, "True", None]
  if isinstance(reference, int):
    valid = [0, 1, -1, 2, 2**31 - 1, -(2**31 - 1)]
    return valid + [b for b in _bounds(constraint) if isinstance(b, int)] + [2**31, 1.5, "1", None]
  if isinstance(reference, float):
    valid = [3.4028234663852886e38, -3.4028234663852886e38, 1.4e-45, -1.4e-45, 1e-30, 0.0, -0.0, 1e30, 1.0, 7]
    return valid + [b for b in _bounds(constraint) if isinstance(b, (int, float))] + [1e308, math.nan, "1.0"]
  if isinstance(reference, (tuple, list)):
    inner = key_edges(reference[0], constraint) if reference else [0, 1.5, "x"]
    return [(), *[(v,) for v in inner], (inner[0], inner[0]), tuple(reference) * 40, ((1, 2),), "x", 3]
  return ["", "x", "a" * 300, *[b for b in _bounds(constraint) if isinstance(b, str)], 0, None]


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_key_at_its_edges_is_accepted_or_named_in_one_line(name):
  """One key at a time (the smoke preset), through every edge value of its type and declared range."""
  experiment = registry.get(name)
  reference = experiment.get_config("smoke")
  constraints = experiment.schema().all_constraints()
  for key in _leaves(reference):
    for value in key_edges(config_schema.flatten(reference)[key], constraints.get(key)):
      config = copy.deepcopy(reference)
      _set(config, key, value)
      try:
        runner.validate(config)
      except config_schema.ConfigError as e:
        _check_error(e, config)
      except Exception as e:  # pylint: disable=broad-except
        pytest.fail(f"{name}: --config.{key}={value!r} raised {type(e).__name__}: {e}")


@st.composite
def _mutated(draw, name: str):
  experiment = registry.get(name)
  config = experiment.get_config(draw(st.sampled_from(common.PRESETS)))
  keys = _leaves(config)
  for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True)):
    _set(config, key, draw(_edge_values(config_schema.flatten(config)[key])))
  if draw(st.integers(0, 9)) == 0:  # now and then, a key the experiment does not have
    with config.unlocked():
      config[draw(st.sampled_from(["sede", "mdp_fil", "budget"]))] = draw(_scalars)
  return config


_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize("name", registry.NAMES)
def test_random_configs_are_accepted_or_named_in_one_line(name):
  """A few keys at a time, any preset, values from the edges of each key's type and of every other type."""
  examples = 30

  @settings(max_examples=examples, **_SETTINGS)
  @given(_mutated(name))
  def prop(config):
    try:
      runner.validate(config)
    except config_schema.ConfigError as e:
      _check_error(e, config)

  prop()


def _cli_value(value) -> str:
  if isinstance(value, tuple):
    return "(" + ",".join(repr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
  return str(value)


@pytest.mark.parametrize("name", registry.NAMES)
def test_command_line_values_at_the_edges_give_one_line(name, repo_root, monkeypatch):
  monkeypatch.chdir(repo_root)
  reference = registry.get(name).get_config("smoke")
  keys = _leaves(reference)
  path = f"launch/configs/{name}.py:smoke"

  @settings(max_examples=10, **_SETTINGS)
  @given(st.sampled_from(keys), st.one_of(_scalars, st.lists(_scalars, max_size=2).map(tuple)))
  def prop(key, value):
    args = [f"--config={path}", f"--config.{key}={_cli_value(value)}"]
    try:
      config = launcher.config_from_args(args)
    except launcher.FlagsError as e:
      assert "\n" not in str(e).split("\nPass --helpshort")[0], str(e)
      return
    try:
      runner.validate(config)
    except config_schema.ConfigError as e:
      _check_error(e, config)

  prop()
