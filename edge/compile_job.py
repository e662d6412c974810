"""``edgekit compile`` and ``edgekit export``: a model, a format plan and a target in, artifacts out.

Compile runs the passes of ``edgekit.compilers`` in order (import -> plan -> preflight ->
lower -> schedule -> build) and writes the build directory through a temporary
directory that is moved into place only when every artifact exists.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.compilers.importer import ImportedModel, check_max_batch, import_onnx, import_torch
from edgekit.compilers.lower import DEVICES
from edgekit.compilers.plan import BASELINES, make_plan, parse_overrides
from edgekit.compilers.runtime import source_digest
from edgekit.targets import host_arch
from edgekit.utils.files import check_output_dir, staged_directory
from edgekit.utils.output import json_safe
from edgekit.utils.provenance import provenance

MANIFEST = "manifest.json"
LIBRARY = "model.so"
CUDA_SOURCE = "kernels.cu"
CUDA_BINARY = "kernels.fatbin"
VM_CALL_OPS = ("relax.call_tir", "relax.call_dps_packed", "relax.call_pure_packed", "relax.shape_of")  # run by the VM


@dataclass
class ModelSource:
    """Where a model came from: a registered name, a checkpoint, an ONNX file or a ``torch.export`` program."""

    label: str
    kind: str  # "registered", "checkpoint", "onnx" or "torch.export"
    module: object = None  # torch nn.Module, for registered names and checkpoints
    example_inputs: tuple = ()
    graph: object = None  # onnx.ModelProto, simplified, for ONNX files and programs
    sites: dict = field(default_factory=dict)  # layer -> onnx_graph.WeightSite of ``graph``
    skipped: dict = field(default_factory=dict)  # initializer -> why it stays in float
    input_shapes: dict = field(default_factory=dict)  # as set: ints, or a symbolic dim's name
    path: Path | None = None  # the model file
    raw: object = None  # its graph as read, before shapes were set and it was simplified
    given_shapes: dict = field(default_factory=dict)  # --input-shape

    @property
    def is_graph(self) -> bool:
        return self.graph is not None


GRAPH_SUFFIXES = (".onnx", ".pt2")
DEFAULT_MAX_BATCH = 64  # a model file's symbolic batch, unless --max-batch says otherwise


def resolve_model(spec: str, seed: int = 0, log: Callable[[str], None] = print, input_shapes: dict | None = None,
                  embeddings: bool = False, fix_shapes: bool = True, batch: int | None = 1) -> ModelSource:
    """A registered model name (trained with ``seed``, or loaded from the model cache), a
    checkpoint file, an ONNX file or a ``torch.export`` program (``.pt2``).

    A graph from a file is simplified (shapes inferred, constants folded); ``fix_shapes``
    first sets its input shapes (``input_shapes``, else its own dims with a symbolic batch
    of ``batch``, None: left symbolic), as TVM's import needs; ``embeddings`` makes its
    Gather tables quantizable too.
    """
    from edgekit.models.registry import get_model, load_checkpoint, make_config, model_names, train

    path = Path(spec)
    if path.suffix.lower() in GRAPH_SUFFIXES:
        return graph_source(path, input_shapes or {}, embeddings, fix_shapes, batch, log)
    if input_shapes:
        raise ValueError("--input-shape applies to .onnx and .pt2 files; a zoo model's inputs are its config's")
    if path.is_file():
        entry, config, module = load_checkpoint(path)
        return ModelSource(f"{entry.name} ({path.name})", "checkpoint", module, entry.example_inputs(config))
    if spec not in model_names():
        raise ValueError(f"MODEL {spec!r} is neither a registered model ({', '.join(model_names())}), "
                         "an existing checkpoint file, an .onnx file nor a torch.export .pt2 file")
    config = make_config(spec, {"seed": seed})
    trained = train(spec, config, progress=True, log=log)
    log(f"{spec}: {'loaded from' if trained.cached else 'trained into'} {trained.checkpoint}")
    return ModelSource(spec, "registered", trained.model, get_model(spec).example_inputs(config))


def graph_source(path: Path, shapes: dict, embeddings: bool, fix_shapes: bool, batch: int | None,
                 log: Callable[[str], None], raw=None) -> ModelSource:
    """A model file read (``raw``: the graph read already), its inputs set and simplified, its weights found."""
    from edgekit.compilers.onnx_graph import input_shapes, read_onnx, simplify, weight_sites
    from edgekit.compilers.torch_program import program_to_onnx

    kind = "torch.export" if path.suffix.lower() == ".pt2" else "onnx"
    if raw is None:
        if not path.is_file():
            raise ValueError(f"model file {str(path)!r} does not exist")
        if kind == "torch.export":
            log(f"converting the torch.export program {path.name} to ONNX ...")
        raw = program_to_onnx(path) if kind == "torch.export" else read_onnx(path)
    fixed = input_shapes(raw, shapes, batch) if fix_shapes or shapes else {}
    log(f"simplifying {path.name}" + (f" for inputs {', '.join(f'{n} {list(s)}' for n, s in fixed.items())}"
                                      if fixed else "") + " ...")
    graph = simplify(raw, fixed)
    sites, skipped = weight_sites(graph, embeddings)
    return ModelSource(path.name, kind, graph=graph, sites=sites, skipped=skipped, input_shapes=fixed, path=path,
                       raw=raw, given_shapes=shapes)


def import_model(source: ModelSource, max_batch: int | None = None, log: Callable[[str], None] = print
                 ) -> tuple[ModelSource, ImportedModel]:
    """The model in TVM Relax, its batch symbolic up to ``max_batch`` where it has one (None: as given).

    Where TVM's ONNX frontend cannot take a graph with a symbolic batch (shape arithmetic
    in transformer exports), the graph is built for a batch of 1 instead, and the log says so.
    """
    if not source.is_graph:
        return source, import_torch(source.module, source.example_inputs, max_batch)
    symbolic = any(isinstance(d, str) for dims in source.input_shapes.values() for d in dims)
    try:
        return source, import_onnx(source.graph, source.sites, max_batch if symbolic else None)
    except ValueError as err:
        if not symbolic:
            raise
        log(f"TVM cannot import {source.label} with a symbolic batch ({err}); building it for a batch of 1 "
            "(--input-shape sets another)")
    static = graph_source(source.path, source.given_shapes, False, True, 1, log, source.raw)
    return static, import_onnx(static.graph, static.sites)


def load_model(model: str, seed: int = 0, log: Callable[[str], None] = print, input_shapes: dict | None = None,
               max_batch: int | None = None) -> tuple[ModelSource, ImportedModel]:
    """The model resolved and imported into TVM Relax: what every format and target builds from.

    ``max_batch``: 1 builds for a batch of 1; above 1, any batch up to it; None: a model
    file's symbolic batch up to ``DEFAULT_MAX_BATCH``, a zoo model's example batch.
    """
    check_max_batch(max_batch)
    source = resolve_model(model, seed, log, input_shapes, batch=1 if max_batch == 1 else None)
    log(f"importing {source.label} into TVM Relax ...")
    bound = (max_batch or DEFAULT_MAX_BATCH) if source.is_graph else (max_batch if max_batch != 1 else None)
    return import_model(source, bound, log)


def check_quantizes(plan: dict[str, str], fmt: str, source: ModelSource) -> None:
    """A plan that quantizes nothing is an error unless it asks for float: the user would get a float build
    or file under a quantized name."""
    if plan or fmt in BASELINES:
        return
    skipped = "; ".join(f"{name}: {why}" for name, why in list(source.skipped.items())[:5])
    raise ValueError(f"{source.label} has no MatMul/Gemm/Conv weight edgekit can quantize (weights are float "
                     f"initializers read by those ops){'; left in float: ' + skipped if skipped else ''}. "
                     f"To build it in float, pass --format fp32")


def preflight(imported: ImportedModel, plan: dict[str, str], target) -> list[str]:
    """What this target cannot run or build, before any compile work; empty when all is well."""
    import tvm

    problems = []
    if target.device not in DEVICES:
        problems.append(f"device kind {target.device!r}: edgekit lowers decode kernels for "
                        f"{', '.join(DEVICES)} targets only (formats {', '.join(sorted(set(plan.values())))})")
    ops = set()

    def collect(expr):
        if isinstance(expr, tvm.relax.Call) and isinstance(expr.op, tvm.ir.Op):
            ops.add(expr.op.name)

    tvm.relax.analysis.post_order_visit(imported.mod["main"], collect)
    for op in sorted(ops):
        if op not in VM_CALL_OPS and tvm.ir.Op.get(op).get_attr("FLegalize") is None:
            problems.append(f"op {op} has no TVM lowering for {target.device}")
    if target.arch is not None and target.arch != host_arch():
        compiler = target.cross_compiler
        if compiler is None:
            problems.append(f"target {target.name} runs on {target.arch}; it names no cross compiler")
        elif shutil.which(compiler) is None:
            problems.append(f"cross compiler {compiler} for {target.arch} is not on PATH "
                            "(Debian: apt-get install gcc-aarch64-linux-gnu)")
    return problems


def cuda_arch(target, tvm_tgt) -> str | None:
    """The GPU arch to build the CUDA binary for: the target's own, else what its TVM target says."""
    arch = target.cuda_arch or tvm_tgt.attrs.get("arch")
    return str(arch) if arch else None


