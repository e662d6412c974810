import math

import numpy as np
import pytest
import torch
from torch import nn

from edgekit.models import mdm_samplers, sudoku
from edgekit.models.mdm_samplers import sample, schedule
from edgekit.models.registry import make_config, train
from edgekit.models.sudoku_mdm import SudokuMDMConfig, evaluate, mask_grids, puzzles_for, run_sampler
from edgekit.models.weights import quantized_copy

torch.set_num_threads(1)
TINY = SudokuMDMConfig.tiny()

PUZZLE_9 = np.array([[5, 3, 0, 0, 7, 0, 0, 0, 0], [6, 0, 0, 1, 9, 5, 0, 0, 0], [0, 9, 8, 0, 0, 0, 0, 6, 0],
                     [8, 0, 0, 0, 6, 0, 0, 0, 3], [4, 0, 0, 8, 0, 3, 0, 0, 1], [7, 0, 0, 0, 2, 0, 0, 0, 6],
                     [0, 6, 0, 0, 0, 0, 2, 8, 0], [0, 0, 0, 4, 1, 9, 0, 0, 5], [0, 0, 0, 0, 8, 0, 0, 7, 9]])


@pytest.fixture(scope="module")
def trained():
    return train("sudoku_mdm", TINY, cache_dir=False).model


# --- sudoku ---------------------------------------------------------------------------

def test_solver_finds_the_unique_solution_and_counts_several():
    solution = sudoku.unique_solution(PUZZLE_9)
    assert sudoku.violations(solution) == 0 and (solution > 0).all()
    assert (solution[PUZZLE_9 > 0] == PUZZLE_9[PUZZLE_9 > 0]).all()
    assert solution[0, 2] == 4 and solution[8, 0] == 3
    assert len(sudoku.solve(np.zeros((4, 4), int), limit=5)) == 5
    with pytest.raises(ValueError, match="more than one solution"):
        sudoku.unique_solution(np.zeros((4, 4), int))


def test_all_4x4_grids_are_288_distinct_valid_grids():
    grids = sudoku.all_grids_4x4()
    assert grids.shape == (288, 4, 4)
    assert len({g.tobytes() for g in grids}) == 288
    assert all(sudoku.violations(g) == 0 for g in grids)


def puzzles_for_have_the_level_holes_and_one_solution():
    rng = np.random.default_rng(1)
    solved = sudoku.random_solved_grid(9, rng)
    assert sudoku.violations(solved) == 0 and (solved > 0).all()
    puzzle = sudoku.make_puzzle(solved, 46, rng)
    assert (puzzle == 0).sum() == 46
    assert (sudoku.unique_solution(puzzle) == solved).all()
    puzzles, solutions = sudoku.puzzle_set(4, "hard", "test", 20)
    assert ((puzzles == 0).sum(axis=(1, 2)) == 11).all()
    assert all((sudoku.unique_solution(p) == s).all() for p, s in zip(puzzles, solutions))


def test_splits_are_disjoint():
    for n, count in ((4, 0), (9, 50)):
        split = sudoku.grid_splits(n, count)
        keys = {name: {g.tobytes() for g in grids} for name, grids in split.items()}
        assert not keys["train"] & keys["test"] and not keys["train"] & keys["val"] and not keys["val"] & keys["test"]


def test_violations_count_repeats_per_unit():
    grid = sudoku.all_grids_4x4()[0].copy()
    assert sudoku.violations(grid) == 0
    grid[0, 0] = grid[0, 1]  # a repeat in one row and one box, and (the digit moves) maybe one column
    assert sudoku.violations(grid) >= 2
    assert sudoku.violations(np.zeros((9, 9), int)) == 0


@pytest.mark.parametrize("grid, message", [
    (np.zeros((4, 5), int), "square"),
    (np.zeros((5, 5), int), "size n=5"),
    (np.full((4, 4), 7), "0 \\(empty\\) or 1..4"),
    (np.array([[1, 1, 0, 0], [0] * 4, [0] * 4, [0] * 4]), "repeats a digit"),
    ([["a"] * 4] * 4, "integers"),
])
def test_malformed_grids_are_refused(grid, message):
    with pytest.raises(ValueError, match=message):
        sudoku.solve(grid)


def test_a_puzzle_without_solution_is_refused():
    # no repeated digit, but cell (0, 3) has no candidate left: 1, 2 in its row, 3 in its column, 4 in its box
    puzzle = np.array([[1, 2, 0, 0], [0, 0, 4, 0], [0, 0, 0, 3], [0, 0, 0, 0]])
    with pytest.raises(ValueError, match="no solution"):
        sudoku.unique_solution(puzzle)


def test_bad_size_level_and_config_are_refused():
    with pytest.raises(ValueError, match="allowed: 4, 9"):
        sudoku.box_size(6)
    with pytest.raises(ValueError, match="allowed: easy, medium, hard"):
        sudoku.holes_for(4, "evil")
    with pytest.raises(ValueError, match="level"):
        make_config("sudoku_mdm", {"level": "evil"})
    with pytest.raises(ValueError, match="multiple of 32"):
        SudokuMDMConfig(width=48, heads=2)


# --- training -------------------------------------------------------------------------

def test_mask_rates_vary_and_every_row_has_a_mask():
    grids = torch.from_numpy(sudoku.all_grids_4x4()[:200].reshape(200, 16))
    tokens, masked = mask_grids(grids, np.random.default_rng(0))
    assert masked.any(-1).all()
    assert torch.equal(tokens == 0, masked) and torch.equal(tokens[~masked], grids[~masked])
    per_row = masked.float().mean(-1)
    assert per_row.min() < 0.2 and per_row.max() > 0.8  # t ~ U(0, 1) per row, not one rate for the batch


