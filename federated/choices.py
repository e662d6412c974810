"""The names a user picks from (methods, engines, compressions, mixings, graphs), with no heavy imports.

The command line builds its choices from these at import time, so listing them must not
load Flower or PyTorch; the modules that implement each choice import the names from here.
"""

METHOD_NAMES = ("diloco", "gossip", "fedrgl", "rieselect")
ENGINES = ("inproc", "ray", "deployment")
COMPRESSIONS = ("none", "mxint8", "mxfp4")
MIXINGS = ("metropolis", "exact")
PLANETOID = ("cora", "citeseer")
GRAPHS = ("csbm", *PLANETOID)  # csbm is generated; the Planetoid graphs are read from disk
NOISES = ("uniform", "pair")
GRAPH_METHODS = ("fedavg", "fedprox", "fedavg+filter", "fedrgl")
SELECTIONS = ("full", "random", "topk", "rieselect")


def split_tasks(text: str) -> tuple[str, ...]:
    """RieSelect's tasks from their comma-separated names (blanks ignored)."""
    return tuple(t.strip() for t in text.split(",") if t.strip())
