"""Reading a user's ``.npz`` archive of named arrays, with an error that names what is wrong.

:func:`read_arrays` returns the requested arrays of an archive written with
``np.savez``. Every way the file can be unreadable -- missing, a directory, a
single ``.npy`` array, not a zip archive, truncated, a compressed member whose
data is corrupt, an array of Python objects
(pickle is never enabled), a missing array -- raises the caller's error class
(a subclass of :class:`NpzFileError`) naming the file, the array and how to
write the file. Checking the arrays' shapes and values is the caller's part.
"""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np


class NpzFileError(ValueError):
  """A user's ``.npz`` file is unreadable or malformed; the message names the file and the array."""


_NPY_MAGIC = b"\x93NUMPY"


def read_arrays(path: str, names: tuple[str, ...], *, how: str,
                error: type[NpzFileError] = NpzFileError) -> dict[str, np.ndarray]:
  """``{name: array}`` for ``names`` from the archive at ``path``.

  Args:
    path: the file.
    names: the arrays that must be in it (other arrays are ignored).
    how: how to write a good file (appended to every message), e.g.
      ``"write it with np.savez(path, images=..., labels=...)"``.
    error: the error class raised.

  Raises:
    error: naming the file and, where there is one, the array.
  """
  if not path:
    raise error(f"no file given; {how}")
  if os.path.isdir(path):
    raise error(f"{path} is a directory, not an .npz file; {how}")
  try:
    with open(path, "rb") as fh:
      head = fh.read(len(_NPY_MAGIC))
  except OSError as e:
    raise error(f"{path} cannot be read ({e.strerror or e}); {how}") from e
  if head == _NPY_MAGIC:
    raise error(f"{path} holds a single array (an .npy file), not an .npz archive of named arrays; {how}")
  if not zipfile.is_zipfile(path):
    raise error(f"{path} is not an .npz archive (not a zip file of arrays); {how}")
  try:
    archive = np.load(path, allow_pickle=False)
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
    raise error(f"{path} is not a readable .npz archive ({type(e).__name__}: "
                f"{' '.join(str(e).split())[:120]}); {how}") from e
  with archive:
    missing = [k for k in names if k not in archive.files]
    if missing:
      raise error(f"{path}: missing arrays {missing}; found {sorted(archive.files)}; {how}")
    arrays = {}
    for k in names:
      try:
        arrays[k] = archive[k]
      except ValueError as e:  # object arrays need pickle, which is never enabled
        raise error(f"{path}: array {k!r} holds Python objects (dtype object); numbers are needed") from e
      except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:  # zlib: np.savez_compressed data
        raise error(f"{path}: array {k!r} cannot be read ({type(e).__name__}: {e})") from e
  return arrays
