"""The notebooks as a reader finds them: Colab header, stored outputs, and a run in a fresh Colab-like environment.

The stored notebooks: each starts with the "Open in Colab" badge and the setup
cell that ``make notebooks`` writes from ``setup.cfg``, every code cell was
executed in order, and no stored output holds a traceback or a path of the
machine that ran it. The slow tests are how ``make test`` executes every
notebook: a new virtual environment with nothing but a kernel, a clone of this
working tree, the setup cell in "Colab" mode (installing the clone with the
pinned constraints), then the notebook top to bottom.
"""

import os
import shutil
import subprocess
import venv

import nbformat
import pytest

from launch import notebooks

NAMES = notebooks.notebook_names()


def test_every_method_has_a_notebook():
  assert {"varde_bai", "varde_mcts_bpi", "model_smc", "reg_opg", "graphpfn_prior", "flow_matching"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebook_has_its_header_and_clean_outputs(name):
  nb = nbformat.read(os.path.join(notebooks.COLABS, f"{name}.ipynb"), as_version=4)
  assert nb.cells[0].cell_type == "markdown" and notebooks.colab_link(name) in nb.cells[0].source
  assert nb.cells[1].source == notebooks.setup_source(), "rerun `make notebooks` after changing the setup cell"
  assert notebooks.problems(nb) == []
  assert any(o.get("data", {}).get("image/png") or o.get("data", {}).get("text/plain") or o.get("text")
             for c in nb.cells if c.cell_type == "code" for o in c.outputs), "no stored output at all"


def test_problems_are_found():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_code_cell("x", metadata={"tags": [notebooks.SETUP_TAG]}, execution_count=1),
              nbformat.v4.new_code_cell("y", execution_count=3,
                                        outputs=[nbformat.v4.new_output("stream", name="stdout",
                                                                        text=f"saved to {notebooks.ROOT}/x\n")])]
  found = notebooks.problems(nb)
  assert any("execution_count 3, expected 2" in p for p in found)
  assert any("machine path" in p for p in found)


_RUNNER = """
import sys, nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
print("ran", len(nb.cells), "cells")
"""


@pytest.fixture(scope="module")
def colab_like(tmp_path_factory, repo_root):
  """A new venv holding only a kernel (what Colab starts with), and its environment in "Colab" mode."""
  root = tmp_path_factory.mktemp("colab")
  venv.create(root / "venv", with_pip=True)
  python = str(root / "venv" / "bin" / "python")
  subprocess.run([python, "-m", "pip", "install", "-q", "-c", os.path.join(repo_root, "requirements/constraints.txt"),
                  "ipykernel", "nbclient", "nbformat"], check=True, timeout=1200)
  env = {k: v for k, v in os.environ.items()  # nor this test run's compilation cache (tests/conftest.py)
         if k not in ("PYTHONPATH", "XLA_FLAGS", "VIRTUAL_ENV", "ICML26_TEST_COMPILATION_CACHE")
         and not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
  env.update({notebooks.FORCE_ENV: "1", notebooks.URL_ENV: repo_root,
              "PATH": f"{root / 'venv' / 'bin'}{os.pathsep}{env['PATH']}"})
  work = root / "content"  # Colab's working directory
  work.mkdir()
  _clone_working_tree(repo_root, work / "icml26-jax")
  return python, env, work


def _clone_working_tree(repo_root: str, dest) -> None:
  """The setup cell's ``git clone``, then the working tree's uncommitted files over it.

  The setup cell finds the clone and installs it: what runs is this working tree,
  as a clean clone of it would hold it (ignored files such as ``.venv`` stay out).
  """
  subprocess.run(["git", "clone", "-q", repo_root, str(dest)], check=True, timeout=600)
  listed = subprocess.run(["git", "-C", repo_root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          check=True, capture_output=True, text=True).stdout.split("\0")
  for rel in filter(None, listed):
    src, out = os.path.join(repo_root, rel), os.path.join(dest, rel)
    if os.path.isfile(src):
      os.makedirs(os.path.dirname(out), exist_ok=True)
      shutil.copy2(src, out)
    elif os.path.lexists(out):  # deleted in the working tree
      os.remove(out)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_in_a_fresh_colab_like_environment(name, colab_like):
  """The setup cell installs the clone with its pinned constraints; then the notebook runs top to bottom."""
  python, env, work = colab_like
  out = subprocess.run([python, "-c", _RUNNER, os.path.join(notebooks.COLABS, f"{name}.ipynb"), str(work)],
                       env=env, cwd=work, capture_output=True, text=True, timeout=3600)
  assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
  assert (work / "icml26-jax" / "setup.cfg").exists()


def test_readme_links_every_notebook_to_colab(repo_root):
  with open(os.path.join(repo_root, "README.md")) as f:
    readme = f.read()
  for name in NAMES:
    assert f"({notebooks.colab_link(name)})" in readme, name


def test_readme_fits_on_a_few_screens(repo_root):
  with open(os.path.join(repo_root, "README.md")) as f:
    assert len(f.read().splitlines()) < 300
