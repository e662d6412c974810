"""Named hardware targets, one TOML data file each in ``targets/data/``, and their TVM targets.

A target spec is a registry name (:func:`target_names`), any TVM tag
(``tvm.target.list_tags()``) or a TVM target as a JSON dict
(``'{"kind": "cuda", "arch": "sm_90"}'``). Registry targets carry vendor figures (memory,
bandwidth, peak throughput per precision, formats the hardware computes directly); the
others carry what TVM knows and leave the figures unknown (``None``).

Importing this module does not import TVM: only building a TVM target, resolving a tag or
JSON dict, or asking :func:`runs_here` does.
"""

from __future__ import annotations

import difflib
import json
import platform
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tvm

DATA_DIR = Path(__file__).resolve().parent / "data"

ARCHES = ("x86_64", "aarch64")
"""Host CPU architectures a registry data file may name."""
DEVICES = ("cpu", "cuda")
"""Device kinds a registry data file may name."""
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "int8", "int4")
"""Keys of ``peak_ops``: the arithmetic precisions peak throughput is quoted for."""

_CUDA_ARCH = re.compile(r"sm_\d+[af]?")
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
_FIELDS = {"name", "description", "arch", "device", "memory_bytes", "memory_bandwidth", "peak_ops",
           "native_formats", "cuda_arch", "cross_compiler", "tvm"}
_EXAMPLE_JSON = '{"kind": "cuda", "arch": "sm_90"}'


@dataclass(frozen=True)
class HardwareTarget:
    """One piece of hardware: what it is, what it can do, and how TVM compiles for it.

    ``tvm_spec`` is what :func:`tvm_target` gives to ``tvm.target.Target``: a TVM tag name or
    a JSON object. ``tvm_host`` (JSON object or ``None``) is a host target that replaces the
    tag's own. An LLVM target with ``"mcpu": "native"`` means this machine's CPU as TVM
    detects it. Unknown figures are ``None``; ``peak_ops`` may name only some precisions.
    """

    name: str
    description: str
    arch: str | None  # host CPU architecture: "x86_64", "aarch64" ...; None when unknown
    device: str  # "cpu" or "cuda" (a TVM target kind such as "opencl" for non-registry specs)
    tvm_spec: str
    tvm_host: str | None = None
    memory_bytes: int | None = None
    memory_bandwidth: float | None = None  # peak, bytes/s
    peak_ops: dict[str, float] | None = field(default=None, hash=False)  # dense peak, ops/s
    native_formats: tuple[str, ...] = ()
    cuda_arch: str | None = None  # e.g. "sm_87"
    cross_compiler: str | None = None  # e.g. "aarch64-linux-gnu-gcc"; None: the host's compiler
    source: str = ""  # the data file, or "tvm tag" / "tvm kind" / "json"

    @property
    def registered(self) -> bool:
        """Whether this target comes from a registry data file."""
        return self.source not in ("tvm tag", "tvm kind", "json")

    def peak(self, precision: str) -> float | None:
        """Peak throughput in ops/s at ``precision`` (``"fp16"``, ``"fp8"`` ...), ``None`` if unknown."""
        return (self.peak_ops or {}).get(precision)


def target_names() -> list[str]:
    """The registry's target names (the data files' names), sorted."""
    return sorted(p.stem for p in DATA_DIR.glob("*.toml"))


def load_target(spec: str | HardwareTarget) -> HardwareTarget:
    """The target a spec names: a registry name, a TVM tag, or a TVM target as a JSON dict.

    Raises ``ValueError`` for a spec that is none of these, a JSON dict TVM rejects, or a
    registry data file that is malformed.
    """
    if isinstance(spec, HardwareTarget):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"a target spec is a string, got {type(spec).__name__}")
    text = spec.strip()
    if text.lower() in target_names():
        return _load_registered(text.lower())
    if text.startswith("{"):
        try:
            config = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"target spec {spec!r} is not valid JSON: {err}") from None
        if not isinstance(config, dict):
            raise ValueError(f"target spec {spec!r}: a JSON target must be an object such as {_EXAMPLE_JSON}")
        return _from_tvm(json.dumps(config), config, source="json")
    import tvm

    if text in tvm.target.list_tags():
        return _from_tvm(text, text, source="tvm tag")
    if text in tvm.target.Target.list_kinds():  # a bare kind: TVM's defaults for it
        return _from_tvm(text, {"kind": text}, source="tvm kind")
    raise ValueError(_unknown_spec_message(spec, text, list(tvm.target.list_tags())))


