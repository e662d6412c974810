"""Train LiftQuant codebooks (or re-measure their searches) and write them into the package.

    python benchmarks/train_codebooks.py [CONFIG ...] [--remeasure]

The files land in ``simulators/liftquant/data/`` (``--output-dir`` to write elsewhere); the
method is described in :mod:`edgekit.simulators.liftquant.codebooks`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgekit.simulators.formats import LIFTQUANT_FORMATS, get_liftquant_format
from edgekit.simulators.liftquant.codebooks import (
    CODEBOOK_DIR,
    codebook_path,
    read_codebook,
    remeasure,
    train_codebook,
    write_codebook,
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Train LiftQuant codebooks and write them into the package.")
    parser.add_argument("configs", nargs="*", help="configurations (24to10 or liftquant_24to10); default: all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--output-dir", type=Path, default=CODEBOOK_DIR)
    parser.add_argument("--skip-existing", action="store_true", help="leave configurations that have a file alone")
    parser.add_argument("--remeasure", action="store_true",
                        help="refresh the search measurements (and default search) of existing files; no training")
    args = parser.parse_args(argv)
    names = [get_liftquant_format(c).name for c in args.configs] or list(LIFTQUANT_FORMATS)
    for name in names:
        fmt = LIFTQUANT_FORMATS[name]
        if args.remeasure:
            codebook = remeasure(read_codebook(fmt, codebook_path(fmt, args.output_dir)))
        elif args.skip_existing and codebook_path(fmt, args.output_dir).is_file():
            continue
        else:
            codebook = train_codebook(fmt, seed=args.seed, restarts=args.restarts, steps=args.steps)
        path = write_codebook(codebook, args.output_dir)
        measured = {k: v for k, v in codebook.metadata.items() if k.startswith("mse") or k == "default_search"}
        print(f"wrote {path}: {json.dumps(measured)}")




if __name__ == "__main__":
    main()
