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

from launch import distributed
from launch import registry
from launch import runner

# (experiment, get_config argument) in the order they run.
DEMOS = (
    ("varde_bai", "cpu,problem=E1"),
    ("varde_mcts", "smoke,envs=tree"),
    ("varde_bpi", "smoke"),
    ("varde_2048", "smoke"),
    ("model_smc", "cpu,task=pelts,runs=2"),
    ("reg", "cpu,tasks=pendulum,kinds=medium"),
    ("graphpfn_prior", "smoke,probe_graphs=0,panel_graphs=0"),
    ("flow_matching", "smoke"),
)
# Run with --all or when named in --only, after the demos: each adds 15 seconds to a minute,
# which would take ``make demo`` past 10 minutes on 2 cores. The tree-search backups and
# ModelSMC's fit and calibration checks have their own tables in the docs; the GraphPFN network
# needs far more pretraining steps than a demo has before it predicts better than the per-graph
# baselines.
EXTRAS = (
    ("varde_backups", "smoke"),
    ("model_smc_fit_panel", "smoke"),
    ("model_smc_calibration", "smoke"),
    ("graphpfn", "smoke,eval_graphs=8"),
)

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the flags (only when run as a script: the module stays importable)."""
  flags.DEFINE_string("workdir", "runs/demo", "Where the demo runs go.")
  flags.DEFINE_string("preset", None, "Override every demo's preset (e.g. smoke).")
  flags.DEFINE_list("only", [], "Run only these experiments (demos or extras).")
  flags.DEFINE_bool("all", False, "Run the extras after the demos.")
  flags.DEFINE_integer("cpu_devices", os.cpu_count() or 1, "CPU devices to expose.")


def main(argv):
  del argv
  distributed.setup(cpu_devices=FLAGS.cpu_devices)
  unknown = set(FLAGS.only) - {name for name, _ in DEMOS + EXTRAS}
  if unknown:
    raise app.UsageError(f"--only {sorted(unknown)}: demos are {[n for n, _ in DEMOS]}, "
                         f"extras {[n for n, _ in EXTRAS]}")
  if FLAGS.only:
    chosen = [(name, arg) for name, arg in DEMOS + EXTRAS if name in FLAGS.only]
  else:
    chosen = DEMOS + EXTRAS if FLAGS.all else DEMOS
  for name, arg in chosen:
    if FLAGS.preset:
      arg = ",".join([FLAGS.preset] + [t for t in arg.split(",") if "=" in t])
    experiment = registry.get(name)
    config = experiment.get_config(arg)
    workdir = os.path.join(FLAGS.workdir, name)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n=== {name} ({arg}) -> {workdir}", flush=True)
    results = runner.run(config, workdir, log_summary=False)
    print(experiment.summary(results), flush=True)
    print(f"figures and results.json in {workdir}", flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
