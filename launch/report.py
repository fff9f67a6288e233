r"""Regenerates the README's result blocks from real runs.

  python -m launch.report --runs=runs/report --run      # run, then rewrite README
  python -m launch.report --runs=runs/report            # rewrite from existing runs
  python -m launch.report --bench=runs/bench --only=none # the benchmark table only
  python -m launch.report --bench=runs/bench_gpu --bench_block=bench_gpu --only=none

Each entry of :data:`REPORTS` names a README block, delimited by
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``, and the experiment
config that produces it. With ``--run`` the experiment runs into
``<runs>/<NAME>`` (resuming if it is there); the block is then rewritten from
that run's ``results.json`` with the experiment's Markdown table, the exact
command that regenerates it, and the figures copied into ``docs/figures``.
"""

import json
import os
import re
import shutil

from absl import app
from absl import flags

from launch import distributed
from launch import registry
from launch import runner

# README block -> (experiment, get_config argument, figures to copy).
_VARDE_FIGURES = ("error_vs_budget", "allocation_shares")
REPORTS = {
    "varde_bai_E1": ("varde_bai", "cpu,problem=E1", _VARDE_FIGURES),
    "varde_bai_E2": ("varde_bai", "cpu,problem=E2", _VARDE_FIGURES),
    "varde_bai_E3": ("varde_bai", "cpu,problem=E3", _VARDE_FIGURES),
    "varde_bai_E4": ("varde_bai", "cpu,problem=E4", _VARDE_FIGURES),
    "varde_mcts_tree": ("varde_mcts", "cpu,envs=tree", ("regret_vs_budget", "wrong_vs_budget")),
    "varde_mcts_mdp": ("varde_mcts", "cpu,envs=mdp", ("regret_vs_budget", "wrong_vs_budget")),
    "varde_bpi": ("varde_bpi", "cpu", ("regret_vs_budget",)),
    "model_smc_exact": ("model_smc", "cpu,task=exact", ("exact_check",)),
    "model_smc_lv_sim": ("model_smc", "cpu,task=lv_sim", ("predictive_bands", "posterior_mass")),
    "model_smc_pelts": ("model_smc", "cpu,task=pelts", ("predictive_bands", "posterior_mass", "diagnostics")),
    "model_smc_flu": ("model_smc", "cpu,task=flu", ("predictive_bands", "posterior_mass")),
    "model_smc_calibration": ("model_smc_calibration", "cpu", ()),
    "model_smc_fit_panel": ("model_smc_fit_panel", "cpu", ()),
    "reg_cpu": ("reg", "cpu", ("learning_curves",)),
    "flow_matching_cpu": ("flow_matching", "cpu", ("sample_grid", "t_split_curves", "data_reduction")),
    "flow_matching_mnist5k": ("flow_matching", "smoke,dataset=mnist5k,reduction=0", ("sample_grid",)),
    "graphpfn_prior_cpu": ("graphpfn_prior", "cpu", ("statistics", "graphs")),
}

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the flags (only when run as a script: the module stays importable)."""
  flags.DEFINE_string("runs", "runs/report", "Directory of the report runs.")
  flags.DEFINE_bool("run", False, "Run (or resume) the experiments first.")
  flags.DEFINE_list("only", [], "Only these blocks.")
  flags.DEFINE_string("readme", "README.md", "README to rewrite.")
  flags.DEFINE_string("figures", "docs/figures", "Where the README's figures are copied.")
  flags.DEFINE_string("bench", None, "A `make bench` output dir: fills the `--bench_block` block.")
  flags.DEFINE_string("bench_block", "bench", "README block for `--bench`: `bench` (CPU, `make bench`) or "
                      "`bench_gpu` (a GPU machine's run).")
  flags.DEFINE_integer("cpu_devices", os.cpu_count() or 1, "CPU devices for JAX.")


def replace_block(text: str, name: str, body: str) -> str:
  """Replaces the content between the block's markers (which must exist)."""
  pattern = re.compile(
      rf"(<!-- results:{re.escape(name)} -->\n)(.*?)(<!-- /results:{re.escape(name)} -->)", re.S
  )
  if not pattern.search(text):
    raise ValueError(f"README has no block <!-- results:{name} --> ... <!-- /results:{name} -->")
  return pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(3), text)


def _update_readme(path: str, name: str, body: str) -> None:
  """Rewrites one block, re-reading the README so that concurrent edits survive."""
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write(replace_block(text, name, body))
  print(f"updated block {name}")


def main(argv):
  del argv
  distributed.setup(cpu_devices=FLAGS.cpu_devices)
  with open(FLAGS.readme) as f:
    text = f.read()
  for name in REPORTS:
    if not FLAGS.only or name in FLAGS.only:
      replace_block(text, name, "")  # a missing block fails here, before any run
  for name, (experiment_name, arg, figures) in REPORTS.items():
    if FLAGS.only and name not in FLAGS.only:
      continue
    experiment = registry.get(experiment_name)
    workdir = os.path.join(FLAGS.runs, name)
    if FLAGS.run:
      runner.run(experiment.get_config(arg), workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      results = json.load(f)
    os.makedirs(FLAGS.figures, exist_ok=True)
    links = []
    for fig in figures:
      src = os.path.join(workdir, f"{fig}.png")
      if os.path.exists(src):
        dst = os.path.join(FLAGS.figures, f"{name}_{fig}.png")
        shutil.copyfile(src, dst)
        links.append(f"![{name} {fig}]({dst})")
    cmd = (
        f"python -m launch.main --config=launch/configs/{experiment_name}.py:{arg} "
        f"--workdir=runs/{name}"
    )
    body = (
        experiment.to_markdown(results)
        + f"\n_Produced by `{cmd}` (or `python -m launch.report --run --only={name}`)._\n\n"
        + "\n".join(links)
    )
    _update_readme(FLAGS.readme, name, body)
  if FLAGS.bench:
    with open(os.path.join(FLAGS.bench, "bench.md")) as f:
      _update_readme(FLAGS.readme, FLAGS.bench_block, f.read())


if __name__ == "__main__":
  define_flags()
  app.run(main)
