"""Every hyperparameter declaration's default matches its annotation and its range.

A float field declared with an int default (``F(0, ...)`` instead of ``0.0``)
would make ml_collections lock the key as an int, so that
``--config.<key>=0.05`` fails; this test finds such declarations in every
:class:`methods.common.hparams.Hyperparameters` subclass of the project.
"""

import dataclasses
import importlib
import pkgutil
import typing

import pytest

import datasets
import envs
import launch
import methods
from methods.common import hparams


def _import_all():
  for pkg in (methods, envs, datasets, launch):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
      if info.name.endswith("__main__"):
        continue
      importlib.import_module(info.name)


def _subclasses(cls):
  out = []
  for sub in cls.__subclasses__():
    out.append(sub)
    out.extend(_subclasses(sub))
  return out


def _all_classes():
  _import_all()
  classes = {f"{c.__module__}.{c.__qualname__}": c for c in _subclasses(hparams.Hyperparameters)
             if dataclasses.is_dataclass(c) and not c.__module__.startswith("test")}
  return sorted(classes.items())


CLASSES = _all_classes()


def _exact_type_problem(value, hint):
  origin = typing.get_origin(hint)
  if origin is tuple:
    args = typing.get_args(hint)
    if not isinstance(value, tuple):
      return f"{value!r} is not a tuple"
    return next((p for p in (_exact_type_problem(v, args[0]) for v in value) if p), None)
  if hint in (bool, int, float, str):
    return None if type(value) is hint else f"default {value!r} is a {type(value).__name__}, annotated {hint.__name__}"
  return None


def test_declarations_were_found():
  assert len(CLASSES) >= 20, [n for n, _ in CLASSES]


@pytest.mark.parametrize("name, cls", CLASSES, ids=[n for n, _ in CLASSES])
def test_defaults_match_annotation_and_range(name, cls):
  hints = typing.get_type_hints(cls)
  problems = []
  for f, meta in hparams.declared(cls):
    msg = _exact_type_problem(f.default, hints[f.name])
    if msg is None and meta.constraint is not None:
      msg = meta.constraint.check(f.default)
    if msg:
      problems.append(f"{f.name}: {msg}")
  assert problems == [], name
  cls()  # the defaults also pass the cross-field checks
