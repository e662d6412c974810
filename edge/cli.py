"""The ``edgekit`` command line."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import click

from edgekit.utils.output import OUTPUT_FORMATS, markdown_table, resolve_output_format, write_result

from . import __version__
from .fl_cli import fl
from .fuzzeval_cli import fuzzeval
from .job_runner import clear_errors, run_job
from .lab_cli import lab
from .nemo_cli import nemo


class FormatName(click.ParamType):
    """A weight-format name the format table resolves (``mxfp4``, ``mxint8@64``, ``liftquant:2.4``,
    ``fp16`` ...), of the given families (default: all); converted to its canonical name."""

    name = "format"

    def __init__(self, *families: str):
        self.families = families

    def convert(self, value, param, ctx):
        from edgekit.simulators import weight_formats as wf

        try:
            row = wf.resolve(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if self.families and row.family not in self.families:
            allowed = ", ".join(wf.names(self.families[0]) if len(self.families) == 1 else self.families)
            self.fail(f"{value!r} is a {row.family} format; this option takes {' or '.join(self.families)} "
                      f"formats ({allowed}; see `edgekit formats`)", param, ctx)
        return row.name


class BlockList(click.ParamType):
    name = "blocks"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        out = []
        for item in value.split(","):
            item = item.strip()
            if item == "tensor":
                out.append(item)
            elif item.isdigit() and int(item) > 0:
                out.append(int(item))
            else:
                self.fail(f"{item!r} is not a block size; use positive integers or 'tensor', "
                          f"comma-separated (e.g. tensor,256,32)", param, ctx)
        return out


def output_options(default_name: str):
    """``-o/--output PATH`` and ``--output-format md|json|csv``, shared by commands that write."""

    def wrap(fn):
        fn = click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default=None,
                          help="File format of --output (default: from its suffix, else json).")(fn)
        fn = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=default_name,
                          show_default=True, help="Where to write the results.")(fn)
        return fn

    return wrap


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="edgekit")
def main():
    """edgekit: which number format fits a model on a device, and what it costs, measured."""


@main.command()
@output_options(default_name=None)
def formats(output, output_format):
    """List every number format: bits per element with scales, range, special values."""
    from edgekit.jobs.format_table import format_rows

    rows = format_rows()
    text = markdown_table(rows)
    click.echo(text)
    if output:
        from edgekit.utils.provenance import provenance

        path = write_result(output, resolve_output_format(output, output_format), {"formats": rows}, provenance(), text)
        click.echo(f"wrote {path}", err=True)


@main.command()
@click.argument("specs", nargs=-1, metavar="[SPEC]...")
@output_options(default_name=None)
def targets(specs, output, output_format):
    """List hardware targets: memory, bandwidth, peak TFLOP/s, native formats, TVM target, runs here.

    Without SPEC, every registry target. A SPEC is a registry name, any TVM tag
    (tvm.target.list_tags()) or a TVM target as a JSON dict, e.g. '{"kind": "cuda", "arch": "sm_90"}'.
    """
    from edgekit.jobs.target_table import target_rows
    from edgekit.targets import load_target

    try:
        loaded = [load_target(s) for s in specs]
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="SPEC") from None
    rows = target_rows(loaded or None)
    text = markdown_table(rows)
    click.echo(text)
    if output:
        from edgekit.utils.provenance import provenance

        path = write_result(output, resolve_output_format(output, output_format), {"targets": rows}, provenance(), text)
        click.echo(f"wrote {path}", err=True)


def _use_cache_dir(ctx, param, value):
    """Make ``--cache-dir`` the cache root of the whole command, also of what models cache on
    their own (the policy's Meta-World demonstrations), not only of checkpoints and builds."""
    if value is not None:
        from edgekit.models.cache import CACHE_ENV

        previous = os.environ.get(CACHE_ENV)
        os.environ[CACHE_ENV] = str(value)
        ctx.call_on_close(lambda: os.environ.__setitem__(CACHE_ENV, previous) if previous is not None
                          else os.environ.pop(CACHE_ENV, None))
    return value


def cache_dir_option(fn):
    return click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                        callback=_use_cache_dir,
                        help="Model cache (default: $EDGEKIT_CACHE_DIR, else $XDG_CACHE_HOME/edgekit, "
                             "else ~/.cache/edgekit).")(fn)