def layer_totals(layers: dict) -> dict:
    """Bytes of codes and scales over all planned layers, and their effective bits per weight.

    A LiftQuant configuration's codebook is stored once per model and counted once.
    """
    from edgekit.simulators.formats import LIFTQUANT_FORMATS
    from edgekit.simulators.liftquant import codebook_bytes

    numel = sum(r.weights for r in layers.values())
    books = sum(codebook_bytes(LIFTQUANT_FORMATS[f]) for f in {r.format for r in layers.values()} & set(LIFTQUANT_FORMATS))
    stored = sum(r.codes_bytes + r.scales_bytes + r.tensor_scale_bytes for r in layers.values()) + books
    return {"weights": numel, "codes_bytes": sum(r.codes_bytes for r in layers.values()),
            "scales_bytes": sum(r.scales_bytes + r.tensor_scale_bytes for r in layers.values()),
            "codebook_bytes": books, "weight_bits": 8.0 * stored / numel if numel else None}


class PreflightError(ValueError):
    """The target cannot run this model as planned; ``problems`` lists why."""

    def __init__(self, problems: list[str]):
        super().__init__("preflight failed:\n  - " + "\n  - ".join(problems))
        self.problems = problems


def read_codes(path, layers) -> dict:
    """LiftQuant tensors by layer from an ``edgekit quantize --codes`` file, checked against ``layers``."""
    from edgekit.simulators.liftquant import load_tensors

    try:
        tensors = load_tensors(path)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"--codes {str(path)!r} is not a codes file written by `edgekit quantize --codes`: "
                         f"{type(err).__name__}: {err}") from None
    strange = sorted(set(tensors) - set(layers))
    if strange:
        raise ValueError(f"--codes {str(path)!r} codes layers {', '.join(strange)} that the model does not have "
                         f"(its layers: {', '.join(layers)})")
    return tensors