def tvm_target(t: HardwareTarget | str) -> tvm.target.Target:
    """The ``tvm.target.Target`` to compile for ``t`` (a target or a spec for :func:`load_target`)."""
    import tvm

    t = load_target(t)
    spec = t.tvm_spec if not t.tvm_spec.startswith("{") else _resolve_native(json.loads(t.tvm_spec))
    if t.tvm_host is None:
        return tvm.target.Target(spec)
    return tvm.target.Target(spec, host=_resolve_native(json.loads(t.tvm_host)))


def runs_here(t: HardwareTarget | str) -> bool:
    """Whether code built for ``t`` can execute on this machine.

    A CPU target runs here when its TVM kind is ``llvm`` and its architecture is this
    machine's (``platform.machine()``); features an explicit ``mcpu`` implies are not
    checked. A CUDA target runs here when its host architecture (if known) is this
    machine's, a GPU is visible (``tvm.cuda(0).exist``) and the GPU can run its
    ``cuda_arch``: the same major version and at least the minor one, exactly that
    version for an architecture-specific ``sm_XYa``/``sm_XYf``.
    """
    import tvm

    t = load_target(t)
    machine = host_arch()
    if t.device == "cpu":
        return t.arch == machine and tvm_target(t).kind.name == "llvm"
    if t.arch is not None and t.arch != machine:
        return False
    if t.device != "cuda":
        try:
            return bool(tvm.device(t.device, 0).exist)
        except (ValueError, RuntimeError):
            return False
    gpu = tvm.cuda(0)
    if not gpu.exist:
        return False
    if t.cuda_arch is None:
        return True
    have = tuple(int(x) for x in str(gpu.compute_version).split("."))
    digits = t.cuda_arch[3:].rstrip("af")
    need = (int(digits[:-1]), int(digits[-1]))
    if t.cuda_arch[-1] in "af":
        return have == need
    return have[0] == need[0] and have[1] >= need[1]


# -- registry data files ---------------------------------------------------------------------


@cache
def _load_registered(name: str) -> HardwareTarget:
    return _load_file(DATA_DIR / f"{name}.toml")


