"""The house rules that a reader relies on, checked on the source tree.

* Imports only go down (``launch -> methods, envs, datasets``; ``methods ->
  envs, methods``; ``envs`` and ``datasets`` import no other layer) and the
  import graph has no cycle, counting top-level and function-level imports alike.
* A function-level import of another project module is not used at all.
* ``launch/experiments`` holds one package per method family, no flat module.
* No module over 450 lines and no function over 80 lines in ``methods/`` and ``launch/``.
* Importing the registry loads no experiment (and no JAX).
"""

import ast
import os
import subprocess
import sys

import pytest

PACKAGES = ("envs", "datasets", "methods", "launch")
# What each layer may import from the others.
ALLOWED = {
    "envs": {"envs"},
    "datasets": {"datasets"},
    "methods": {"methods", "envs"},
    "launch": {"launch", "methods", "envs", "datasets"},
}
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def _modules(root):
  out = {}
  for pkg in PACKAGES:
    for d, _, files in os.walk(os.path.join(root, pkg)):
      for f in files:
        if f.endswith(".py"):
          path = os.path.join(d, f)
          name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
          out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
  return out


def _resolve(name, modules):
  while name and name not in modules:
    name = name.rpartition(".")[0]
  return name or None


def _imports(module, path, modules):
  """``(target module, is_function_level, line)`` of every project import of ``module``."""
  tree = ast.parse(open(path).read())
  nested = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      nested.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
  is_pkg = path.endswith("__init__.py")
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = module.split(".")[: len(module.split(".")) - (0 if is_pkg else 1)]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
      targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    else:
      continue
    for t in targets:
      r = _resolve(t, modules)
      if r and r != module:
        yield r, id(node) in nested, node.lineno


@pytest.fixture(scope="module")
def graph(repo_root):
  modules = _modules(repo_root)
  edges = {m: list(_imports(m, p, modules)) for m, p in modules.items()}
  return modules, edges


def _cycles(edges):
  """Strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w, _, _ in edges[v]:
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
  up = [(m, t) for m, ts in edges.items() for t, _, _ in ts if t.split(".")[0] not in ALLOWED[m.split(".")[0]]]
  assert up == []


def test_no_function_level_project_imports(graph):
  _, edges = graph
  nested = [(m, t, line) for m, ts in edges.items() for t, fn, line in ts if fn]
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
    if name.split(".")[0] not in ("methods", "launch"):
      continue
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
  from launch import registry  # pylint: disable=g-import-not-at-top

  for name, module in registry.MODULES.items():
    path = os.path.join(repo_root, *module.split(".")) + ".py"
    assert os.path.exists(path), (name, module)
    assert registry.get(name).name == name
