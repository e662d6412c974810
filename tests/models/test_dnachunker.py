import numpy as np
import pytest
import torch
from torch.nn import functional as F

from edgekit.models import dna_data, dnachunker
from edgekit.models.dna_data import MASK
from edgekit.models.dnachunker import DNAChunkerConfig, build, ratio_loss
from edgekit.models.training import fit

torch.set_num_threads(1)
TINY = DNAChunkerConfig.tiny()


def trained(config):
    return fit("dnachunker", config, build, dnachunker.train_spec, "test", progress=False).model


@pytest.fixture(scope="module")
def dynamic():
    return trained(TINY)


# --- data -----------------------------------------------------------------------------

def test_encode_decode_and_bad_letters():
    codes = dna_data.encode("ACGTNacgtn")
    assert codes.tolist() == [0, 1, 2, 3, 4] * 2
    assert dna_data.decode(codes) == "ACGTNACGTN"
    with pytest.raises(ValueError, match="outside ACGTN: 'U', 'X'"):
        dna_data.encode("ACGUX")
    with pytest.raises(ValueError, match="string"):
        dna_data.encode(b"ACGT")


def test_genome_has_motifs_repeats_and_periodic_repeats():
    bases, labels = dna_data.synthetic_genome(40_000, 0)
    assert bases.shape == labels.shape == (40_000,) and set(np.unique(bases)) <= {0, 1, 2, 3}
    share = np.bincount(labels, minlength=3) / len(labels)
    assert share[dna_data.MOTIF] > 0.03 and share[dna_data.REPEAT] > 0.1 and share[dna_data.BACKGROUND] > 0.5
    # a repeat run (between label changes) is periodic with a period of 2-6 bases
    edges = np.flatnonzero(np.diff(labels)) + 1
    runs = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if labels[a] == dna_data.REPEAT and b - a >= 12][:20]
    for a, b in runs:
        run = bases[a:b]
        assert any((run[p:] == run[:-p]).all() for p in range(2, 7))


def test_windows_come_from_their_part_of_the_genome():
    genome, _ = dna_data.synthetic_genome(40_000, 0)
    got, _ = dna_data.windows("test", 5, 64, np.random.default_rng(3), 40_000)
    starts = np.random.default_rng(3).integers(34_000, 40_000 - 64, size=5)
    assert all((g == genome[s:s + 64]).all() for g, s in zip(got, starts))
    with pytest.raises(ValueError, match="allowed: train, val, test"):
        dna_data.windows("holdout", 1, 64, np.random.default_rng(0), 40_000)


def test_variants_change_one_base_or_shift():
    seq = np.arange(20) % 4
    rng = np.random.default_rng(0)
    snp = dna_data.substitute(seq, 7, rng)
    assert (snp != seq).sum() == 1 and snp[7] != seq[7]
    ins = dna_data.insert(seq, 7, rng)
    assert len(ins) == 20 and (ins[:7] == seq[:7]).all() and (ins[8:] == seq[7:-1]).all()


# --- mechanism ------------------------------------------------------------------------

def test_router_cuts_where_adjacent_states_differ_and_isolates_masks():
    model = build(TINY)  # the router starts as the identity: p = (1 - cos(h_t, h_t-1)) / 2
    e = torch.eye(TINY.width)
    h = torch.stack([e[0], e[0], -e[0], -e[0], e[1], e[1], e[1], e[1]])[None]
    tokens = torch.zeros(1, 8, dtype=torch.long)
    p, b, free = model.route(tokens, h)
    np.testing.assert_allclose(p[0].detach().numpy(), [1, 0, 1, 0, 0.5, 0, 0, 0], atol=1e-6)
    assert b[0].tolist() == [1, 0, 1, 0, 1, 0, 0, 0]
    tokens[0, 5] = MASK
    p, b, free = model.route(tokens, h)
    assert b[0].tolist() == [1, 0, 1, 0, 1, 1, 1, 0]  # the mask, and the base after it, start chunks
    assert free[0].tolist() == [False, True, True, True, True, False, False, True]


