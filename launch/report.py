r"""Regenerates the README's result blocks from real runs.

  python -m launch.report --runs=runs/report --run      # run, then rewrite README
  python -m launch.report --runs=runs/report            # rewrite from existing runs

Each entry of :data:`REPORTS` names a README block, delimited by
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``, and the experiment
config that produces it. With ``--run`` the experiment runs into
``<runs>/<NAME>`` (resuming if it is there); the block is then rewritten from
that run's ``results.json`` with the experiment's Markdown table, the exact
command that regenerates it, and the figures copied into ``docs/figures``.
"""

import os
import re
import shutil

from absl import app
from absl import flags

from launch import distributed

# README block -> (experiment, get_config argument, figures to copy).
REPORTS = {
    "varde_bai_E1": ("varde_bai", "cpu,problem=E1", ("error_vs_budget", "allocation_shares")),
    "reg_cpu": ("reg", "cpu", ("learning_curves",)),
}

_RUNS = flags.DEFINE_string("runs", "runs/report", "Directory of the report runs.")
_RUN = flags.DEFINE_bool("run", False, "Run (or resume) the experiments first.")
_ONLY = flags.DEFINE_list("only", [], "Only these blocks.")
_README = flags.DEFINE_string("readme", "README.md", "README to rewrite.")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", os.cpu_count() or 1, "CPU devices for JAX.")


def replace_block(text: str, name: str, body: str) -> str:
  """Replaces the content between the block's markers (which must exist)."""
  pattern = re.compile(
      rf"(<!-- results:{re.escape(name)} -->\n)(.*?)(<!-- /results:{re.escape(name)} -->)", re.S
  )
  if not pattern.search(text):
    raise ValueError(f"README has no block <!-- results:{name} --> ... <!-- /results:{name} -->")
  return pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(3), text)


def main(argv):
  del argv
  distributed.setup(cpu_devices=_CPU_DEVICES.value)
  from launch import registry, runner  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top

  with open(_README.value) as f:
    text = f.read()
  for name, (experiment_name, arg, figures) in REPORTS.items():
    if _ONLY.value and name not in _ONLY.value:
      continue
    experiment = registry.get(experiment_name)
    workdir = os.path.join(_RUNS.value, name)
    if _RUN.value:
      runner.run(experiment.get_config(arg), workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      results = json.load(f)
    os.makedirs("docs/figures", exist_ok=True)
    links = []
    for fig in figures:
      src = os.path.join(workdir, f"{fig}.png")
      if os.path.exists(src):
        dst = f"docs/figures/{name}_{fig}.png"
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
    text = replace_block(text, name, body)
    print(f"updated block {name}")
  with open(_README.value, "w") as f:
    f.write(text)


if __name__ == "__main__":
  app.run(main)
