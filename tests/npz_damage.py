"""Damaged ``.npz`` archives for the tests of the readers' errors."""

import struct
import zipfile

import numpy as np


def corrupt_compressed(path, arrays: dict, member: str) -> str:
  """Writes ``arrays`` with ``np.savez_compressed`` and breaks ``member``'s deflate data.

  The first deflate block header of ``<member>.npy`` is set to the reserved
  block type, so that reading the member raises ``zlib.error`` ("invalid
  block type") while the zip directory stays intact.
  """
  np.savez_compressed(path, **arrays)
  with zipfile.ZipFile(path) as z:
    offset = z.getinfo(f"{member}.npy").header_offset
  with open(path, "r+b") as f:
    f.seek(offset + 26)
    name_len, extra_len = struct.unpack("<HH", f.read(4))
    f.seek(offset + 30 + name_len + extra_len)
    f.write(b"\x07")
  return str(path)