def config_options(fn):
    fn = click.option("--tiny", is_flag=True, help="Start from the model's tiny test config.")(fn)
    return click.option("--config", "config_items", multiple=True, metavar="KEY=VALUE",
                        help="Config override (repeatable), e.g. --config steps=200 --config seed=1.")(fn)


def overrides_from(config_items) -> dict:
    from edgekit.models.registry import parse_config_items

    try:
        return parse_config_items(list(config_items))
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--config") from None


@main.command()
@cache_dir_option
@output_options(default_name=None)
def models(cache_dir, output, output_format):
    """List the model zoo: parameters and metric of each default config, and its value when cached."""
    from edgekit.jobs.evaluate import model_rows

    rows = model_rows(cache_dir)
    text = markdown_table(rows)
    click.echo(text)
    if output:
        from edgekit.utils.provenance import provenance

        path = write_result(output, resolve_output_format(output, output_format), {"models": rows}, provenance(), text)
        click.echo(f"wrote {path}", err=True)


@main.command()
@click.argument("name", metavar="NAME")
@config_options
@click.option("--retrain", is_flag=True, help="Discard a finished cached model and train again.")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the trained model as a checkpoint file here.")
@cache_dir_option
@output_options(default_name=None)
def train(name, config_items, tiny, retrain, save, cache_dir, output, output_format):
    """Train a registered model (or load it from the cache) and score it.

    Training is seeded and checkpointed into the cache as it goes: an interrupted run
    (Ctrl-C, a killed process) resumes where it stopped and ends with the same weights.
    """
    from edgekit.jobs.evaluate import train_model
    from edgekit.utils.provenance import provenance

    result = run_job(train_model, name, overrides_from(config_items), tiny=tiny, cache_dir=cache_dir,
                     retrain=retrain)
    how = ("loaded from the cache" if result["cached"] else
           f"resumed at step {result['resumed_from']}" if result["resumed_from"] else "trained")
    click.echo(f"{name}: {how}, {result['parameters']} parameters, {result['steps']} steps, "
               f"{result['train_seconds']:.1f} s of training; {result['checkpoint']}", err=True)
    text = markdown_table([result["evaluation"]])
    click.echo(text)
    if save:
        from edgekit.models.registry import load_checkpoint

        shutil.copyfile(result["checkpoint"], save)
        load_checkpoint(save)  # the copy verifies like the original
        click.echo(f"wrote {save}", err=True)
    if output:
        path = write_result(output, resolve_output_format(output, output_format), {"train": [result]},
                            provenance(result["config"]["seed"]), text)
        click.echo(f"wrote {path}", err=True)


def input_shape_option(fn):
    return click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=DxD...",
                        help="Size of a model file's input (repeatable), e.g. --input-shape input_ids=1x128; "
                             "a symbolic batch dim defaults to 1, other symbolic dims must be given.")(fn)


def input_shapes_from(items) -> dict:
    from edgekit.compilers.onnx_graph import parse_input_shapes

    try:
        return parse_input_shapes(items)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--input-shape") from None


def comma_list(text: str | None) -> list[str] | None:
    return [item.strip() for item in text.split(",") if item.strip()] if text else None


@main.command(name="eval")
@click.argument("model", metavar="MODEL")
@click.option("--format", "formats_", type=FormatName(), multiple=True,
              help="Quantize the weights of every Linear/Conv layer in this format first (repeatable; "
                   "liftquant:BITS or liftquant_DtoD code Linear layers only); the float model is always scored too.")
@click.option("--formats", "format_list", default=None, metavar="F,G",
              help="The same as repeated --format, comma-separated.")
