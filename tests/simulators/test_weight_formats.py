"""The weight-format table: every ``--format`` name resolves to one row with its family."""

import numpy as np
import pytest

from edgekit.simulators import weight_formats as wf
from edgekit.simulators.formats import FORMATS, LIFTQUANT_FORMATS, get_format


@pytest.mark.parametrize(("name", "family", "canonical"), [
    ("fp32", "float", "fp32"), ("FP16", "float", "fp16"), ("bf16", "float", "bf16"), ("mxfp8", "block", "mxfp8_e4m3"),
    ("mxint8@64", "block", "mxint8@64"), ("mxint4_asym", "block", "mxint4_asym"), ("nvfp4", "block", "nvfp4"),
    ("liftquant:2.4", "liftquant", "liftquant_24to10"), ("liftquant:24to10", "liftquant", "liftquant_24to10"),
    ("liftquant_16to8", "liftquant", "liftquant_16to8"),
])
def test_every_spelling_resolves_to_its_family(name, family, canonical):
    row = wf.resolve(name)
    assert (row.family, row.name) == (family, canonical)


def test_unknown_names_fail_with_the_allowed_list():
    with pytest.raises(ValueError, match="unknown format 'bogus'; allowed: fp32, fp16, bf16, mxfp8_e4m3"):
        wf.resolve("bogus")
    with pytest.raises(ValueError, match="unknown LiftQuant configuration"):
        wf.resolve("liftquant_3to1x")


def test_the_table_holds_every_family_once():
    assert wf.weight_format_names("float") == ["fp32", "fp16", "bf16"]
    assert set(wf.weight_format_names("block")) == set(FORMATS) | {"mxfp8", "mxfp6"}
    assert wf.weight_format_names("liftquant") == list(LIFTQUANT_FORMATS)
    four_bit = [r.name for r in wf.weight_formats("block", lambda r: r.element_bits == 4)]
    assert four_bit == ["mxfp4", "mxint4", "nvfp4"]


def test_lists_of_formats_are_queries_on_the_rows():
    assert wf.names("block", lambda r: r.is_mx and r.element_bits == 4) == ["mxfp4", "mxint4"]  # not nvfp4
    assert wf.names("block", lambda r: r.element_kind == "int") == ["mxint8", "mxint4"]
    assert wf.names("float", lambda r: r.element_bits == 16) == ["fp16", "bf16"]
    assert [wf.resolve(n).element_kind for n in ("bf16", "mxfp4", "mxint8", "liftquant_24to10")] == \
        ["float", "float", "int", "sign"]
    assert wf.liftquant_for_bits(2, 2.4) == ["liftquant_16to8", "liftquant_24to10"]
    with pytest.raises(ValueError, match="no LiftQuant configuration codes 2.1 bits"):
        wf.liftquant_for_bits(2.1)


def test_a_registered_row_joins_the_queries():
    row = wf.register(wf.WeightFormat("mxint4_b16", "block", block=get_format("mxint4@16")))
    try:
        assert "mxint4_b16" in wf.names("block", lambda r: r.element_kind == "int")
        assert "mxint4_b16" not in wf.names("block", lambda r: r.is_mx)  # blocks of 16 are not OCP MX
        assert row.bits_per_weight() == 4.5
    finally:
        wf.unregister("mxint4_b16")


def test_bf16_keeps_the_top_16_bits_rounded():
    from edgekit.models.weights import FAKE_QUANT

    w = np.array([[1.0, 1.00390625, 3.14159265, -2.0e-3]], np.float32)
    got = FAKE_QUANT["float"](w, wf.resolve("bf16"))
    assert got.tolist() == [[1.0, 1.0, 3.140625, -0.0019989013671875]]  # 8 bits of mantissa, round to nearest even


def test_bits_per_weight_counts_scales_and_padding():
    assert wf.resolve("fp16").bits_per_weight((3, 5)) == 16.0
    assert wf.resolve("mxfp4").bits_per_weight() == 4.25
    # 40 columns: two blocks of 32 per row, the second padded; nvfp4 adds its 4-byte tensor scale
    assert wf.resolve("mxfp4").bits_per_weight((2, 40)) == pytest.approx(8 * 2 * (2 * 16 + 2) / 80)
    assert wf.resolve("nvfp4").bits_per_weight((1, 32)) == pytest.approx(8 * (16 + 2 + 4) / 32)


def test_a_registered_row_resolves_and_can_be_removed():
    row = wf.register(wf.WeightFormat("mxfp4_b16", "block", block=get_format("mxfp4@16")))
    try:
        assert wf.resolve("MXFP4_B16") is row
        assert "mxfp4_b16" in wf.weight_format_names("block")
        with pytest.raises(ValueError, match="already registered"):
            wf.register(row)
        with pytest.raises(ValueError, match="built in"):
            wf.unregister("mxfp4")
        assert np.isclose(row.bits_per_weight(), 4.5)
        assert get_format("mxfp4_b16").block_size == 16  # the codecs find it by name
    finally:
        wf.unregister("mxfp4_b16")
    with pytest.raises(ValueError, match="unknown format"):
        wf.resolve("mxfp4_b16")


def test_a_row_must_carry_its_familys_description():
    with pytest.raises(ValueError, match="needs block"):
        wf.WeightFormat("x", "block")
    with pytest.raises(ValueError, match="family must be one of"):
        wf.WeightFormat("x", "int")
