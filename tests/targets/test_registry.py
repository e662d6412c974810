import dataclasses
import json
import platform
import re
from pathlib import Path

import numpy as np
import pytest

from edgekit.simulators import format_names
from edgekit.simulators.weight_formats import weight_format_names
from edgekit.targets import HardwareTarget, load_target, runs_here, target_names, tvm_target
from edgekit.targets.registry import ARCHES, DATA_DIR, PRECISIONS, _load_file

tvm = pytest.importorskip("tvm")

NAMES = ["host", "rpi4", "rpi5", "jetson-orin", "h100", "h200", "b200"]
GPU = tvm.cuda(0).exist


def cpu_of(target):
    """The LLVM (sub-)target that compiles host code."""
    return target if target.kind.name == "llvm" else target.host


def test_registry_names():
    assert sorted(target_names()) == sorted(NAMES)
    assert target_names() == sorted(p.stem for p in DATA_DIR.glob("*.toml"))


@pytest.mark.parametrize("name", NAMES)
def test_every_registry_target_loads_and_builds(name):
    t = load_target(name)
    assert isinstance(t, HardwareTarget) and t.name == name and t.registered and t.description
    assert load_target(name.upper()) is t  # cached, case-insensitive
    assert t.arch in ARCHES and t.device in ("cpu", "cuda")
    assert set(t.native_formats) <= set(format_names()) | set(weight_format_names("float"))
    assert set(t.peak_ops or {}) <= set(PRECISIONS)
    assert all(v > 0 for v in (t.peak_ops or {}).values())
    target = tvm_target(t)
    assert isinstance(target, tvm.target.Target)
    host = cpu_of(target)
    assert host is not None and host.kind.name == "llvm"
    triple = str(host.attrs.get("mtriple"))
    assert triple.startswith(t.arch)
    if t.device == "cuda":
        assert target.kind.name == "cuda"
        assert re.fullmatch(r"sm_\d+a?", t.cuda_arch)
        assert str(target.attrs["arch"]) == t.cuda_arch
        assert target.host is not None
    else:
        assert target.kind.name == "llvm" and t.cuda_arch is None
    if t.arch == "aarch64":
        assert triple.startswith("aarch64") and t.cross_compiler == "aarch64-linux-gnu-gcc"
    else:
        assert t.cross_compiler is None
    if name != "host":
        assert t.memory_bytes > 0 and t.memory_bandwidth > 0 and t.peak("fp32") > 0


def test_host_is_this_cpu_and_compiles_and_runs():
    t = load_target("host")
    target = tvm_target(t)
    assert target.kind.name == "llvm"
    detected = tvm.target.Target.from_device("cpu")
    assert str(target.attrs["mcpu"]) == str(detected.attrs["mcpu"]) != "native"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the host target is x86_64")
    assert runs_here(t)
    from tvm import te

    a = te.placeholder((64,), "float32", name="a")
    b = te.compute((64,), lambda i: a[i] * 2.0 + 1.0, name="b")
    lib = tvm.compile(te.create_prim_func([a, b]), target=target)
    x = np.arange(64, dtype="float32")
    out = tvm.runtime.tensor(np.zeros(64, dtype="float32"))
    lib(tvm.runtime.tensor(x), out)
    np.testing.assert_array_equal(out.numpy(), x * 2 + 1)