def _load_file(path: str | Path) -> HardwareTarget:
    """Read and check one registry data file; ``ValueError`` names the file and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from None

    def bad(name: str, why: str) -> ValueError:
        return ValueError(f"{path}: field {name!r}: {why}")

    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise bad(unknown[0], f"unknown field; the fields are {', '.join(sorted(_FIELDS))}")
    for key in ("name", "description", "arch", "device", "tvm"):
        if key not in data:
            raise bad(key, "missing")

    def text(key: str, required: bool = False) -> str | None:
        value = data.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise bad(key, f"must be a non-empty string, got {value!r}")
        return value

    name = text("name", True)
    if name != path.stem:
        raise bad("name", f"{name!r} differs from the file's name {path.stem!r}")
    arch = text("arch", True)
    if arch not in ARCHES:
        raise bad("arch", f"{arch!r} is not one of {', '.join(ARCHES)}")
    device = text("device", True)
    if device not in DEVICES:
        raise bad("device", f"{device!r} is not one of {', '.join(DEVICES)}")

    memory = data.get("memory_bytes")
    if memory is not None and (type(memory) is not int or memory <= 0):
        raise bad("memory_bytes", f"must be a positive integer, got {memory!r}")
    bandwidth = data.get("memory_bandwidth")
    if bandwidth is not None and not _positive(bandwidth):
        raise bad("memory_bandwidth", f"must be a positive number of bytes/s, got {bandwidth!r}")

    peaks = data.get("peak_ops")
    if peaks is not None:
        if not isinstance(peaks, dict):
            raise bad("peak_ops", f"must be a table of precision = ops/s, got {peaks!r}")
        for key, value in peaks.items():
            if key not in PRECISIONS:
                raise bad("peak_ops", f"unknown precision {key!r}; use {', '.join(PRECISIONS)}")
            if not _positive(value):
                raise bad("peak_ops", f"{key} must be a positive number of ops/s, got {value!r}")
        peaks = {key: float(value) for key, value in peaks.items()}

    formats = data.get("native_formats", [])
    if not isinstance(formats, list) or not all(isinstance(f, str) for f in formats):
        raise bad("native_formats", f"must be a list of format names, got {formats!r}")
    if formats:
        from edgekit.simulators.weight_formats import weight_format_names

        allowed = [*weight_format_names("block"), *weight_format_names("float")]
        for f in formats:
            if f not in allowed:
                raise bad("native_formats", f"unknown format {f!r}; allowed: {', '.join(allowed)}")
        if len(set(formats)) != len(formats):
            raise bad("native_formats", f"lists a format twice: {formats!r}")

    cuda_arch = text("cuda_arch")
    if device == "cuda" and cuda_arch is None:
        raise bad("cuda_arch", "missing; a cuda target names its architecture, e.g. 'sm_90a'")
    if device != "cuda" and cuda_arch is not None:
        raise bad("cuda_arch", f"given for a {device} target")
    if cuda_arch is not None and not _CUDA_ARCH.fullmatch(cuda_arch):
        raise bad("cuda_arch", f"{cuda_arch!r} is not of the form sm_XY, sm_XYa or sm_XYf")
    cross_compiler = text("cross_compiler")

    tvm_spec, tvm_host = _tvm_fields(data["tvm"], device, arch, cuda_arch, bad)
    return HardwareTarget(
        name=name, description=text("description", True), arch=arch, device=device,
        tvm_spec=tvm_spec, tvm_host=tvm_host, memory_bytes=memory,
        memory_bandwidth=None if bandwidth is None else float(bandwidth), peak_ops=peaks,
        native_formats=tuple(formats), cuda_arch=cuda_arch, cross_compiler=cross_compiler, source=str(path),
    )


def _tvm_fields(tvm_table: Any, device: str, arch: str, cuda_arch: str | None, bad) -> tuple[str, str | None]:
    """The ``[tvm]`` table: ``tag`` (with an optional ``host`` table), or ``target``, a JSON-like
    table. Checks what can be checked without TVM; the tests build every target with TVM."""
    if not isinstance(tvm_table, dict) or set(tvm_table) - {"tag", "target", "host"}:
        raise bad("tvm", "must be a table with 'tag' (and optionally 'host') or 'target'")
    if ("tag" in tvm_table) == ("target" in tvm_table):
        raise bad("tvm", "give exactly one of 'tag' (a TVM tag name) and 'target' (a TVM target table)")
    host = tvm_table.get("host")
    if "target" in tvm_table and host is not None:
        raise bad("tvm.host", "only goes with 'tag'; put 'host' inside the 'target' table")
    if host is not None and (not isinstance(host, dict) or host.get("kind") != "llvm"):
        raise bad("tvm.host", f"must be a table for an llvm target, got {host!r}")
    if "tag" in tvm_table:
        tag = tvm_table["tag"]
        if not isinstance(tag, str) or not tag.strip():
            raise bad("tvm.tag", f"must be a TVM tag name, got {tag!r}")
        if host is not None:
            _check_triple(host, arch, "tvm.host", bad)
        return tag, None if host is None else json.dumps(host)
    target = tvm_table["target"]
    if not isinstance(target, dict):
        raise bad("tvm.target", f"must be a table, got {target!r}")
    want_kind = "cuda" if device == "cuda" else "llvm"
    if target.get("kind") != want_kind:
        raise bad("tvm.target", f"kind must be {want_kind!r} for a {device} target, got {target.get('kind')!r}")
    if device == "cuda":
        if target.get("arch") != cuda_arch:
            raise bad("tvm.target", f"arch {target.get('arch')!r} differs from cuda_arch {cuda_arch!r}")
        sub = target.get("host")
        if not isinstance(sub, dict) or sub.get("kind") != "llvm":
            raise bad("tvm.target.host", "a cuda target needs a host table for an llvm target")
        _check_triple(sub, arch, "tvm.target.host", bad)
    else:
        _check_triple(target, arch, "tvm.target", bad)
    return json.dumps(target), None


def _check_triple(config: dict, arch: str, where: str, bad) -> None:
    triple = config.get("mtriple")
    if triple is not None and _arch_of_triple(str(triple)) != arch:
        raise bad(where, f"mtriple {triple!r} is not for arch {arch!r}")


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


# -- TVM tags and JSON dicts -----------------------------------------------------------------


def _from_tvm(spec: str, arg: str | dict, source: str) -> HardwareTarget:
    """A target known only to TVM: kind, architecture and CUDA arch from the built Target."""
    import tvm

    try:
        target = tvm.target.Target(_resolve_native(arg) if isinstance(arg, dict) else arg)
    except (ValueError, TypeError) as err:  # TVM 0.27 raises ValueError for a bad kind, option or type
        raise ValueError(f"target spec {spec!r}: TVM rejects it: {err}") from None
    kind = target.kind.name
    device = "cpu" if "cpu" in [str(k) for k in target.keys] else kind
    cpu = target if kind == "llvm" else target.host
    triple = cpu.attrs.get("mtriple") if cpu is not None and cpu.kind.name == "llvm" else None
    arch = _arch_of_triple(str(triple)) if triple else None
    cuda_arch = str(target.attrs["arch"]) if kind == "cuda" and target.attrs.get("arch") else None
    description = {"tvm tag": f"TVM tag {spec}", "tvm kind": f"TVM target kind {kind} with TVM's defaults"}.get(
        source, f"TVM target ({kind}) from a JSON dict")
    return HardwareTarget(name=spec, description=description, arch=arch, device=device, tvm_spec=spec,
                          cuda_arch=cuda_arch, source=source)


def _resolve_native(config: Any) -> Any:
    """Replace ``"mcpu": "native"`` in an LLVM target (or its host) by this machine's CPU as
    TVM detects it: TVM 0.27 does not accept "native" and would fall back to "generic"."""
    if not isinstance(config, dict):
        return config
    config = dict(config)
    if isinstance(config.get("host"), dict):
        config["host"] = _resolve_native(config["host"])
    if config.get("kind") == "llvm" and config.get("mcpu") == "native":
        import tvm

        detected = tvm.target.Target.from_device("cpu")
        config["mcpu"] = str(detected.attrs["mcpu"])
        config.setdefault("mtriple", str(detected.attrs["mtriple"]))
    return config


def _arch_of_triple(triple: str) -> str:
    head = triple.split("-", 1)[0].lower()
    return _normalize_arch(head)


def host_arch() -> str:
    """This machine's CPU architecture in the registry's spelling (``x86_64``, ``aarch64``)."""
    return _normalize_arch(platform.machine())


def _normalize_arch(machine: str) -> str:
    machine = machine.lower()
    return _ARCH_ALIASES.get(machine, machine)


def _unknown_spec_message(spec: str, text: str, tags: list[str]) -> str:
    names = target_names()
    message = (f"unknown target {spec!r}: not a registry target ({', '.join(names)}), not a TVM tag "
               f"and not a JSON dict. Any TVM tag (tvm.target.list_tags(), e.g. nvidia/nvidia-a100) "
               f"or a TVM target as a JSON dict (e.g. '{_EXAMPLE_JSON}') works too.")
    if " -" in text:
        message += " TVM 0.27 rejects flag strings such as 'cuda -arch=sm_90': write a JSON dict."
    close = difflib.get_close_matches(text.lower(), [*names, *map(str, tags)], n=3, cutoff=0.6)
    if close:
        message += f" Did you mean {' or '.join(close)}?"
    return message
