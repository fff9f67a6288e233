r"""``make demo``: each method's headline experiment at a small scale, tables printed.

  python -m launch.demo --workdir=runs/demo            # the demos, under 10 minutes on 2 cores
  python -m launch.demo --workdir=runs/demo --all      # and the extras
  python -m launch.demo --workdir=runs/demo --preset=smoke --only=varde_bai

Each demo runs in ``<workdir>/<experiment>``, which is cleared first (the
demo's own scratch space); its table is printed and its figures are left there.
"""

import os
import shutil

from absl import app
from absl import flags
import ml_collections

from launch import distributed
from launch import registry
from launch import runner

# (experiment, get_config argument, config overrides) in the order they run. The overrides keep
# ``make demo`` under 10 minutes on 2 cores, installation included, where most of a demo's time
# is compilation: VarDE's sweep at three of the preset's five budgets (each budget compiles
# every algorithm), the tree search with VarDE, UCT and mctx's Gumbel and Stochastic MuZero
# (not MENTS, Power-UCT or plain MuZero), and REG with its baselines but without the OPG
# ablations. The docs pages have the full tables.
DEMOS = (
    ("varde_bai", "cpu,problem=E1", {"budgets": (50, 150, 400)}),
    ("varde_mcts", "smoke,envs=tree", {"policies": ("varde", "uct", "mctx_gumbel", "mctx_stochastic")}),
    ("varde_bpi", "smoke", {}),
    ("varde_2048", "smoke", {}),
    ("model_smc", "cpu,task=pelts,runs=2", {}),
    ("reg", "cpu,tasks=pendulum,kinds=medium", {"algorithms": ("iql", "reg", "reg_opg", "td3bc", "bc")}),
    ("graphpfn_prior", "smoke,probe_graphs=0,panel_graphs=0", {}),
    ("flow_matching", "smoke", {}),
)
# Run with --all or when named in --only, after the demos: each adds 15 seconds to a minute,
# which would take ``make demo`` past 10 minutes on 2 cores. The tree-search backups and
# ModelSMC's fit and calibration checks have their own tables in the docs; the GraphPFN network
# needs far more pretraining steps than a demo has before it predicts better than the per-graph
# baselines.
EXTRAS = (
    ("varde_backups", "smoke", {}),
    ("model_smc_fit_panel", "smoke", {}),
    ("model_smc_calibration", "smoke", {}),
    ("graphpfn", "smoke,eval_graphs=8", {}),
)

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the flags (only when run as a script: the module stays importable)."""
  flags.DEFINE_string("workdir", "runs/demo", "Where the demo runs go.")
  flags.DEFINE_string("preset", None, "Override every demo's preset (e.g. smoke); drops the demos' config overrides.")
  flags.DEFINE_list("only", [], "Run only these experiments (demos or extras).")
  flags.DEFINE_bool("all", False, "Run the extras after the demos.")
  flags.DEFINE_integer("cpu_devices", os.cpu_count() or 1, "CPU devices to expose.")


def _with_preset(arg: str, preset: str) -> str:
  """``arg`` with its preset replaced by ``preset`` (its options kept)."""
  return ",".join([preset] + [t for t in arg.split(",") if "=" in t])


def demo_config(name: str, arg: str, overrides: dict, preset: str | None = None) -> ml_collections.ConfigDict:
  """The config of one demo: ``get_config(arg)`` with ``overrides`` (dotted keys; a key the config lacks is an error).

  ``preset`` replaces the demo's preset, keeps its options and drops its
  overrides (they size the demo for its own preset).
  """
  config = registry.get(name).get_config(_with_preset(arg, preset) if preset else arg)
  config.lock()
  if not preset:
    config.update_from_flattened_dict(overrides)
  return config


def describe(arg: str, overrides: dict, preset: str | None = None) -> str:
  """The demo's ``get_config`` argument and overrides as the launcher's flags (``--config.KEY=VALUE``)."""
  if preset:
    return _with_preset(arg, preset)
  return " ".join([arg] + [f"--config.{key}={value!r}".replace(" ", "") for key, value in overrides.items()])


def main(argv):
  del argv
  distributed.setup(cpu_devices=FLAGS.cpu_devices)
  unknown = set(FLAGS.only) - {entry[0] for entry in DEMOS + EXTRAS}
  if unknown:
    raise app.UsageError(f"--only {sorted(unknown)}: demos are {[entry[0] for entry in DEMOS]}, "
                         f"extras {[entry[0] for entry in EXTRAS]}")
  if FLAGS.only:
    chosen = [entry for entry in DEMOS + EXTRAS if entry[0] in FLAGS.only]
  else:
    chosen = DEMOS + EXTRAS if FLAGS.all else DEMOS
  for name, arg, overrides in chosen:
    config = demo_config(name, arg, overrides, FLAGS.preset)
    workdir = os.path.join(FLAGS.workdir, name)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n=== {name} ({describe(arg, overrides, FLAGS.preset)}) -> {workdir}", flush=True)
    results = runner.run(config, workdir, log_summary=False)
    print(registry.get(name).summary(results), flush=True)
    print(f"figures and results.json in {workdir}", flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
