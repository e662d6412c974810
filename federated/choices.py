"""The names a user picks from (methods, engines, compressions, mixings, graphs), with no heavy imports.

The command line builds its choices from these at import time, so listing them must not
load Flower or PyTorch; the modules that implement each choice import the names from here.
"""

METHOD_NAMES = ("diloco", "gossip", "fedrgl", "rieselect")
ENGINES = ("inproc", "ray", "deployment")
NO_COMPRESSION = "none"
MIXINGS = ("metropolis", "exact")
PLANETOID = ("cora", "citeseer")
GRAPHS = ("csbm", *PLANETOID)  # csbm is generated; the Planetoid graphs are read from disk
NOISES = ("uniform", "pair")
GRAPH_METHODS = ("fedavg", "fedprox", "fedavg+filter", "fedrgl")
SELECTIONS = ("full", "random", "topk", "rieselect")
BASINS = ("moving", "fixed")  # RieSelect's safe basin: P <= P(theta) + growth each step, or P <= radius


def compressions() -> tuple[str, ...]:
    """``none`` and every OCP MX format of the weight-format table (the payload codec stores codes and
    block scales; a tensor scale, as NVFP4 has, would need a field it does not carry).

    A query on the table, so it imports the simulators: call it when a compression is checked,
    not when the command line is built.
    """
    from edgekit.simulators import weight_formats as wf

    return (NO_COMPRESSION, *wf.names("block", lambda row: row.is_mx))


def split_tasks(text: str) -> tuple[str, ...]:
    """RieSelect's tasks from their comma-separated names (blanks ignored)."""
    return tuple(t.strip() for t in text.split(",") if t.strip())