@click.option("--inputs", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A model file's inputs: an .npz keyed by input name (default: standard normal float inputs).")
@input_shape_option
@click.option("--embeddings", is_flag=True, help="Quantize a model file's embedding tables (Gather) too.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A model file's comparison as a PNG (default: beside --output).")
@config_options
@cache_dir_option
@output_options(default_name=None)
def eval_(model, formats_, format_list, inputs, input_shapes, embeddings, plot, config_items, tiny, cache_dir, output,
          output_format):
    """Score MODEL with its own metric in float and in each --format; or compare a model file's outputs.

    MODEL is a registered name or a checkpoint: it is scored with its own metric (a
    registered model is trained first unless the cache holds it; scores of a cached
    model are cached beside it). MODEL as an .onnx or torch.export .pt2 file has no
    metric: each format's quantized ONNX runs in onnxruntime on the same inputs as float,
    and each output is compared with float (cosine, max and mean error, top-1 agreement).
    """
    from tqdm import tqdm

    from edgekit.simulators import weight_formats as wf
    from edgekit.utils.provenance import provenance

    names = list(dict.fromkeys([*formats_, *(FormatName().convert(f, None, None)
                                             for f in comma_list(format_list) or [])]))
    if Path(model).suffix.lower() in (".onnx", ".pt2"):
        from edgekit.jobs.graph_eval import default_formats, evaluate_model_file
        from edgekit.jobs.plots import output_agreement_png

        if config_items or tiny:
            raise click.UsageError("--config and --tiny apply to registered models, not to a model file")
        names = [f for f in names or default_formats() if f != wf.REFERENCE]

        def file_bar(items):
            return tqdm(items, desc=f"eval {Path(model).name}", unit="format", leave=False)

        rows = run_job(evaluate_model_file, model, names, inputs, input_shapes_from(input_shapes), embeddings,
                       progress=file_bar)
        text = f"{Path(model).name}: outputs under quantized weights against float (onnxruntime)\n\n" + markdown_table(rows)
        click.echo(text)
        plot = plot or (output.with_suffix(".png") if output else None)
        if plot:
            from edgekit.utils.output import atomic_write

            atomic_write(plot, output_agreement_png(rows, Path(model).name))
            click.echo(f"wrote {plot}", err=True)
        if output:
            path = write_result(output, resolve_output_format(output, output_format), {"eval": rows}, provenance(0),
                                text)
            click.echo(f"wrote {path}", err=True)
        return
    if inputs or input_shapes or embeddings or plot:
        raise click.UsageError("--inputs, --input-shape, --embeddings and --plot apply to .onnx and .pt2 files")

    from edgekit.jobs.evaluate import evaluate_formats, resolve

    entry, config, module, directory = run_job(resolve, model, overrides_from(config_items), tiny=tiny,
                                               cache_dir=cache_dir)

    def bar(items):
        return tqdm(items, desc=f"eval {entry.name}", unit="format", leave=False)

    names = [wf.REFERENCE, *dict.fromkeys(f for f in names if f != wf.REFERENCE)]
    with clear_errors():
        rows = evaluate_formats(entry, config, module, names, directory, progress=bar)
    text = f"{entry.name}: {entry.metric_label}\n\n" + markdown_table(rows)
    click.echo(text)
    if output:
        path = write_result(output, resolve_output_format(output, output_format), {"eval": rows},
                            provenance(config.seed), text)
        click.echo(f"wrote {path}", err=True)


class WeightFormat(click.ParamType):
    """A plan entry: a format from the table or a float baseline (fp32, fp16)."""

    name = "format"

    def convert(self, value, param, ctx):
        from edgekit.compilers.plan import check_weight_format

        try:
            return check_weight_format(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)


def model_argument(fn):
    return click.argument("model", metavar="MODEL")(fn)


def layer_option(fn):
    return click.option("--layer", "layers", multiple=True, metavar="NAME=FORMAT",
                        help="Per-layer format override (repeatable), e.g. --layer fc1=mxint8.")(fn)


def activations_option(fn):
    return click.option(
        "--activations", type=click.Choice(["float32", "mxint8"]), default="float32", show_default=True,
        help="mxint8: batch-1 Linear layers in mxfp4, mxint4, nvfp4 or mxfp6_e2m3 on x86 CPUs quantize their input "
             "to MXINT8 in the kernel and sum in integers (the OCP MX dot product: faster, not x @ W.T).")(fn)



@main.command()
@click.option("--models", default=None, metavar="A,B", help="Models to report (default: lm,fluxnet,meanflow_policy).")
@click.option("--formats", default=None, metavar="F,G",
              help="Weight formats (default: fp32, every MX format, NVFP4 and LiftQuant 16to8, 24to10, 12to4, "
                   "16to4; liftquant:BITS picks a configuration); fp32 is always included.")
@click.option("--targets", default=None, metavar="T,U",
              help="Targets to compile for (default: host,h100,rpi4); CPU targets that run here are also timed.")
@click.option("--deploy-params", "deploy_items", multiple=True, metavar="MODEL=COUNT",
              help="Parameter count of a model's real deployment, for the memory budgets (e.g. lm=7e9).")
@click.option("--configs", type=click.Choice(["report", "default", "tiny"]), default="report", show_default=True,
              help="Model configs: report (default architectures, shorter training), default (as `edgekit train` "
                   "trains them, sharing its checkpoints) or tiny (a quick look at the pipeline, not a result).")
@click.option("--rounds", type=click.IntRange(1), default=15, show_default=True,
              help="Timing rounds per host build.")
@click.option("--studies", default=None, metavar="A,B",
              help="Algorithm studies to run and report too (`edgekit study` lists them); none by default.")
@click.option("--model-file", "model_files", multiple=True, metavar="MODEL.onnx[=INPUTS.npz]",
              help="Your own ONNX or .pt2 model (repeatable): every format against float on the inputs (drawn "
                   "where none are given), as `edgekit eval MODEL` does. Without --models, only these files.")
@cache_dir_option
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=Path("report"),
              show_default=True, help="Report directory (index.html, report.json, report.md, plots).")
