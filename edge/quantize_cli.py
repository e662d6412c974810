"""The ``edgekit quantize`` command: LiftQuant (or GPTQ) a model to a bit-width, a size, or a target's memory."""

from __future__ import annotations

from pathlib import Path

import click

from edgekit.utils.output import OUTPUT_FORMATS, markdown_table, write_result
from edgekit.utils.provenance import provenance


class ConfigList(click.ParamType):
    """Comma-separated LiftQuant configurations (``24to10,16to8`` or ``liftquant_24to10``)."""

    name = "configs"

    def convert(self, value, param, ctx):
        from edgekit.simulators.formats import get_liftquant_format

        if not isinstance(value, str):
            return value
        try:
            return [get_liftquant_format(item).name for item in value.split(",") if item.strip()]
        except ValueError as err:
            self.fail(str(err), param, ctx)


@click.command(name="quantize")
@click.argument("model", metavar="MODEL")
@click.option("--method", type=click.Choice(["liftquant", "gptq"]), default="liftquant", show_default=True,
              help="liftquant: a knapsack of LiftQuant configurations; gptq: GPTQ on the INT or MX grid that "
                   "stores the most bytes within the request.")
@click.option("--grids", default=None, help="GPTQ: grids to choose from, e.g. int4_g128,int3_g64,mxfp4 "
              "(default: INT2/3/4 at groups of 64 and 128, MXINT4, MXFP4).")
@click.option("--input-scaling/--no-input-scaling", default=True, show_default=True,
              help="GPTQ: activation-aware input multipliers (LiftQuant always chooses them).")
@click.option("--damp", type=click.FloatRange(0, min_open=True), default=0.01, show_default=True,
              help="GPTQ: Hessian damping, a fraction of its mean diagonal.")
@click.option("--bits", type=float, default=None, help="Bits per quantized weight, scales and codebooks included.")
@click.option("--budget", default=None, help="Size of the whole model, e.g. 300MB, 1.5GiB (float parts included).")
@click.option("--target", default=None, help="A target from `edgekit targets`: its memory is the ceiling.")
@click.option("--configs", type=ConfigList(), default=None,
              help="LiftQuant configurations to choose from (default: every row of the table).")
@click.option("--group-size", type=click.IntRange(1), default=None,
              help="Weights per E4M3 group scale along each row (a multiple of every chosen d); default: row scales only.")
@click.option("--calibration-batches", type=click.IntRange(1), default=8, show_default=True,
              help="Batches of the model's training data for statistics and fine-tuning.")
@click.option("--finetune-steps", type=click.IntRange(0), default=200, show_default=True,
              help="Block-output fine-tuning steps per unit (0: none).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the model with its LiftQuant weights (simulated, float32) as a checkpoint.")
@click.option("--codes", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the packed codes and scales of every layer (.npz).")
@click.option("--inputs", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A model file's calibration inputs: an .npz keyed by input name (default: standard normal floats).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("quantize.json"),
              show_default=True, help="Where to write the choice and the achieved figures.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default=None,
              help="File format of --output (default: from its suffix, else json).")
def quantize(model, method, grids, input_scaling, damp, bits, budget, target, configs, group_size, calibration_batches,
             finetune_steps, seed, save, codes, inputs, output, output_format):
    """Quantize MODEL (registered name, checkpoint, .onnx or .pt2) with LiftQuant to --bits, --budget or --target.

    A knapsack over layer sensitivity and bytes picks one configuration per Linear layer so
    that the bits per weight (or the model's size) land within 1% below the request; a
    target's memory is a ceiling. Prints and saves the per-layer choice and the totals.
    A model file is calibrated on --inputs with onnxruntime and not fine-tuned; it is scored
    by the cosine similarity of its output to float.

    --method gptq quantizes every Linear layer of a zoo model with GPTQ on one grid: the
    candidate (--grids) that stores the most bytes within the request.
    """
    from edgekit.jobs.gptq import run_gptq
    from edgekit.jobs.quantize import result_rows, run_quantize
    from edgekit.utils.output import resolve_output_format

    from .job_runner import run_job

    grid_list = [g.strip() for g in grids.split(",") if g.strip()] if grids else None
    options = {"bits": bits, "budget": budget, "target": target, "candidates": configs, "group_size": group_size,
               "calibration_batches": calibration_batches, "seed": seed, "save": save, "codes": codes,
               "inputs": inputs, "grids": grid_list}
    if method == "gptq":
        result = run_job(run_gptq, model, input_scaling=input_scaling, damp=damp, **options)
    else:
        result = run_job(run_quantize, model, finetune_steps=finetune_steps, **options)
    totals = result["totals"]
    label = "LiftQuant" if method == "liftquant" else f"GPTQ {result['settings']['grid']}"
    text = markdown_table(result_rows(result))
    asked = (f"{bits} bits/weight" if bits is not None else
             f"{totals['requested_bytes']} bytes" + (f" ({target} memory, a ceiling)" if target else ""))
    text += (f"\n\nasked {asked}; achieved {totals['bits_per_weight']:.4f} bits/weight, "
             f"{totals['quantized_bytes']} bytes of {label} weights ({totals['codebook_bytes']} of codebooks) "
             f"+ {totals['float_bytes']} float bytes = {totals['model_bytes']} bytes\n"
             f"{result['metric']}: float {result['float'][result['metric']]:.4f}, "
             f"{label} {result['quantized'][result['metric']]:.4f}")
    click.echo(text)
    path = write_result(output, resolve_output_format(output, output_format),
                        {"layers": result["layers"], "totals": [totals], "result": [result]}, provenance(seed), text)
    click.echo(f"wrote {path}", err=True)