def compile_model(model: str, fmt: str, target_spec: str, out_dir, layer_overrides: list[str] = (),
                  seed: int = 0, log: Callable[[str], None] = print, codes=None,
                  loaded: tuple[ModelSource, ImportedModel] | None = None, input_shapes: dict | None = None,
                  max_batch: int | None = None) -> dict:
    """Compile ``model`` with every Linear/Conv weight in ``fmt`` for ``target_spec`` into ``out_dir``.

    ``codes``: an ``edgekit quantize --codes`` file; the layers it holds are built from its
    LiftQuant codes and scales as they are (calibrated, fine-tuned), not encoded again.
    ``loaded``: ``load_model(model, seed)`` done already (lowering leaves it unchanged, so
    one import serves many builds).
    """
    from edgekit.compilers.build import build, cuda_source, elf_machine, export_library, nvcc_fatbin, schedule
    from edgekit.compilers.lower import lower
    from edgekit.targets import load_target, tvm_target

    target = load_target(target_spec)
    out_dir = Path(out_dir)
    check_output_dir(out_dir, MANIFEST)
    overrides = parse_overrides(list(layer_overrides))
    source, imported = loaded or load_model(model, seed, log, input_shapes, max_batch)
    plan = make_plan(imported.layers, fmt, overrides)
    if not codes:
        check_quantizes(plan, fmt, source)
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
    lowered = lower(imported, plan, device, encoded, tvm_tgt)
    log("building ...")
    try:
        executable = build(schedule(lowered.mod, device, tvm_tgt), tvm_tgt)
    except Exception as err:  # TVM raises InternalError and others from deep inside its passes
        first = str(err).strip().splitlines()
        raise ValueError(f"TVM could not build {source.label} for {target.name}: {type(err).__name__}: "
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
            "model": source.label,
            "model_source": source.kind,
            "float_weights": source.skipped,
            "target": {"name": target.name, "tvm": str(tvm_tgt), "device": device, "arch": target.arch,
                       "cuda_arch": arch, "cross_compiler": cross},
            "format": plan_summary(plan),
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


def plan_summary(plan: dict[str, str]) -> str:
    """The one format of a uniform plan, else ``mixed``."""
    formats = set(plan.values())
    return formats.pop() if len(formats) == 1 else "mixed"


def export_model(model: str, fmt: str, out_path, layer_overrides: list[str] = (), seed: int = 0,
                 log: Callable[[str], None] = print, input_shapes: dict | None = None,
                 embeddings: bool = False) -> dict:
    """Standard ONNX of a model (registered, checkpoint, ONNX file or ``.pt2`` program) with its weights as
    packed codes; ``embeddings`` quantizes a graph's Gather tables too."""
    from edgekit.compilers.onnx_export import export_onnx, export_onnx_graph

    overrides = parse_overrides(list(layer_overrides))
    source = resolve_model(model, seed, log, input_shapes, embeddings, fix_shapes=False)
    log(f"exporting {source.label} ({fmt}) to ONNX ...")
    if source.is_graph:
        plan = make_plan(source.sites, fmt, overrides)
        check_quantizes(plan, fmt, source)
        return export_onnx_graph(source.graph, plan, source.sites, out_path)
    plan = make_plan(source.module, fmt, overrides)
    return export_onnx(source.module, source.example_inputs, plan, out_path)