@click.option("-v", "--verbose", is_flag=True,
              help="Show library warnings (TVM, ...) on the terminal too; they always go to OUTPUT/edgekit.log.")
def report(models, formats, targets, deploy_items, configs, rounds, studies, model_files, cache_dir, output, verbose):
    """Accuracy against bit-width, latency and size per target, and the best format that fits each target.

    Trains or loads each model, scores it in every format, compiles it for each target
    (builds are cached), times the host build, and fits each registry target's memory.
    Names are checked before any work; the directory appears only when complete.
    """
    import time

    from tqdm import tqdm

    from edgekit.jobs.report import check_plan, run_report
    from edgekit.models.training import progress_interval
    from edgekit.utils.files import check_output_dir
    from edgekit.utils.provenance import provenance

    from .console import keep_log, library_log
    from .report_output import REPORT_JSON, write_report

    deploy = {}
    for item in deploy_items:
        name, _, count = item.partition("=")
        try:
            deploy[name.strip()] = float(count)
        except ValueError:
            raise click.BadParameter(f"{item!r} must look like MODEL=COUNT (e.g. lm=7e9)",
                                     param_hint="--deploy-params") from None
    with clear_errors():
        plan = check_plan(comma_list(models), comma_list(formats), comma_list(targets), deploy, configs, rounds,
                          comma_list(studies), model_files)
        check_output_dir(output, REPORT_JSON)

    def bar(items, desc):
        return tqdm(items, desc=desc, leave=False, dynamic_ncols=True, mininterval=progress_interval())

    start, code = time.perf_counter(), provenance(0)  # the code the run starts with: files may change while it runs
    with library_log(verbose) as log_path:
        sections = run_job(run_report, plan, cache_dir=cache_dir, progress=bar)
    meta = {**code, "seconds": time.perf_counter() - start,
            "plan": {"models": plan.models, "formats": plan.formats, "targets": plan.targets,
                     "deploy_params": {m: plan.deploy_params[m] for m in plan.models}, "configs": plan.configs,
                      "studies": plan.studies, "model_files": [vars(m) for m in plan.model_files]}}
    with clear_errors():
        index = write_report(output, sections, meta)
    click.echo(f"report written: {index.resolve()} (library warnings: {keep_log(log_path, index.parent)})")


@main.command(name="compile")
@model_argument
@click.option("--format", "fmt", type=WeightFormat(), default=None,
              help="Weight format of every Linear/Conv layer (a format from `edgekit formats`, fp32 or fp16; "
                   "default mxfp4, or fp32 for the layers --codes leaves out).")
@layer_option
@click.option("--codes", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="LiftQuant codes from `edgekit quantize --codes`: those layers are built from them as they are.")
@click.option("--target", "target", default="host", show_default=True,
              help="A target from `edgekit targets`, any TVM tag, or a TVM target as a JSON dict.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=Path("build"),
              show_default=True, help="Build directory (written in full or not at all).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for training a registered model.")
