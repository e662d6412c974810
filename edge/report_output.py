"""The files of ``edgekit report``: ``index.html`` (self-contained), ``report.json`` and ``report.md``.

The directory is assembled in a staging directory beside the destination and moved into
place only when every file is written, so an interrupted run never leaves a report that
looks complete. ``report.json`` is checked against ``report_schema.json`` before anything
is written.
"""

from __future__ import annotations

import base64
import html
import json
from importlib import resources
from pathlib import Path

from edgekit.jobs.plots import latency_size_png, metric_vs_bits_png, output_agreement_png
from edgekit.utils.files import check_output_dir, staged_directory
from edgekit.utils.output import json_safe, markdown_table

REPORT_JSON = "report.json"
FILES = ("index.html", REPORT_JSON, "report.md", "accuracy_vs_bits.png", "latency_size.png")
SCHEMA = "report_schema.json"


def schema() -> dict:
    return json.loads(resources.files("edgekit").joinpath(SCHEMA).read_text())


def validate(document: dict) -> None:
    """Raise ``ValueError`` naming the first place ``document`` departs from the report schema."""
    import jsonschema

    try:
        jsonschema.validate(document, schema())
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ValueError(f"report does not match {SCHEMA} at {where}: {err.message}") from None


def evaluation_rows(sections: dict) -> list[dict]:
    metric_of = {m["model"]: m["metric"] for m in sections["models"]}
    rows = []
    for e in sections["evaluations"]:
        extra = {k: v for k, v in e.items() if k not in ("model", "format", "bits/weight", "seconds", "source",
                                                          metric_of[e["model"]])}
        rows.append({"model": e["model"], "format": e["format"], "bits/weight": e["bits/weight"],
                     "metric": metric_of[e["model"]], "value": e[metric_of[e["model"]]],
                     "other": ", ".join(f"{k} {_short(v)}" for k, v in extra.items()), "source": e["source"]})
    return rows


def build_rows(sections: dict) -> list[dict]:
    latency = {(r["model"], r["format"], r["target"]): r for r in sections["latency"]}
    rows = []
    for b in sections["builds"]:
        lat = latency.get((b["model"], b["format"], b["target"]))
        rows.append({"model": b["model"], "target": b["target"], "format": b["format"],
                     "bits/weight": b.get("weight_bits"),
                     "library (KiB)": None if not b["built"] else b["library_bytes"] / 1024,
                     "all artifacts (KiB)": None if not b["built"] else b["artifact_bytes"] / 1024,
                     "CUDA binary": {True: "yes", False: "no", None: ""}[b.get("cuda_binary")] if b["built"] else "",
                     "host ms": lat["median_ms"] if lat else None,
                     "build s": b.get("seconds") if b["built"] else None,
                     "build": b["source"] if b["built"] else f"failed: {b['error']}"})
    return rows


def budget_rows(sections: dict) -> list[dict]:
    rows = []
    for r in sections["budget"]:
        rows.append({"target": r["target"], "memory (GiB)": r["memory_bytes"] / 2**30 if r.get("memory_bytes") else None,
                     "model": r["model"], "deployed params": f"{r['deploy_params']:.3g}",
                     "best format that fits": r.get("format", "none" if r["fits"] is False else ""),
                     "bits/weight": r.get("bits/weight"),
                     "weights (GiB)": r["weight_bytes"] / 2**30 if r.get("weight_bytes") else None,
                     "metric": f"{r['metric']} {_short(r[r['metric']])}" if r.get("fits") else "",
                     "native": "yes" if r.get("native") else "", "note": r.get("note", "")})
    return rows


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def study_rows(document: dict) -> list[dict]:
    """One row per number of each study (``edgekit report --studies``), its headline metric first."""
    rows = []
    for study in document.get("studies", []):
        headline = study["metric"]
        for name in sorted(study["results"], key=lambda k: k != headline):
            rows.append({"study": study["study"], "result": name, "value": study["results"][name],
                         "headline": "yes" if name == headline else "", "seconds": study["seconds"]})
    return rows


def user_model_rows(document: dict) -> list[dict]:
    """Users' model files against float (``edgekit report --model-file``), one row per format and output."""
    keys = ("model", "format", "output", "layers", "bits/weight", "cosine", "max_abs_error", "mean_abs_error",
            "top1_agreement", "inputs")
    return [{k: row.get(k) for k in keys} for row in document.get("user_models", [])]


def user_model_pngs(document: dict) -> dict[str, bytes]:
    """File name -> agreement plot of each user model (what ``edgekit eval FILE --plot`` draws)."""
    rows = document.get("user_models", [])
    return {f"user_{Path(name).stem}.png": output_agreement_png([r for r in rows if r["model"] == name], name)
            for name in dict.fromkeys(r["model"] for r in rows)}


def model_rows(document: dict) -> list[dict]:
    return [{k: m[k] for k in ("model", "parameters", "deploy_params", "metric", "train_source", "train_seconds")}
            for m in document["models"]]


def budget_note(document: dict) -> str:
    return (f"Weights at the measured bits per weight times the deployment parameter count, against "
            f"{100 * document['setup']['memory_for_weights']:.0f}% of each target's memory; only formats built for "
            "the target's device kind in this report are considered, and the metric is the small model's.")


