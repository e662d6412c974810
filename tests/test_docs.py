"""The docs show only figures their committed results files hold, and say where provenance is incomplete."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"benchmarks/results/([\w.-]+)")
# Said beside a citation of a file made on a dirty tree or without a recorded git SHA.
INCOMPLETE = "provenance incomplete"  # matched case-insensitively


def render_docs():
    if str(ROOT / "benchmarks") not in sys.path:  # as when run as a script: it imports its sibling seed_stats
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "benchmarks" / "render_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> list[Path]:
    return render_docs().PAGES


def paragraphs_citing(page: Path):
    """(file name, the citing paragraph with the one before it) for every results file a page cites."""
    paragraphs = re.split(r"\n\s*\n", page.read_text())
    for k, paragraph in enumerate(paragraphs):
        for name in CITATION.findall(paragraph):
            yield name.rstrip("."), "\n\n".join(paragraphs[max(k - 1, 0):k + 1])


def recorded_shas(path: Path) -> set[str]:
    return set(re.findall(r'"git_sha": "([^"]+)"', json.dumps(json.loads(path.read_text()))))


def test_generated_tables_match_committed_results():
    stale = render_docs().stale_pages()
    assert not stale, f"run `python benchmarks/render_docs.py`: {[str(p.relative_to(ROOT)) for p in stale]} differ"


def test_rendering_reads_the_results_file(tmp_path, monkeypatch):
    """A changed figure in a results file changes the page: the check can fail."""
    module = render_docs()
    results = tmp_path / "results"
    shutil.copytree(module.RESULTS, results)
    data = json.loads((results / "user_models.json").read_text())
    data["accuracy"][0]["cosine"] = 0.5
    (results / "user_models.json").write_text(json.dumps(data))
    monkeypatch.setattr(module, "RESULTS", results)
    page = (ROOT / "docs" / "own-model.md").read_text()
    assert module.render_page(page) != page


def test_cited_results_files_exist_and_are_committed():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot tell committed files from others")
    tracked = set(subprocess.run(["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    cited = {(page.relative_to(ROOT), name) for page in pages() for name, _ in paragraphs_citing(page)}
    assert cited, "no page cites a results file: the citation pattern is broken"
    missing = sorted((str(p), n) for p, n in cited if f"benchmarks/results/{n}" not in tracked)
    assert not missing, f"pages cite results files that are not committed: {missing}"


def test_incomplete_provenance_is_said_where_it_is_cited():
    unmarked = []
    for page in pages():
        for name, paragraph in paragraphs_citing(page):
            path = ROOT / "benchmarks" / "results" / name
            if path.suffix != ".json" or not path.exists():
                continue
            shas = recorded_shas(path)
            if (not shas or any(s.endswith("-dirty") for s in shas)) and INCOMPLETE not in paragraph.lower():
                unmarked.append((str(page.relative_to(ROOT)), name, sorted(shas) or "no git SHA"))
    assert not unmarked, f"cite these only with '{INCOMPLETE}' beside them, or re-measure on a clean tree: {unmarked}"


def test_source_line_says_incomplete_provenance():
    module = render_docs()
    clean = module.source_line("x.json", {"git_sha": "0123456789abcdef", "threads": 1})
    assert INCOMPLETE not in clean.lower()
    for meta in ({"git_sha": "0123456789abcdef-dirty"}, {}):
        assert INCOMPLETE in module.source_line("x.json", meta).lower()


def test_table_refuses_repeated_column_names():
    with pytest.raises(ValueError, match="repeated column names"):
        render_docs().table(["a", "b", "a"], [[1, 2, 3]])
