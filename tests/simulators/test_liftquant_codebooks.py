import numpy as np
import pytest

from edgekit.simulators.formats import LIFTQUANT_FORMATS
from edgekit.simulators.liftquant.codebooks import (
    CODEBOOK_DIR,
    SLICES_TOLERANCE,
    Codebook,
    default_search,
    load_codebook,
    measure_searches,
    read_codebook,
    remeasure,
    train_codebook,
    write_codebook,
)

# Table 1 of the paper: mean squared error per dimension of the nearest lattice point on N(0, 1) data
TABLE_1 = {"liftquant_16to8": 0.092, "liftquant_24to10": 0.051, "liftquant_32to16": 0.086}
SEED = 20260601  # data neither training nor the shipped metadata used


def nearest_point_mse(name, search, samples):
    """(MSE per dimension, its relative standard error) of ``search`` on seeded N(0, 1) chunks."""
    codebook = load_codebook(name)
    d = codebook.format.chunk
    x = np.random.default_rng(SEED).standard_normal((samples, d)).astype(np.float32)
    err = codebook.encode(x, search)[1] / d
    return err.mean(), err.std() / np.sqrt(samples) / err.mean()


@pytest.mark.parametrize("name", list(LIFTQUANT_FORMATS))
def test_every_configuration_ships_a_codebook(name):
    assert (CODEBOOK_DIR / f"{name}.npz").is_file()
    codebook = load_codebook(name)
    fmt = LIFTQUANT_FORMATS[name]
    assert codebook.matrix.shape == (fmt.chunk, fmt.lifted) and codebook.matrix.dtype == np.float32
    meta = codebook.metadata
    for key in ("seed", "restarts", "adam_steps", "softmin_over", "mse_fast", "mse_fast_local", "eval_samples"):
        assert key in meta
    assert meta["mse_fast_local"] <= meta["mse_fast"]
    if meta.get("exact_samples") == meta["eval_samples"]:  # the same chunks: exact can only be lower
        assert meta["mse_exact"] <= meta["mse_fast_local"] * (1 + 1e-9)
    # below the scalar 1-bit Gaussian quantizer's 0.363 (as a sanity floor) and above Shannon's bound
    assert 4.0 ** -fmt.code_bits_per_weight < meta["mse_fast_local"] < 0.363 * 1.3
    assert meta["default_search"] == ("exact" if fmt.lifted <= 16 else
                                      "slices" if meta.get("slices_over_exact", 1) <= SLICES_TOLERANCE else "fast+local")


def test_table_1_16to8_exact():
    mse, rel_se = nearest_point_mse("liftquant_16to8", "exact", 16384)
    assert rel_se < 0.01
    assert mse == pytest.approx(TABLE_1["liftquant_16to8"], rel=0.03)


@pytest.mark.slow
def test_table_1_24to10_exact():
    """2^24 codes per chunk: about 10 ms a chunk on one core."""
    mse, rel_se = nearest_point_mse("liftquant_24to10", "exact", 4000)
    assert rel_se < 0.01
    assert mse == pytest.approx(TABLE_1["liftquant_24to10"], rel=0.03)


def test_table_1_32to16_near_exact():
    """2^32 codes: exact search is out of reach, fast+local is an upper bound on the nearest-point MSE."""
    mse, rel_se = nearest_point_mse("liftquant_32to16", "fast+local", 2048)
    assert rel_se < 0.01
    assert mse == pytest.approx(TABLE_1["liftquant_32to16"], rel=0.03)


@pytest.mark.parametrize("name", [n for n, f in LIFTQUANT_FORMATS.items() if f.lifted <= 20])
def test_fast_plus_local_is_within_two_percent_of_exact(name):
    codebook = load_codebook(name)
    x = np.random.default_rng(SEED).standard_normal((1024, codebook.format.chunk)).astype(np.float32)
    exact = codebook.encode(x, "exact")[1].mean()
    assert codebook.encode(x, "fast+local")[1].mean() <= exact * 1.02


@pytest.mark.parametrize("name", [n for n, f in LIFTQUANT_FORMATS.items() if 16 < f.lifted <= 20])
def test_the_default_search_above_16_is_within_two_percent_of_exact(name):
    codebook = load_codebook(name)
    x = np.random.default_rng(SEED).standard_normal((1024, codebook.format.chunk)).astype(np.float32)
    exact = codebook.encode(x, "exact")[1].mean()
    assert codebook.encode(x, default_search(codebook.format))[1].mean() <= exact * 1.02


def test_measurements_choose_the_default_search():
    codebook = load_codebook("liftquant_20to6")
    measured = measure_searches(codebook, 512, 7)
    assert measured["exact_samples"] == 512
    assert measured["mse_exact"] <= min(measured["mse_slices"], measured["mse_fast_local"]) * (1 + 1e-9)
    assert measured["mse_fast_local"] <= measured["mse_fast"]
    assert measured["slices_over_exact"] == pytest.approx(measured["mse_slices"] / measured["mse_exact"] - 1)
    assert measured["default_search"] == ("slices" if measured["slices_over_exact"] <= SLICES_TOLERANCE
                                          else "fast+local")
    small = measure_searches(load_codebook("liftquant_8to4"), 256, 7)
    assert small["default_search"] == "exact" and "mse_slices" not in small


def test_remeasure_keeps_the_matrix_and_the_training_record():
    codebook = load_codebook("liftquant_6to4")
    codebook = Codebook(codebook.format, codebook.matrix, codebook.metadata | {"eval_samples": 1024,
                                                                               "mse_fast": 9.0})
    fresh = remeasure(codebook)
    np.testing.assert_array_equal(fresh.matrix, codebook.matrix)
    assert fresh.metadata["mse_fast"] < 1 and fresh.metadata["seed"] == codebook.metadata["seed"]
    assert fresh.metadata["exact_samples"] == 1024


def test_training_is_deterministic_and_round_trips(tmp_path):
    kwargs = {"seed": 3, "restarts": 1, "steps": 20, "lloyd_rounds": 2, "lloyd_samples": 2048, "eval_samples": 2048,
              "log": lambda msg: None}
    first = train_codebook("liftquant_4to2", **kwargs)
    second = train_codebook("liftquant_4to2", **kwargs)
    np.testing.assert_array_equal(first.matrix, second.matrix)
    path = write_codebook(first, tmp_path)
    back = read_codebook(first.format, path)
    np.testing.assert_array_equal(back.matrix, first.matrix)
    assert back.metadata == first.metadata and back.metadata["seed"] == 3


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="unknown LiftQuant configuration"):
        load_codebook("7to3")
    with pytest.raises(ValueError, match="no codebook file"):
        read_codebook(LIFTQUANT_FORMATS["liftquant_4to2"], tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="matrix must be a finite"):
        Codebook(LIFTQUANT_FORMATS["liftquant_4to2"], np.zeros((3, 4)))