def test_specific_targets():
    rpi4 = tvm_target("rpi4")
    assert str(rpi4.attrs["mcpu"]) == "cortex-a72" and "+neon" in [str(a) for a in rpi4.attrs["mattr"]]
    assert str(tvm_target("rpi5").attrs["mcpu"]) == "cortex-a76"
    orin = tvm_target("jetson-orin")
    assert str(orin.attrs["arch"]) == "sm_87"
    assert str(orin.host.attrs["mcpu"]) == "cortex-a78ae"  # the tag's own host says cortex-a78
    b200, h100 = load_target("b200"), load_target("h100")
    assert {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "nvfp4"} <= set(b200.native_formats)
    assert "mxint8" not in b200.native_formats
    assert not any(f.startswith(("mx", "nv")) for f in h100.native_formats)
    assert h100.peak("fp8") > 0 and h100.peak("fp4") is None
    assert b200.peak("fp4") == 2 * b200.peak("fp8")
    assert load_target("h200").peak_ops == h100.peak_ops and load_target("h200").memory_bytes > h100.memory_bytes
    for name in ("host", "rpi4", "rpi5"):
        assert load_target(name).native_formats == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        b200.name = "x"
    assert hash(b200) == hash(load_target("b200"))


def test_runs_here():
    machine = platform.machine().lower()
    for name in NAMES:
        t = load_target(name)
        if t.arch == "aarch64" and machine not in ("aarch64", "arm64"):
            assert not runs_here(t)
        if t.device == "cuda" and not GPU:
            assert not runs_here(t)
    assert runs_here(load_target("b200")) == (GPU and str(tvm.cuda(0).compute_version) == "10.0"
                                              and machine in ("x86_64", "amd64"))


def test_tags_load():
    a100 = load_target("nvidia/nvidia-a100")
    assert (a100.device, a100.cuda_arch, a100.source) == ("cuda", "sm_80", "tvm tag")
    assert a100.memory_bytes is None and a100.memory_bandwidth is None and a100.peak_ops is None
    assert str(tvm_target(a100).attrs["arch"]) == "sm_80"
    pi = load_target("raspberry-pi/4b-aarch64")
    assert (pi.device, pi.arch, pi.cuda_arch) == ("cpu", "aarch64", None)
    assert not pi.registered and not runs_here(pi)
    orin = load_target("nvidia/jetson-agx-orin-32gb")
    assert (orin.device, orin.arch, orin.cuda_arch) == ("cuda", "aarch64", "sm_87")


def test_json_dicts_load():
    t = load_target('{"kind": "cuda", "arch": "sm_90"}')
    assert (t.device, t.cuda_arch, t.arch, t.source) == ("cuda", "sm_90", None, "json")
    assert str(tvm_target(t).attrs["arch"]) == "sm_90"
    arm = load_target('{"kind":"llvm","mtriple":"aarch64-linux-gnu","mcpu":"cortex-a55"}')
    assert (arm.device, arm.arch) == ("cpu", "aarch64")
    assert str(tvm_target(arm).attrs["mcpu"]) == "cortex-a55"
    with_host = load_target(json.dumps({"kind": "cuda", "arch": "sm_87",
                                        "host": {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}}))
    assert with_host.arch == "aarch64"
    native = tvm_target('{"kind": "llvm", "mcpu": "native"}')
    assert str(native.attrs["mcpu"]) == str(tvm.target.Target.from_device("cpu").attrs["mcpu"])


@pytest.mark.parametrize("spec,message", [
    ("rpi6", "Did you mean rpi5"),
    ("cuda -arch=sm_90", "rejects flag strings"),
    ("nvidia/no-such-gpu", "any tvm tag"),
])
def test_unknown_spec_lists_names(spec, message):
    with pytest.raises(ValueError) as err:
        load_target(spec)
    text = str(err.value)
    assert repr(spec) in text and message.lower() in text.lower()
    for name in NAMES:
        assert name in text
    assert "TVM tag" in text and "JSON dict" in text


@pytest.mark.parametrize("spec,message", [
    ('{"kind": cuda}', "not valid JSON"),
    ("[1, 2]", "not a registry target"),
    ('{"kind": "no-such-kind"}', "TVM rejects it"),
])
def test_bad_json_specs(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_target(spec)
    with pytest.raises(TypeError):
        load_target(42)


GOOD = """\
name = "{name}"
description = "a test board"
arch = "aarch64"
device = "cpu"
memory_bytes = 1073741824
memory_bandwidth = 4e9
native_formats = ["mxfp4"]
cross_compiler = "aarch64-linux-gnu-gcc"

[peak_ops]
fp32 = 1e10

[tvm]
target = {{ kind = "llvm", mtriple = "aarch64-linux-gnu", mcpu = "cortex-a53" }}
"""


def write(tmp_path: Path, text: str, name: str = "board") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(name=name) if "{name}" in text else text)
    return path