def test_chunks_take_their_first_state_and_every_base_gets_its_chunks_output():
    model = build(DNAChunkerConfig.tiny(chunking="kmer", main_layers=0)).eval()
    tokens = torch.randint(0, 4, (2, TINY.length))
    tokens[0, 10] = MASK
    bounds = torch.from_numpy(dnachunker.kmer_boundaries((2, TINY.length), 4))
    with torch.no_grad():
        logits, p, b, _ = model.forward_with_routing(tokens, bounds)
        h = model.encoder(model.embed(tokens))
    starts = [np.flatnonzero(row) for row in b.numpy()]
    assert starts[1].tolist() == list(range(0, TINY.length, 4))
    assert starts[0].tolist() == sorted(set(range(0, TINY.length, 4)) | {10, 11})
    start_of = torch.from_numpy(np.stack([s[np.searchsorted(s, np.arange(TINY.length), side="right") - 1]
                                          for s in starts]))
    expected = model.head(model.norm(h + h.gather(1, start_of[..., None].expand_as(h))))
    torch.testing.assert_close(logits, expected)  # confidence is 1 in value (straight-through)


def test_language_loss_reaches_the_router_through_the_confidence():
    model = build(TINY)
    tokens = torch.randint(0, 4, (4, TINY.length))
    logits = model(tokens)
    F.cross_entropy(logits.reshape(-1, 4), tokens.reshape(-1)).backward()
    assert model.route_q.weight.grad.abs().sum() > 0 and model.route_k.weight.grad.abs().sum() > 0


def test_ratio_loss_is_least_at_the_target_rate_over_free_positions():
    free = torch.ones(1, 8, dtype=torch.bool)

    def at(rate):
        b = (torch.arange(8) < 8 * rate).float()[None]
        return ratio_loss(torch.full((1, 8), rate), b, free, 4.0).item()

    assert at(0.25) == pytest.approx(1.0)
    assert at(0.125) > at(0.25) < at(0.5)
    # forced boundaries do not count towards the rate
    b = torch.tensor([[1.0, 1, 1, 1, 0, 0, 0, 1]])
    forced = torch.tensor([[True, True, True, True, False, False, False, False]])
    assert ratio_loss(torch.where(b > 0, 1.0, 0.0), b, ~forced, 4.0).item() == pytest.approx(1.0)


def test_fixed_tokenizations():
    assert dnachunker.kmer_boundaries((1, 10), 4)[0].tolist() == [1, 0, 0, 0, 1, 0, 0, 0, 1, 0]
    bases, _ = dna_data.windows("val", 32, 64, np.random.default_rng(0), 40_000)
    config = DNAChunkerConfig.tiny(chunking="bpe")
    bounds = dnachunker.bpe_boundaries(bases, config)
    assert (bounds[:, 0] == 1).all() and 2 < 64 / bounds.sum(1).mean() < 8
    masked = bases.copy()
    masked[:, 30] = MASK  # shown as N: the cut there cannot depend on the hidden base
    assert dnachunker.bpe_boundaries(masked, config)[:, 30].all()
    with pytest.raises(ValueError, match="boundaries as a second input"):
        build(config)(torch.from_numpy(bases))


def test_moved_far_counts_boundaries_moved_away_from_the_site():
    before = np.array([[1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]])
    assert dnachunker.moved_far(before, before, 6, 0, 2) == 0
    assert dnachunker.moved_far(before, np.roll(before, 1, axis=1), 6, 0, 2) > 0
    # an insertion at 6 shifts everything after it by one: no far move when compared shifted
    inserted = np.concatenate([before[:, :6], [[1]], before[:, 6:-1]], axis=1)
    assert dnachunker.moved_far(before, inserted, 6, 1, 2) == 0
    edge = inserted.copy()
    edge[0, -1] = 1 - edge[0, -1]  # the window's cut end is not the variant's doing
    assert dnachunker.moved_far(before, edge, 6, 1, 2) == 0
    edge[0, 1] = 1 - edge[0, 1]
    assert dnachunker.moved_far(before, edge, 6, 1, 2) == 1


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="'chunking' of DNAChunkerConfig must be one of dynamic, kmer, bpe"):
        DNAChunkerConfig(chunking="wordpiece")
    with pytest.raises(ValueError, match="'encoder' of DNAChunkerConfig must be one of conv, gru"):
        DNAChunkerConfig(encoder="mamba")


# --- training -------------------------------------------------------------------------

def test_training_is_deterministic_learns_and_holds_the_chunk_rate(dynamic):
    again = trained(TINY)
    for a, b in zip(dynamic.parameters(), again.parameters()):
        assert torch.equal(a, b)
    result = dnachunker.evaluate(dynamic, TINY)
    assert result["masked_accuracy"] > 0.4  # chance is about 0.25
    assert 2.0 < result["mean_chunk"] < 12.0  # the ratio loss keeps chunks near 4 bases, not one per window


def test_gru_encoder_trains():
    config = DNAChunkerConfig.tiny(encoder="gru", steps=20)
    assert dnachunker.evaluate(trained(config), config)["masked_accuracy"] > 0.25