@input_shape_option
@click.option("--max-batch", type=click.IntRange(1), default=None,
              help="Build for any batch from 1 to this (1: exactly 1). Default: a model file's symbolic batch up "
                   "to 64, a zoo model's example batch.")
@activations_option
def compile_(model, fmt, layers, codes, target, output, seed, input_shapes, max_batch, activations):
    """Compile MODEL (registered name, checkpoint, .onnx or torch.export .pt2) for a target: library, CUDA
    source, manifest.

    Planned weights are stored as packed codes and scales in the simulators' bytes and
    decoded inside fused matrix kernels. A preflight lists what the target cannot run.
    """
    from edgekit.jobs.compile import compile_model
    from edgekit.simulators import weight_formats as wf

    fmt = fmt or (wf.REFERENCE if codes else "mxfp4")  # quantize leaves the layers it does not code in float
    manifest = run_job(compile_model, model, fmt, target, output, layers, seed=seed, codes=codes,
                       input_shapes=input_shapes_from(input_shapes), max_batch=max_batch, activations=activations)
    rows = [{"layer": name, **{k: r[k] for k in ("format", "op", "layout", "activations", "codes_bytes",
                                                  "scales_bytes", "weight_bits")}} for name, r in manifest["layers"].items()]
    click.echo(markdown_table(rows))
    totals = manifest["totals"]
    if totals["weights"]:
        click.echo(f"\n{totals['weights']} weights in {totals['codes_bytes']} code bytes + {totals['scales_bytes']} "
                   f"scale bytes: {totals['weight_bits']:.3f} bits/weight")
    else:
        click.echo("\nno layer quantized: every weight is float")
    binary = manifest["artifacts"].get("cuda_binary")
    if binary is not None and not binary["built"]:
        click.echo(f"no CUDA binary ({binary['reason']}): the device will need a CUDA compiler to load the build",
                   err=True)
    shapes = ", ".join(f"{i['name']} {i['shape']}" for i in manifest["inputs"])
    batch = f"; any batch up to {manifest['max_batch']}" if manifest.get("max_batch") else ""
    click.echo(f"inputs: {shapes}{batch}", err=True)
    click.echo(f"wrote {output}/ ({', '.join(sorted(p.name for p in output.iterdir()))})", err=True)


@main.command()
@model_argument
@click.option("--format", "fmt", type=WeightFormat(), default="mxfp4", show_default=True,
              help="Weight format of every Linear/Conv layer.")
@layer_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("model.onnx"),
              show_default=True, help="ONNX file to write.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for training a registered model.")
@input_shape_option
@click.option("--embeddings", is_flag=True, help="Quantize a model file's embedding tables (Gather) too.")
def export(model, fmt, layers, output, seed, input_shapes, embeddings):
    """Export MODEL (registered name, checkpoint, .onnx or .pt2) to standard ONNX whose weights are packed
    codes decoded with Gather tables."""
    from edgekit.jobs.compile import export_model

    summary = run_job(export_model, model, fmt, output, layers, seed=seed,
                      input_shapes=input_shapes_from(input_shapes), embeddings=embeddings)
    totals = summary["totals"]
    click.echo(f"wrote {output}: {len(summary['layers'])} quantized layers, {totals['weight_bits']:.3f} bits/weight, "
               f"{totals['file_bytes']} bytes", err=True)


@main.command(name="run")
@click.argument("build_dir", metavar="BUILD_DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--input", "inputs", multiple=True, required=True, metavar="FILE",
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="An input as .npy (repeat in the build's input order), or one .npz keyed by input name.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the outputs: .npy for the first, .npz for all (output0, output1, ...).")
def run_build(build_dir, inputs, output):
    """Run a build from `edgekit compile` with TVM's runtime alone, as the device runs it.

    The build's target and CPU are checked against this machine, and each input's shape
    against the build's, before anything runs.
    """
    import numpy as np

    from edgekit.compilers.runtime import load
    from edgekit.utils.files import atomic_write

    with clear_errors():
        try:
            build = load(build_dir)
        except RuntimeError as err:
            raise ValueError(str(err)) from None
        arrays = read_arrays(inputs, [i["name"] for i in build.inputs])
        outputs = build(*arrays)
    for k, out in enumerate(outputs):
        click.echo(f"output{k}: shape {list(out.shape)} {out.dtype}, mean {float(np.mean(out)):.6g}, "
                   f"max |y| {float(np.max(np.abs(out), initial=0)):.6g}")
    if output:
        buffer = io.BytesIO()
        if output.suffix.lower() == ".npz":
            np.savez(buffer, **{f"output{k}": out for k, out in enumerate(outputs)})
        else:
            np.save(buffer, outputs[0])
        atomic_write(output, buffer.getvalue())
        click.echo(f"wrote {output}", err=True)


