"""``edgekit compile`` and ``edgekit export``: a model, a format plan and a target in, artifacts out.

Both resolve what the user names (a zoo model, a checkpoint, an ONNX file, a ``.pt2``
program) into a torch module or an ONNX graph; compile then hands it to the pipeline of
:mod:`edgekit.compilers.pipeline`, export to :mod:`edgekit.compilers.onnx_export`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.compilers.importer import ImportedModel, check_max_batch, import_onnx, import_torch
from edgekit.compilers.plan import make_plan, parse_overrides
from edgekit.compilers.preflight import check_quantizes
from edgekit.compilers.runtime import MANIFEST
from edgekit.utils.files import check_output_dir


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


def compile_model(model: str, fmt: str, target_spec: str, out_dir, layer_overrides: list[str] = (),
                  seed: int = 0, log: Callable[[str], None] = print, codes=None,
                  loaded: tuple[ModelSource, ImportedModel] | None = None, input_shapes: dict | None = None,
                  max_batch: int | None = None, activations: str = "float32") -> dict:
    """Compile ``model`` with every Linear/Conv weight in ``fmt`` for ``target_spec`` into ``out_dir``.

    ``codes``: an ``edgekit quantize --codes`` file (see :func:`.compilers.pipeline.compile_imported`).
    ``loaded``: ``load_model(model, seed)`` done already (lowering leaves it unchanged, so
    one import serves many builds).
    """
    from edgekit.compilers.pipeline import compile_imported
    from edgekit.targets import load_target

    target = load_target(target_spec)
    check_output_dir(Path(out_dir), MANIFEST)
    overrides = parse_overrides(list(layer_overrides))
    source, imported = loaded or load_model(model, seed, log, input_shapes, max_batch)
    return compile_imported(imported, fmt, target, out_dir, overrides=overrides, codes=codes, label=source.label,
                            kind=source.kind, skipped=source.skipped, seed=seed, activations=activations, log=log)


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
        check_quantizes(plan, fmt, source.label, source.skipped)
        return export_onnx_graph(source.graph, plan, source.sites, out_path)
    plan = make_plan(source.module, fmt, overrides)
    return export_onnx(source.module, source.example_inputs, plan, out_path)
