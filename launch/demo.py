r"""``make demo``: each method's headline experiment at a small scale, tables printed.

  python -m launch.demo --workdir=runs/demo            # the demos, under 10 minutes on 2 cores
  python -m launch.demo --workdir=runs/demo --all      # and the extras
  python -m launch.demo --workdir=runs/demo --preset=smoke --only=varde_bai

Each demo runs in ``<workdir>/<experiment>``, which is cleared first (the
demo's own scratch space); its table is printed and its figures are left there.
With ``--jobs`` above 1 (the default is 2) the demos run that many at a time,
each in a process of its own, and each one's tables are printed when it ends,
its log kept in ``<workdir>/<experiment>.log``: most of a demo's time is XLA
compilation, which keeps one core busy, so two demos at once use both cores of
a 2-core machine. ``--jobs=1`` runs them one after another in this process,
with their logs on the terminal.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Sequence

from absl import app
from absl import flags
import ml_collections

from launch import distributed
from launch import registry
from launch import runner

# (experiment, get_config argument, config overrides), the longest first: with two at a time
# (``--jobs``) the others share the cores with ModelSMC's and flow matching's runs. The overrides
# keep ``make demo`` under 10 minutes on 2 cores, installation included, where most of a
# demo's time is compilation: VarDE's sweep at three of the preset's five budgets (each budget
# compiles every algorithm), the tree search with VarDE, UCT and mctx's Gumbel and Stochastic
# MuZero (not MENTS, Power-UCT or plain MuZero), and REG with its baselines but without the
# OPG ablations. The docs pages have the full tables.
DEMOS = (
    ("model_smc", "cpu,task=pelts,runs=2", {}),
    ("flow_matching", "smoke", {}),
    ("reg", "cpu,tasks=pendulum,kinds=medium", {"algorithms": ("iql", "reg", "reg_opg", "td3bc", "bc")}),
    ("varde_mcts", "smoke,envs=tree", {"policies": ("varde", "uct", "mctx_gumbel", "mctx_stochastic")}),
    ("varde_bai", "cpu,problem=E1", {"budgets": (50, 150, 400)}),
    ("varde_bpi", "smoke", {}),
    ("varde_2048", "smoke", {}),
    ("graphpfn_prior", "smoke,probe_graphs=0,panel_graphs=0", {}),
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
  flags.DEFINE_integer("jobs", 2, "Demos run at once, each in a process of its own (1: in turn, in this process).",
                       lower_bound=1)


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


def run_parallel(commands: Sequence[tuple[str, list[str]]], jobs: int, log_dir: str) -> list[str]:
  """Runs ``(name, command)`` pairs, ``jobs`` at a time, in the order given; returns the names that failed.

  Each command's standard error goes to ``<log_dir>/<name>.log``; its
  standard output is printed whole when it ends (in the order they end), then
  a line with its outcome and time (a failure with the end of its log). On an
  interrupt the commands still running are terminated.
  """
  os.makedirs(log_dir, exist_ok=True)
  pending, running, failed = list(commands), {}, []
  try:
    while pending or running:
      while pending and len(running) < jobs:
        name, command = pending.pop(0)
        log = os.path.join(log_dir, f"{name}.log")
        out, err = tempfile.TemporaryFile(), open(log, "wb")  # pylint: disable=consider-using-with
        running[name] = (subprocess.Popen(command, stdout=out, stderr=err), out, err, time.monotonic())
        print(f"[demo] {name}: started (its log: {log})", flush=True)
      time.sleep(0.2)
      for name, (proc, out, err, start) in list(running.items()):
        if proc.poll() is None:
          continue
        del running[name]
        err.close()
        out.seek(0)
        sys.stdout.write(out.read().decode(errors="replace"))
        out.close()
        outcome = "done" if proc.returncode == 0 else f"FAILED (exit code {proc.returncode})"
        print(f"[demo] {name}: {outcome} in {time.monotonic() - start:.0f} s", flush=True)
        if proc.returncode:
          failed.append(name)
          with open(err.name, errors="replace") as f:
            print("".join(f.readlines()[-20:]), end="", flush=True)
  finally:
    for proc, *_ in running.values():
      proc.terminate()
  return failed


def _command(name: str) -> list[str]:
  """This script, for the one demo ``name``, with this run's flags."""
  return [sys.executable, "-m", "launch.demo", f"--workdir={FLAGS.workdir}", f"--only={name}", "--jobs=1",
          f"--cpu_devices={FLAGS.cpu_devices}"] + ([f"--preset={FLAGS.preset}"] if FLAGS.preset else [])


def main(argv):
  del argv
  unknown = set(FLAGS.only) - {entry[0] for entry in DEMOS + EXTRAS}
  if unknown:
    raise app.UsageError(f"--only {sorted(unknown)}: demos are {[entry[0] for entry in DEMOS]}, "
                         f"extras {[entry[0] for entry in EXTRAS]}")
  if FLAGS.only:
    chosen = [entry for entry in DEMOS + EXTRAS if entry[0] in FLAGS.only]
  else:
    chosen = DEMOS + EXTRAS if FLAGS.all else DEMOS
  if FLAGS.jobs > 1 and len(chosen) > 1:
    start = time.monotonic()
    failed = run_parallel([(name, _command(name)) for name, *_ in chosen], FLAGS.jobs, FLAGS.workdir)
    print(f"\n[demo] {len(chosen) - len(failed)} of {len(chosen)} demos ran in {time.monotonic() - start:.0f} s, "
          f"{FLAGS.jobs} at a time" + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    sys.exit(1 if failed else 0)
  distributed.setup(cpu_devices=FLAGS.cpu_devices)
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