def test_load_file_good(tmp_path):
    t = _load_file(write(tmp_path, GOOD))
    assert (t.name, t.arch, t.memory_bytes, t.native_formats, t.peak("fp32")) == \
        ("board", "aarch64", 2**30, ("mxfp4",), 1e10)
    assert str(tvm_target(t).attrs["mcpu"]) == "cortex-a53"


@pytest.mark.parametrize("old,new,field", [
    ('arch = "aarch64"', 'arch = "riscv64"', "arch"),
    ('arch = "aarch64"\n', "", "arch"),
    ('device = "cpu"', 'device = "tpu"', "device"),
    ('["mxfp4"]', '["mxfp5"]', "native_formats"),
    ("fp32 = 1e10", "fp33 = 1e10", "peak_ops"),
    ("fp32 = 1e10", "fp32 = -1", "peak_ops"),
    ("memory_bytes = 1073741824", "memory_bytes = 1.5", "memory_bytes"),
    ("memory_bandwidth = 4e9", 'memory_bandwidth = "fast"', "memory_bandwidth"),
    ('device = "cpu"', 'device = "cuda"', "cuda_arch"),
    ('device = "cpu"', 'device = "cpu"\ncuda_arch = "sm_90"', "cuda_arch"),
    ('cross_compiler = "aarch64-linux-gnu-gcc"', 'cross_compilr = "gcc"', "cross_compilr"),
    ('name = "board"', 'name = "other"', "name"),
    ('mtriple = "aarch64-linux-gnu"', 'mtriple = "x86_64-linux-gnu"', "tvm.target"),
    ('kind = "llvm"', 'kind = "cuda"', "tvm.target"),
    ("target = {", 'tag = "x"\ntarget = {', "tvm"),
])
def test_bad_data_file_names_file_and_field(tmp_path, old, new, field):
    text = GOOD.format(name="board")
    assert old in text
    path = write(tmp_path, text.replace(old, new, 1))
    with pytest.raises(ValueError) as err:
        _load_file(path)
    assert str(path) in str(err.value) and f"field {field!r}" in str(err.value)


def test_bad_data_file_toml_syntax(tmp_path):
    path = write(tmp_path, "name = \n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: not valid TOML")):
        _load_file(path)


def test_cuda_data_file_checks_arch_and_host(tmp_path):
    cuda = """\
name = "gpu"
description = "a test gpu"
arch = "x86_64"
device = "cuda"
cuda_arch = "sm_90a"

[tvm.target]
kind = "cuda"
arch = "sm_90a"
host = { kind = "llvm", mtriple = "x86_64-linux-gnu" }
"""
    t = _load_file(write(tmp_path, cuda, "gpu"))
    assert str(tvm_target(t).attrs["arch"]) == "sm_90a"
    for old, new, field in [('arch = "sm_90a"\nhost', 'arch = "sm_80"\nhost', "tvm.target"),
                            ('host = { kind = "llvm", mtriple = "x86_64-linux-gnu" }\n', "", "tvm.target.host")]:
        path = write(tmp_path, cuda.replace(old, new), "gpu")
        with pytest.raises(ValueError, match=re.escape(f"{path}: field {field!r}")):
            _load_file(path)


def test_bare_tvm_kind_takes_tvm_defaults():
    cuda = load_target("cuda")
    assert cuda.device == "cuda" and cuda.cuda_arch and not cuda.registered
    assert load_target("llvm").device == "cpu"
