"""The house rules that a reader relies on, checked on the source tree.

* Imports only go down (``launch -> methods, envs, datasets``; ``methods ->
  envs, methods``; ``envs`` and ``datasets`` import no other layer) and the
  import graph has no cycle, counting top-level and function-level imports alike.
* A function-level import of another project module is not used at all.
* ``launch/experiments`` holds one package per method family, no flat module.
* No module over 450 lines and no function over 80 lines in any package.
* Importing the registry loads no experiment (and no JAX).
"""

import ast
import os
import subprocess
import sys

import pytest

from launch import provenance
from launch import registry

# What each layer may import from the others.
ALLOWED = {
    "envs": {"envs"},
    "datasets": {"datasets"},
    "methods": {"methods", "envs"},
    "launch": {"launch", "methods", "envs", "datasets"},
}
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


@pytest.fixture(scope="module")
def graph(repo_root):
  return provenance.project_modules(repo_root), provenance.import_graph(repo_root)


def _cycles(edges):
  """Strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for imp in edges[v]:
      w = imp.target
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  limit = sys.getrecursionlimit()
  sys.setrecursionlimit(max(limit, 10_000))
  try:
    for v in edges:
      if v not in index:
        visit(v)
  finally:
    sys.setrecursionlimit(limit)
  return out


def test_no_import_cycles(graph):
  _, edges = graph
  assert _cycles(edges) == []


def test_imports_go_down(graph):
  _, edges = graph
  up = [(i.source, i.target) for imports in edges.values() for i in imports
        if i.target.split(".")[0] not in ALLOWED[i.source.split(".")[0]]]
  assert up == []


def test_no_function_level_project_imports(graph):
  _, edges = graph
  nested = [(i.source, i.target, i.line) for imports in edges.values() for i in imports if i.in_function]
  assert nested == []


def test_experiments_are_grouped_by_method(repo_root):
  root = os.path.join(repo_root, "launch", "experiments")
  flat = [f for f in os.listdir(root) if f.endswith(".py") and f != "__init__.py"]
  assert flat == []
  packages = [d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "__init__.py"))]
  assert sorted(packages) == ["flow_matching", "graphpfn", "model_smc", "reg", "varde"]


def test_module_and_function_sizes(graph):
  modules, _ = graph
  long_modules, long_functions = [], []
  for name, path in modules.items():
    src = open(path).read()
    if src.count("\n") > MAX_MODULE_LINES:
      long_modules.append((name, src.count("\n")))
    for node in ast.walk(ast.parse(src)):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        n = node.end_lineno - node.lineno + 1
        if n > MAX_FUNCTION_LINES:
          long_functions.append((name, node.name, n))
  assert long_modules == [] and long_functions == []


def test_registry_import_loads_no_experiment(repo_root, python_env):
  code = ("import sys, launch.registry as r; "
          "print(sorted(m for m in sys.modules if m.startswith(('launch.experiments.', 'jax')) ))")
  out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=python_env, capture_output=True, text=True,
                       check=True, timeout=120)
  assert out.stdout.strip() == "[]", out.stdout


def test_every_registered_module_defines_its_experiment(repo_root):
  for name, module in registry.MODULES.items():
    path = os.path.join(repo_root, *module.split(".")) + ".py"
    assert os.path.exists(path), (name, module)
    assert registry.get(name).name == name
