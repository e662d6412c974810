"""The compile pipeline, its stages in order, each a module with a plain function:

1. import (:mod:`.importer`): a torch module or an ONNX graph into TVM Relax;
2. plan (:mod:`.plan`): which layer's weight is stored in which format;
3. preflight (:mod:`.preflight`): what the target cannot run or build;
4. lower (:mod:`.lower`): planned weights become packed codes read by decode kernels;
5. schedule (:mod:`.schedule`): loop schedules for those kernels;
6. build (:mod:`.build`): ``tvm.compile``;
7. export (:mod:`.export`): the shared library, CUDA source and fatbin on disk.

:func:`compile_imported` runs stages 2-7 on an imported model and writes a build directory
through a temporary one that is moved into place only when every artifact exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from edgekit.simulators import weight_formats as wf
from edgekit.targets import host_arch
from edgekit.utils.files import check_output_dir, staged_directory
from edgekit.utils.output import json_safe
from edgekit.utils.provenance import provenance

from .build import build
from .export import cuda_source, elf_machine, export_library, nvcc_fatbin
from .importer import ImportedModel
from .lower import lower
from .plan import make_plan, read_codes
from .preflight import PreflightError, check_quantizes, preflight
from .runtime import MANIFEST, source_digest
from .schedule import schedule

LIBRARY = "model.so"
CUDA_SOURCE = "kernels.cu"
CUDA_BINARY = "kernels.fatbin"


def compile_for_cpu(imported: ImportedModel, plan: dict[str, str], target=None, activations: str = "float32"):
    """lower -> schedule -> build for this CPU, in memory: the chain the tests and benchmarks run."""
    import tvm

    target = target or tvm.target.Target({"kind": "llvm"})
    lowered = lower(imported, plan, "cpu", target=target, activations=activations)
    return build(schedule(lowered.mod, "cpu", target), target), lowered


def cuda_arch(target, tvm_tgt) -> str | None:
    """The GPU arch to build the CUDA binary for: the target's own, else what its TVM target says."""
    arch = target.cuda_arch or tvm_tgt.attrs.get("arch")
    return str(arch) if arch else None


def layer_totals(layers: dict) -> dict:
    """Bytes of codes and scales over all planned layers, and their effective bits per weight.

    A LiftQuant configuration's codebook is stored once per model and counted once.
    """
    from edgekit.simulators.liftquant import codebook_bytes

    numel = sum(r.weights for r in layers.values())
    rows = [wf.resolve(f) for f in sorted({r.format for r in layers.values()})]
    books = sum(codebook_bytes(row.liftquant) for row in rows if row.family == "liftquant")
    stored = sum(r.codes_bytes + r.scales_bytes + r.tensor_scale_bytes for r in layers.values()) + books
    return {"weights": numel, "codes_bytes": sum(r.codes_bytes for r in layers.values()),
            "scales_bytes": sum(r.scales_bytes + r.tensor_scale_bytes for r in layers.values()),
            "codebook_bytes": books, "weight_bits": 8.0 * stored / numel if numel else None}


def plan_summary(plan: dict[str, str]) -> str:
    """The one format of a uniform plan, else ``mixed``."""
    formats = set(plan.values())
    return formats.pop() if len(formats) == 1 else "mixed"


def compile_imported(imported: ImportedModel, fmt: str, target, out_dir, *, overrides: dict[str, str] | None = None,
                     codes=None, label: str = "model", kind: str = "module", skipped: dict[str, str] | None = None,
                     seed: int = 0, activations: str = "float32", log: Callable[[str], None] = print) -> dict:
    """Plan, check, lower, schedule, build and export ``imported`` for ``target`` (a loaded target) into
    ``out_dir``; returns the manifest written there.

    ``overrides``: layer -> format beside the default ``fmt``. ``codes``: an ``edgekit quantize
    --codes`` file; the layers it holds are built from its LiftQuant codes and scales as they are
    (calibrated, fine-tuned), not encoded again. ``label``, ``kind`` and ``skipped`` (weights the
    import left in float, and why) describe the model in messages and the manifest.
    ``activations="mxint8"``: the batch-1 GEMVs that can quantize their input to MXINT8 in the kernel
    do (``lower``, which refuses a build where no layer can).
    """
    from edgekit.targets import tvm_target

    out_dir = Path(out_dir)
    check_output_dir(out_dir, MANIFEST)
    overrides = dict(overrides or {})
    skipped = dict(skipped or {})
    plan = make_plan(imported.layers, fmt, overrides)
    if not codes:
        check_quantizes(plan, fmt, label, skipped)
    encoded = read_codes(codes, list(imported.layers)) if codes else {}
    clash = sorted(set(encoded) & set(overrides))
    if clash:
        raise ValueError(f"--layer names {', '.join(clash)}, which --codes already codes")
    plan.update({layer: t.format.name for layer, t in encoded.items()})
    problems = preflight(imported, plan, target)
    if problems:
        raise PreflightError(problems)
    device = target.device
    log(f"lowering {len(plan)} layers for {target.name} ({device}) ...")
    tvm_tgt = tvm_target(target)
    lowered = lower(imported, plan, device, encoded, tvm_tgt, activations)
    if activations != "float32":
        taken = sum(r.activations == activations for r in lowered.layers.values())
        log(f"{taken} of {len(lowered.layers)} layers quantize their input to {activations}; the others take it as float32")
    log("building ...")
    try:
        executable = build(schedule(lowered.mod, device, tvm_tgt), tvm_tgt)
    except Exception as err:  # TVM raises InternalError and others from deep inside its passes
        first = str(err).strip().splitlines()
        raise ValueError(f"TVM could not build {label} for {target.name}: {type(err).__name__}: "
                         f"{first[-1] if first else ''}") from err
    cross = target.cross_compiler if target.arch not in (None, host_arch()) else None
    arch = cuda_arch(target, tvm_tgt) if device == "cuda" else None
    with staged_directory(out_dir, MANIFEST) as staging:
        artifacts = {"library": LIBRARY}
        export_library(executable, staging / LIBRARY, cross)
        artifacts["library_machine"] = elf_machine(staging / LIBRARY)
        if device == "cuda":
            kernels_text = cuda_source(executable)
            (staging / CUDA_SOURCE).write_text(kernels_text)
            artifacts["cuda_source"] = CUDA_SOURCE
            artifacts["cuda_binary"] = nvcc_fatbin(staging / CUDA_SOURCE, [arch], staging / CUDA_BINARY) if arch \
                else {"built": False, "reason": "the target names no CUDA arch"}
            if artifacts["cuda_binary"]["built"]:  # edgekit.runtime hands it to the library when it loads
                artifacts["cuda_binary"].update(file=CUDA_BINARY, source_sha256=source_digest(kernels_text))
        manifest = {
            "model": label,
            "model_source": kind,
            "float_weights": skipped,
            "target": {"name": target.name, "tvm": str(tvm_tgt), "device": device, "arch": target.arch,
                       "cuda_arch": arch, "cross_compiler": cross},
            "format": plan_summary(plan),
            "activations": activations,
            "codes": str(codes) if codes else None,
            "layers": {name: record.to_json() for name, record in lowered.layers.items()},
            "totals": layer_totals(lowered.layers),
            "inputs": lowered.inputs,
            "max_batch": imported.max_batch,
            "outputs": lowered.outputs,
            "artifacts": artifacts,
            "provenance": provenance(seed),
        }
        (staging / MANIFEST).write_text(json.dumps(json_safe(manifest), indent=2) + "\n")
    return manifest