def render_markdown(document: dict) -> str:
    meta = document["meta"]
    parts = [(f"# edgekit report\n\ngit {meta['git_sha']}, seed {meta['seed']}, edgekit "
              f"{meta['versions']['edgekit']}, {meta['seconds']:.0f} s; `{meta['command']}`")]
    if document["models"]:
        parts += ["## Models\n\n" + markdown_table(model_rows(document)),
                  "## Accuracy against bit-width\n\n" + markdown_table(evaluation_rows(document)),
                  "## Not applicable\n\n" + (markdown_table(document["not_applicable"]) if document["not_applicable"] else "(none)"),
                  "## Builds, sizes and host latency\n\n" + markdown_table(build_rows(document)),
                  "## What fits where\n\n" + budget_note(document) + "\n\n" + markdown_table(budget_rows(document))]
    if document.get("studies"):
        parts.append("## Studies\n\n" + markdown_table(study_rows(document)))
    if document.get("user_models"):
        parts.append("## Your models against float\n\n" + USER_MODELS_NOTE + "\n\n"
                     + markdown_table(user_model_rows(document)))
    return "\n\n".join(parts) + "\n"


def _table_html(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    columns = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _img(png: bytes | None, alt: str) -> str:
    if png is None:  # a report of model files alone has no zoo plots
        return ""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1300px; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; }
td:first-child, td:nth-child(2), td:nth-child(3) { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; }
.meta { color: #555; font-size: 13px; }
"""


USER_MODELS_NOTE = ("Each model file's quantized ONNX export run in onnxruntime on the same inputs as its float graph: "
                    "cosine similarity, max and mean error and top-1 agreement of each output against float.")


def zoo_html(document: dict, accuracy_png: bytes | None, latency_png: bytes | None) -> str:
    """The zoo models' sections: models, accuracy, builds and latency, budget fit (none for model files alone)."""
    if not document["models"]:
        return ""
    return f"""<h2>Models</h2>
{_table_html(model_rows(document))}
<h2>Accuracy against bit-width</h2>
{_img(accuracy_png, "metric against bits per weight, one panel per model")}
{_table_html(evaluation_rows(document))}
<h2>Not applicable</h2>
{_table_html(document["not_applicable"])}
<h2>Latency and size against bit-width</h2>
{_img(latency_png, "host latency and build size against bits per weight")}
{_table_html(build_rows(document))}
<h2>What fits where</h2>
<p>{html.escape(budget_note(document))}</p>
{_table_html(budget_rows(document))}
"""


def render_html(document: dict, accuracy_png: bytes | None, latency_png: bytes | None,
                user_pngs: dict[str, bytes] | None = None) -> str:
    meta = document["meta"]
    cached = sum(r["source"] == "cache" for r in document["evaluations"])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>edgekit report</title><style>{STYLE}</style></head>
<body>
<h1>edgekit report</h1>
<p class="meta">git {html.escape(meta['git_sha'])} &middot; seed {meta['seed']} &middot; edgekit
{html.escape(meta['versions']['edgekit'])}, torch {html.escape(meta['versions']['torch'])}, TVM
{html.escape(meta['versions']['apache-tvm'])} &middot; {meta['seconds']:.0f} s &middot;
<code>{html.escape(meta['command'])}</code></p>
<p class="meta">Every figure was measured in this run or read from a cache entry whose key matches the current code
and config ({cached} of {len(document['evaluations'])} scores from the cache; the "source" columns say which).
Host latency is always measured in this run.</p>
{zoo_html(document, accuracy_png, latency_png)}
{"<h2>Studies</h2>" + _table_html(study_rows(document)) if document.get("studies") else ""}
{user_models_html(document, user_pngs or {})}
</body></html>
"""


def user_models_html(document: dict, pngs: dict[str, bytes]) -> str:
    if not document.get("user_models"):
        return ""
    images = "".join(_img(png, f"agreement with float of {name}") for name, png in pngs.items())
    return (f"<h2>Your models against float</h2><p>{html.escape(USER_MODELS_NOTE)}</p>{images}"
            + _table_html(user_model_rows(document)))


def write_report(out_dir: Path, sections: dict, meta: dict) -> Path:
    """Validate, render and write every file of the report; returns the path of ``index.html``."""
    check_output_dir(out_dir, REPORT_JSON)
    document = json_safe({"meta": meta, **sections})
    validate(document)
    zoo = bool(sections["models"])
    accuracy_png = metric_vs_bits_png(sections["models"], sections["evaluations"]) if zoo else None
    latency_png = latency_size_png(sections["models"], sections["builds"], sections["latency"]) if zoo else None
    user_pngs = user_model_pngs(document)
    with staged_directory(out_dir, REPORT_JSON) as staging:
        (staging / REPORT_JSON).write_text(json.dumps(document, indent=2) + "\n")
        (staging / "report.md").write_text(render_markdown(document))
        if zoo:
            (staging / "accuracy_vs_bits.png").write_bytes(accuracy_png)
            (staging / "latency_size.png").write_bytes(latency_png)
        for name, png in user_pngs.items():
            (staging / name).write_bytes(png)
        (staging / "index.html").write_text(render_html(document, accuracy_png, latency_png, user_pngs))
    return out_dir / "index.html"