def read_arrays(paths: list[Path], names: list[str]) -> list:
    """Arrays for the build's inputs from .npy files in order, or from one .npz keyed by input name."""
    import numpy as np

    if len(paths) == 1 and paths[0].suffix.lower() == ".npz":
        with np.load(paths[0]) as data:
            missing = [n for n in names if n not in data.files]
            if missing:
                raise ValueError(f"--input {paths[0]} holds {data.files}; the build takes {names}")
            return [data[n] for n in names]
    try:
        return [np.load(p, allow_pickle=False) for p in paths]
    except ValueError as err:
        raise ValueError(f"--input: not a .npy array file: {err}") from None


@main.command()
@model_argument
@click.option("--target", "target", default="host", show_default=True,
              help="A target from `edgekit targets` (or a TVM tag / JSON dict) that runs on this machine.")
@click.option("--format", "fmt", type=WeightFormat(), default="mxfp4", show_default=True,
              help="Weight format of every Linear/Conv layer for TVM and the quantized ONNX graph.")
@click.option("-r", "--repeat", type=click.IntRange(1), default=20, show_default=True,
              help="Rounds; each round times every backend once, in rotating order.")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="Threads for every backend (default: this machine's CPU count).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for training and for the input.")
@activations_option
@output_options(default_name="bench.json")
def bench(model, target, fmt, repeat, threads, seed, activations, output, output_format):
    """Time MODEL on a target: TVM build, onnxruntime (float and quantized graph), PyTorch eager.

    All backends run in one process with the same thread count, interleaved over rounds.
    A target that does not run on this machine is refused (exit code 1).
    """
    from tqdm import tqdm

    from edgekit.jobs.bench import bench_model, render_bench
    from edgekit.targets import load_target
    from edgekit.utils.provenance import provenance

    try:
        load_target(target)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--target") from None

    def bar(rounds, total):
        return tqdm(rounds, total=total, desc="bench", unit="round", leave=False)

    sections = run_job(bench_model, model, fmt, target, repeat=repeat, threads=threads, seed=seed, progress=bar,
                       activations=activations)
    text = render_bench(sections)
    click.echo(text)
    path = write_result(output, resolve_output_format(output, output_format), sections, provenance(seed), text)
    click.echo(f"wrote {path}", err=True)


@main.command()
@click.option("--format", "formats_", type=FormatName("block"), multiple=True,
              help="Formats to measure (repeatable; default: every format, INT ones also with asymmetric clipping).")
@click.option("--blocks", type=BlockList(), default="tensor,256,128,64,32,16", show_default=True,
              help="Block sizes; 'tensor' is one scale for the whole tensor.")
@click.option("--tensors", default="gaussian,laplace,student-t(3),outlier-channels,model",
              show_default=True, help="Tensor families; 'model' is the trained digits MLP's weights.")
@click.option("--rotation", type=click.Choice(["both", "none", "hadamard"]), default="both", show_default=True,
              help="Measure without and/or with a 32x32 Hadamard rotation before quantizing.")
@click.option("--rows", type=click.IntRange(1), default=512, show_default=True, help="Rows of each synthetic tensor.")
@click.option("--cols", type=click.IntRange(32), default=1024, show_default=True,
              help="Columns (the blocked axis) of each synthetic tensor; a multiple of 32.")
