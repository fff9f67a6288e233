r"""``make notebooks``: give every notebook its Colab header, execute it, store its outputs.

  python -m launch.notebooks                    # every notebook in colabs/
  python -m launch.notebooks --only=varde_bai   # one
  python -m launch.notebooks --check            # stored outputs complete and clean; writes nothing

Each notebook starts with a Markdown cell holding an "Open in Colab" badge and a
setup cell that, only inside Colab, clones the repository (``REPO_URL``, read
from ``setup.cfg``'s ``url``) and installs it with its pinned constraints;
anywhere else it does nothing and the package is imported normally. The
notebooks are executed at smoke size from the ``colabs/`` directory, and the
executed notebook is written back with its outputs (tables, small PNG figures)
so that a reader sees them on the repository page. ``stderr`` streams (library
warnings) are not stored.

:func:`problems` is the check the tests run on the stored notebooks: every
code cell executed, in order, with outputs that hold no traceback and no path
of the machine that ran them.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from typing import Iterator

from absl import app
from absl import flags
import nbclient
import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLABS = os.path.join(ROOT, "colabs")
SETUP_TAG = "colab-setup"
BADGE_TAG = "colab-badge"
# Environment variables a test sets to run the setup cell outside Colab, from a local clone.
FORCE_ENV = "ICML26_COLAB_SETUP"
URL_ENV = "ICML26_REPO_URL"
MAX_IMAGE_BYTES = 150_000

FLAGS = flags.FLAGS


def repo_url(root: str = ROOT) -> str:
  """The repository's URL, declared once in ``setup.cfg`` (``[metadata] url``)."""
  parser = configparser.ConfigParser()
  parser.read(os.path.join(root, "setup.cfg"))
  return parser["metadata"]["url"]


def colab_link(name: str, root: str = ROOT) -> str:
  """The "Open in Colab" address of ``colabs/<name>.ipynb`` on the repository's main branch."""
  path = repo_url(root).removeprefix("https://github.com/").removesuffix(".git")
  return f"https://colab.research.google.com/github/{path}/blob/main/colabs/{name}.ipynb"


def badge(name: str, root: str = ROOT) -> str:
  return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
          f"({colab_link(name, root)})")


def setup_source(root: str = ROOT) -> str:
  """The setup cell: inside Colab, clone and install the repository; elsewhere, nothing."""
  return f'''# Setup. In Colab: clone this repository and install it with its pinned versions
# (if Colab then asks to restart the session, restart and run this cell again).
# Anywhere else (a checkout with `make venv`, or `pip install -e .`) this cell does nothing.
REPO_URL = "{repo_url(root)}"
import os, subprocess, sys
if "google.colab" in sys.modules or os.environ.get("{FORCE_ENV}"):
    REPO_URL = os.environ.get("{URL_ENV}", REPO_URL)
    if not os.path.exists("icml26-jax/setup.cfg"):
        subprocess.run(["git", "clone", "-q", REPO_URL, "icml26-jax"], check=True)
    os.chdir("icml26-jax")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-c", "requirements/constraints.txt", "-e", "."],
                   check=True)'''


def notebook_names() -> list[str]:
  return sorted(f[:-len(".ipynb")] for f in os.listdir(COLABS) if f.endswith(".ipynb"))


def _tagged(cell, tag: str) -> bool:
  return tag in cell.get("metadata", {}).get("tags", [])


def with_header(nb, name: str):
  """``nb`` with the badge cell and the setup cell first (replacing older ones)."""
  cells = [c for c in nb.cells if not (_tagged(c, SETUP_TAG) or _tagged(c, BADGE_TAG))]
  head = nbformat.v4.new_markdown_cell(badge(name), metadata={"tags": [BADGE_TAG]})
  setup = nbformat.v4.new_code_cell(setup_source(), metadata={"tags": [SETUP_TAG]})
  nb.cells = [head, setup] + cells
  return nb


def execute(nb, *, timeout: int = 1800):
  """Runs ``nb`` in a fresh kernel from ``colabs/``; drops stderr streams from the outputs."""
  client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                   resources={"metadata": {"path": COLABS}})
  client.execute()
  for cell in nb.cells:
    if cell.cell_type == "code":
      cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
  return nb


def _machine_paths() -> list[str]:
  home = os.path.expanduser("~")
  out = {ROOT, os.path.realpath(ROOT), "/tmp/", "site-packages", "/work/", "/root/", "/home/"}
  if home not in ("/", ""):
    out.add(home)
  return sorted(out)


def _texts(output) -> Iterator[str]:
  if output.output_type == "stream":
    yield output.text
  elif output.output_type in ("execute_result", "display_data"):
    for mime, value in output.get("data", {}).items():
      if mime.startswith("text/"):
        yield value if isinstance(value, str) else "".join(value)
  elif output.output_type == "error":
    yield "Traceback\n" + "\n".join(output.get("traceback", []))


def problems(nb) -> list[str]:
  """What is wrong with a stored notebook: unexecuted or out-of-order cells, tracebacks, machine paths."""
  out, count = [], 0
  paths = _machine_paths()
  code = [c for c in nb.cells if c.cell_type == "code"]
  if not code or not _tagged(code[0], SETUP_TAG):
    out.append("the first code cell is not the Colab setup cell")
  for i, cell in enumerate(code):
    if cell.get("execution_count") != count + 1:
      out.append(f"code cell {i} has execution_count {cell.get('execution_count')}, expected {count + 1}")
    count = cell.get("execution_count") or count
    for o in cell.get("outputs", []):
      if o.output_type == "error" or any(re.search(r"Traceback|Error: ", t) for t in _texts(o)):
        out.append(f"code cell {i} holds an error output")
      for t in _texts(o):
        hit = next((p for p in paths if p in t), None)
        if hit:
          out.append(f"code cell {i} prints a machine path ({hit!r})")
      png = o.get("data", {}).get("image/png", "")
      if len(png) * 3 // 4 > MAX_IMAGE_BYTES:
        out.append(f"code cell {i} stores a {len(png) * 3 // 4:,}-byte PNG (limit {MAX_IMAGE_BYTES:,})")
  return out


def define_flags() -> None:
  flags.DEFINE_list("only", [], "Only these notebooks (names without .ipynb).")
  flags.DEFINE_bool("check", False, "Check the stored notebooks; write nothing.")
  flags.DEFINE_integer("timeout", 1800, "Seconds per cell.")


def main(argv):
  del argv
  names = FLAGS.only or notebook_names()
  unknown = sorted(set(names) - set(notebook_names()))
  if unknown:
    raise app.UsageError(f"no notebooks {unknown}; notebooks are {notebook_names()}")
  failed = False
  for name in names:
    path = os.path.join(COLABS, f"{name}.ipynb")
    nb = nbformat.read(path, as_version=4)
    if not FLAGS.check:
      print(f"executing {path}", flush=True)
      nb = execute(with_header(nb, name), timeout=FLAGS.timeout)
      nbformat.write(nb, path)
    found = problems(nb)
    for p in found:
      print(f"{name}: {p}", file=sys.stderr)
    failed |= bool(found)
  if failed:
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
