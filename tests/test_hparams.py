"""One declaration per hyperparameter: the dataclass drives config, validation and overrides."""

import dataclasses
import math
import sys
import textwrap

from absl import flags
from ml_collections import config_flags
import numpy as np
import pytest

from launch import checkpoint as ckpt_lib
from launch import config_schema as cs
from launch.configs import common
from launch.experiments.model_smc import sampler as model_smc_sampler
from methods.common import hparams

F = hparams.field


@dataclasses.dataclass(frozen=True)
class Toy(hparams.Hyperparameters):
  width: int = F(8, "Hidden width.", low=1)
  rate: float = F(0.1, "Learning rate.", low=0, low_open=True)
  kind: str = F("a", "Kind.", choices=("a", "b"))
  sizes: tuple[int, ...] = F((1, 2), "Sizes.", low=1, nonempty=True)
  nested_lr: float = F(1e-3, "A key in a sub-group.", low=0, key="opt.lr")
  fixed: str = F("x", "Set by the experiment, not the config.", config=False)

  def checks(self):
    if self.kind == "b" and self.width < 4:
      yield "width", "kind 'b' needs width >= 4"


# The one line a contributor writes to add a hyperparameter.
@dataclasses.dataclass(frozen=True)
class ToyPlusOne(Toy):
  depth: int = F(2, "Number of layers.", low=1, high=16)


def _schema(cls, config):
  return common.declare("toy", ("toy", cls)).schema(config)


def _config(cls):
  return common.declare("toy", ("toy", cls)).defaults("cpu")


def test_config_section_is_built_from_the_declaration():
  config = _config(Toy)
  assert config.toy.width == 8 and config.toy.opt.lr == 1e-3 and config.toy.sizes == (1, 2)
  assert "fixed" not in config.toy
  hp = hparams.from_config(Toy, config.toy, fixed="y")
  assert hp == Toy(fixed="y")


def test_invalid_values_are_named_by_field_and_by_config_key():
  with pytest.raises(hparams.HparamError, match="width"):
    Toy(width=0)
  with pytest.raises(hparams.HparamError, match="kind"):
    Toy(kind="c")
  with pytest.raises(hparams.HparamError, match="rate: nan is not a finite number"):
    Toy(rate=math.nan)
  with pytest.raises(hparams.HparamError, match="sizes"):
    Toy(sizes=())
  config = _config(Toy)
  config.toy.opt.lr = -1.0
  config.toy.rate = math.inf
  with pytest.raises(cs.ConfigError) as e:
    cs.validate(config, _schema(Toy, _config(Toy)))
  assert "'toy.opt.lr'" in str(e.value) and "'toy.rate'" in str(e.value)


def test_cross_field_check_is_reported_with_the_full_key():
  config = _config(Toy)
  config.toy.kind = "b"
  config.toy.width = 2
  with pytest.raises(cs.ConfigError, match=r"'toy\.width': kind 'b' needs width >= 4"):
    cs.validate(config, _schema(Toy, _config(Toy)))


def test_a_new_hyperparameter_is_one_line_validated_and_overridable_from_the_command_line(tmp_path, monkeypatch):
  module = tmp_path / "toy_config.py"
  module.write_text(textwrap.dedent(f"""
      import sys
      sys.path.insert(0, {str(tmp_path)!r})
      from launch.configs import common
      from test_hparams import ToyPlusOne

      SECTIONS = common.declare("toy", ("toy", ToyPlusOne))

      def get_config(arg=None):
        return SECTIONS.defaults("cpu")
  """))
  (tmp_path / "test_hparams.py").write_text(open(__file__).read())

  def parse(*overrides):
    argv = ["prog", f"--config={module}", *overrides]
    monkeypatch.setattr(sys, "argv", argv)  # config_flags reads the overrides from sys.argv
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True)
    values(argv)
    return values.config

  config = parse("--config.toy.depth=5")
  assert config.toy.depth == 5
  schema = common.declare("toy", ("toy", ToyPlusOne)).schema(parse())
  cs.validate(config, schema)
  assert hparams.from_config(ToyPlusOne, config.toy).depth == 5
  with pytest.raises(cs.ConfigError, match=r"'toy\.depth': 17 is out of range; allowed: \[1, 16\]"):
    cs.validate(parse("--config.toy.depth=17"), schema)
  with pytest.raises(cs.ConfigError, match=r"unknown key 'toy\.detph'; did you mean 'depth'"):
    bad = parse()
    with bad.unlocked():
      bad.toy.detph = 3
    cs.validate(bad, schema)


def test_docs_list_every_config_key():
  rows = hparams.docs(ToyPlusOne, "toy")
  keys = [r[0] for r in rows]
  assert keys == ["toy.width", "toy.rate", "toy.kind", "toy.sizes", "toy.opt.lr", "toy.depth"]
  assert rows[-1][2] == "[1, 16]" and rows[2][2] == "one of ['a', 'b']"


def test_every_float_key_of_a_config_must_be_finite():
  config = _config(Toy)
  schema = _schema(Toy, _config(Toy))
  with config.unlocked():
    config.seed = 0
  config.toy.sizes = (1, 2)
  cs.validate(config, schema)
  config.toy.opt.lr = math.nan
  with pytest.raises(cs.ConfigError, match="'toy.opt.lr'"):
    cs.validate(config, schema)


def test_log_weights_may_be_minus_inf_but_never_nan_or_plus_inf():
  ok = model_smc_sampler.SamplerArrays.make(3, [0.0, -np.inf, -1.0], [-np.inf, 1.0, 2.0], 0.5, -np.inf)
  assert ckpt_lib.non_finite_leaves(ok) == []
  ckpt_lib.check_finite(1, {"sampler": ok})
  bad = ok._replace(log_weights=np.array([np.nan, 0.0, 0.0]))
  assert ckpt_lib.non_finite_leaves(bad) == ["log_weights"]
  bad = ok._replace(log_evidence=np.array([np.inf, 0.0, 0.0]))
  assert ckpt_lib.non_finite_leaves(bad) == ["log_evidence"]
  bad = ok._replace(beta=np.float64(-np.inf))  # beta is not declared as a log-weight
  with pytest.raises(ckpt_lib.NonFiniteError):
    ckpt_lib.check_finite(2, {"sampler": bad})