def test_training_is_deterministic_and_learns_to_solve(trained):
    again = train("sudoku_mdm", TINY, cache_dir=False).model
    for a, b in zip(trained.parameters(), again.parameters()):
        assert torch.equal(a, b)
    result = evaluate(trained, TINY)
    assert result["confidence_solve_rate"] > 0.9 and result["solve_rate"] > 0.9
    assert result["forward_calls"] == TINY.rounds and result["info_gain_rows"] == 1 + (TINY.rounds - 1) * 4
    again = evaluate(trained, TINY)
    assert {k: v for k, v in again.items() if "seconds" not in k} == {k: v for k, v in result.items()
                                                                      if "seconds" not in k}


# --- samplers -------------------------------------------------------------------------

def test_schedule_splits_holes_evenly():
    plan = schedule(torch.tensor([11, 3, 0]), 4)
    assert plan.sum(0).tolist() == [11, 3, 0]
    assert plan[:, 0].tolist() == [3, 3, 3, 2] and plan[:, 1].tolist() == [1, 1, 1, 0]
    with pytest.raises(ValueError, match="steps"):
        schedule(torch.tensor([3]), 0)


class FixedLogits(nn.Module):
    """Returns the same per-position logits whatever the input; counts calls and rows."""

    def __init__(self, logits):
        super().__init__()
        self.logits, self.calls, self.batch_sizes = torch.as_tensor(logits, dtype=torch.float32), 0, []

    def forward(self, tokens):
        self.calls += 1
        self.batch_sizes.append(len(tokens))
        return self.logits.expand(len(tokens), -1, -1)


def test_greedy_scores_rank_positions_by_their_own_criterion():
    # A: most confident, small margin; B: widest margin, highest entropy; C: lowest entropy, no margin
    probs = torch.tensor([[[0.5, 0.48, 0.01, 0.01], [0.45, 0.1833, 0.1833, 0.1834], [0.49, 0.49, 0.02, 1e-6]]])
    masked, one = torch.ones(1, 3, dtype=torch.bool), torch.tensor([1])
    picks = {m: mdm_samplers.top_positions(mdm_samplers.position_scores(probs.log(), m), masked, one)[0]
             .nonzero().item() for m in mdm_samplers.GREEDY}
    assert picks == {"confidence": 0, "entropy": 2, "margin": 1}
    masked[0, 0] = False  # a committed position is never picked again
    assert mdm_samplers.top_positions(mdm_samplers.position_scores(probs.log(), "confidence"), masked,
                                      one)[0].nonzero().item() == 2
    model = FixedLogits(probs.log())
    out = sample(model, torch.zeros(1, 3, dtype=torch.long), "margin", 3)
    assert out.tokens.tolist() == [[1, 1, 1]] and model.calls == out.forward_calls == 3


def test_info_gain_with_one_candidate_is_greedy_confidence_with_reused_logits(trained):
    puzzles, _ = puzzles_for(TINY, "test", 16)
    tokens = torch.from_numpy(puzzles.reshape(16, -1))
    for rounds in (3, 9):
        greedy = sample(trained, tokens, "confidence", rounds)
        info = sample(trained, tokens, "info_gain", rounds, candidates=1)
        assert torch.equal(greedy.tokens, info.tokens)  # reused logits are exactly the next state's
        assert info.forward_calls == greedy.forward_calls == rounds


class Lookahead(nn.Module):
    """Three binary positions. Position 0 leans to value 1 (0.6); writing value 2 there makes
    positions 1 and 2 certain, anything else leaves them uniform."""

    def __init__(self):
        super().__init__()
        self.calls, self.batch_sizes = 0, []

    def forward(self, tokens):
        self.calls += 1
        self.batch_sizes.append(len(tokens))
        out = torch.zeros(len(tokens), 3, 2)
        out[:, 0] = torch.tensor([0.6, 0.4]).log()
        out[:, 1:, 0] = torch.where(tokens[:, :1] == 2, 10.0, 0.0)
        return out


def test_info_gain_commits_the_action_that_leaves_least_entropy_in_one_batched_call():
    model = Lookahead()
    start = torch.zeros(1, 3, dtype=torch.long)
    greedy = sample(model, start, "confidence", 3)
    assert greedy.tokens[0, 0] == 1  # the locally most certain choice
    model.calls, model.batch_sizes = 0, []
    info = sample(model, start, "info_gain", 3, candidates=16, temperature=2.0,
                  generator=torch.Generator().manual_seed(0))
    assert info.tokens[0].tolist() == [2, 1, 1]  # value 2 at position 0, then the now-certain values
    assert model.calls == info.forward_calls == 3  # one plain call, then one batched call per round but the last
    assert model.batch_sizes == [1, 16, 16] and info.rows == 1 + 2 * 16


def test_bad_sampler_arguments_are_refused():
    model = FixedLogits(torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="allowed: confidence, entropy, margin, info_gain"):
        sample(model, torch.zeros(1, 2, dtype=torch.long), "beam", 2)
    with pytest.raises(ValueError, match="candidates"):
        sample(model, torch.zeros(1, 2, dtype=torch.long), "info_gain", 2, candidates=0)


def test_samplers_run_on_quantized_weights(trained):
    puzzles, solutions = puzzles_for(TINY, "test", 16)
    for fmt in ("mxint8", "mxfp4"):
        result = run_sampler(quantized_copy(trained, fmt), puzzles, solutions, "info_gain", 3, candidates=4)
        assert math.isfinite(result["cell_accuracy"]) and result["cell_accuracy"] > 0.5
        assert result["forward_calls"] == 3 and result["rows"] == 1 + 2 * 4