@click.option("--seed", type=int, default=0, show_default=True)
@output_options(default_name="qsnr.json")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG plot path (default: --output with a .png suffix).")
def qsnr(formats_, blocks, tensors, rotation, rows, cols, seed, output, output_format, plot):
    """The INT-vs-FP study: QSNR of each format across block sizes, tensor families and rotation."""
    from tqdm import tqdm

    from edgekit.jobs import qsnr_study as study
    from edgekit.jobs.plots import qsnr_plot
    from edgekit.utils.provenance import provenance

    if cols % study.ROTATION_SIZE:
        raise click.BadParameter(f"must be a multiple of {study.ROTATION_SIZE}, got {cols}", param_hint="--cols")
    synthetic = study.synthetic_tensors(seed, (rows, cols))
    wanted = [t.strip() for t in tensors.split(",") if t.strip()]
    known = [*synthetic, "model"]
    unknown = [t for t in wanted if t not in known]
    if unknown or not wanted:
        raise click.BadParameter(f"unknown {unknown}; allowed: {', '.join(known)}", param_hint="--tensors")
    families = {name: [synthetic[name]] for name in wanted if name in synthetic}
    if "model" in wanted:
        click.echo("training the digits MLP for its weights ...", err=True)
        families["model"] = study.model_weights(seed)
    rotations = {"both": (False, True), "none": (False,), "hadamard": (True,)}[rotation]
    fmt_names = list(formats_) or study.study_formats()
    def bar(jobs, total):
        return tqdm(jobs, total=total, desc="qsnr", unit="case", leave=False)
    result = study.run_sweep(families, fmt_names, blocks, rotations, progress=bar)
    sections = {"qsnr": result, "crossover": study.crossovers(result), "clipping_bias": study.clipping_bias(seed)}
    text = render_qsnr(sections, blocks)
    click.echo(text)
    path = write_result(output, resolve_output_format(output, output_format), sections, provenance(seed), text)
    plot = plot or output.with_suffix(".png")
    qsnr_plot(result, plot, blocks, title="QSNR (dB) by block size: INT solid, FP dashed")
    click.echo(f"wrote {path} and {plot}", err=True)


def render_qsnr(sections: dict[str, list[dict]], blocks: list) -> str:
    """Markdown: a QSNR pivot per rotation (rows tensor x block, a column per format), then summaries."""
    rows = sections["qsnr"]
    formats = list(dict.fromkeys(r["format"] for r in rows))
    parts = []
    for rotation in dict.fromkeys(r["rotation"] for r in rows):
        pivot = []
        for tensor in dict.fromkeys(r["tensor"] for r in rows):
            for block in blocks:
                cells = {r["format"]: r["qsnr_db"] for r in rows
                         if (r["tensor"], r["rotation"], r["block"]) == (tensor, rotation, block)}
                if cells:
                    pivot.append({"tensor": tensor, "block": block, **cells})
        parts.append(f"### QSNR (dB), rotation: {rotation}\n\n" + markdown_table(pivot, ["tensor", "block", *formats]))
    parts.append("### Where INT overtakes FP\n\n" + markdown_table(sections["crossover"]))
    parts.append("### Gradient bias of INT8 clipping (mean of Q(x) - x, BF16 Gaussian input)\n\n"
                 + markdown_table(sections["clipping_bias"]))
    return "\n\n".join(parts)


@main.command()
@click.option("--format", "formats_", type=FormatName("block"), multiple=True,
              help="Formats to run (repeatable; default: every format).")
@output_options(default_name=None)
@click.option("--seed", type=int, default=0, show_default=True)
def demo(formats_, output, output_format, seed):
    """Quantize a built-in tensor and a small trained model in every format; print what it costs."""
    from edgekit.jobs.demo import render_demo, run_demo
    from edgekit.simulators import FORMATS
    from edgekit.utils.provenance import provenance

    sections = run_demo(list(formats_) or list(FORMATS), seed, log=lambda msg: click.echo(msg, err=True))
    text = render_demo(sections)
    click.echo(text)
    if output:
        path = write_result(output, resolve_output_format(output, output_format), sections, provenance(seed), text)
        click.echo(f"wrote {path}", err=True)


from .quantize_cli import quantize

main.add_command(quantize)

main.add_command(fl)
main.add_command(fuzzeval)
main.add_command(nemo)
main.add_command(lab)

from .study_cli import study

main.add_command(study)


if __name__ == "__main__":
    main()
