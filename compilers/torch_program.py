"""A ``torch.export`` program saved with ``torch.export.save`` (``.pt2``), as an ONNX graph.

Every model file a user brings goes one way through edgekit: as ONNX. A program is
converted by torch's own ONNX exporter (the ``dynamo`` one, which takes an
``ExportedProgram`` as it is and keeps its parameters' names).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import onnx

from .errors import describe_error

OPSET = 18


def program_to_onnx(path) -> onnx.ModelProto:
    """The ONNX graph of the program saved at ``path``, or a ``ValueError`` saying why not."""
    import torch

    path = Path(path)
    try:
        program = torch.export.load(str(path))
    except Exception as err:  # torch raises zipfile, pickle and its own errors for a foreign file
        raise ValueError(f"{path} is not a program saved by torch.export.save: {describe_error(err)}") from err
    quiet = logging.getLogger("torch.onnx")  # it logs a warning per torchvision op it cannot register
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            exported = torch.onnx.export(program, dynamo=True, opset_version=OPSET, verbose=False)
    except Exception as err:  # the exporter raises many types for ops it cannot translate
        raise ValueError(f"torch could not convert {path.name} to ONNX: {describe_error(err)}") from err
    finally:
        quiet.setLevel(level)
    return exported.model_proto
