"""The weight-format table: every ``--format`` name resolves to one row with its family."""

import numpy as np
import pytest

from edgekit.simulators import weight_formats as wf
from edgekit.simulators.formats import FORMATS, LIFTQUANT_FORMATS, get_format


@pytest.mark.parametrize(("name", "family", "canonical"), [
    ("fp32", "float", "fp32"), ("FP16", "float", "fp16"), ("mxfp8", "block", "mxfp8_e4m3"),
    ("mxint8@64", "block", "mxint8@64"), ("mxint4_asym", "block", "mxint4_asym"), ("nvfp4", "block", "nvfp4"),
    ("liftquant:2.4", "liftquant", "liftquant_24to10"), ("liftquant:24to10", "liftquant", "liftquant_24to10"),
    ("liftquant_16to8", "liftquant", "liftquant_16to8"),
])
def test_every_spelling_resolves_to_its_family(name, family, canonical):
    row = wf.resolve(name)
    assert (row.family, row.name) == (family, canonical)


def test_unknown_names_fail_with_the_allowed_list():
    with pytest.raises(ValueError, match="unknown format 'bogus'; allowed: fp32, fp16, mxfp8_e4m3"):
        wf.resolve("bogus")
    with pytest.raises(ValueError, match="unknown LiftQuant configuration"):
        wf.resolve("liftquant_3to1x")


def test_the_table_holds_every_family_once():
    assert wf.weight_format_names("float") == ["fp32", "fp16"]
    assert set(wf.weight_format_names("block")) == set(FORMATS) | {"mxfp8", "mxfp6"}
    assert wf.weight_format_names("liftquant") == list(LIFTQUANT_FORMATS)
    four_bit = [r.name for r in wf.weight_formats("block", lambda r: r.element_bits == 4)]
    assert four_bit == ["mxfp4", "mxint4", "nvfp4"]


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
