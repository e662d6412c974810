"""Representation similarity as usable (V-)information, with stitching, linear CKA and RSA beside it.

For representations A and B of the same inputs (rows), the usable information from A
to B under a predictive family V is I_V(A -> B) = H_V(B) - H_V(B | A): how much a
predictor in V, fitted on the training inputs, lowers the held-out log-loss of B. For a
continuous B the family is Gaussian with a fitted variance per coordinate, so
I_V = mean_j 1/2 log(Var B_j / MSE_j) (nats per coordinate); for labels (a network's
predicted class) it is a softmax family and I_V = H(labels) - held-out cross-entropy.
V is linear (ridge, or multinomial logistic regression) or an MLP; both are chosen
with held-out validation data inside the training inputs. It is asymmetric, and an MLP
family sees through invertible nonlinear maps that linear CKA does not.

Functional similarity: stitching A's front into B's back through a trained linear
layer, scored by B's task accuracy; both directions. Then the same measure, layer by
layer, between a float model and its quantized copies: what a number format destroys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr
from torch import nn

from edgekit.simulators import weight_formats as wf

from .config_fields import bounded, checked

FAMILIES = ("linear", "mlp")
RESOLUTION = 1e-6  # relative squared error at which a coordinate counts as known exactly
TASKS = ("fine", "coarse")


def check_pair(a: np.ndarray, b: np.ndarray, names: tuple[str, str] = ("a", "b")) -> tuple[np.ndarray, np.ndarray]:
    """Two representations of the same inputs: 2-d arrays with one row per input."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"{names[0]} and {names[1]} must be 2-d (inputs x features), got shapes {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{names[0]} and {names[1]} must hold the same inputs (rows): got {a.shape[0]} and "
                         f"{b.shape[0]} rows")
    return a, b


def _check_family(family: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    return family


# -- usable information ---------------------------------------------------------------------

def fit_mlp(x: np.ndarray, target: np.ndarray, classes: int | None, seed: int, hidden: int = 128,
            max_steps: int = 600, patience: int = 60):
    """The MLP family: standardized inputs, one hidden ReLU layer, full-batch Adam on squared error
    (``classes`` None) or cross-entropy, stopped at the best loss on a held-out 15% of the rows.
    Returns predict(x) -> predictions, or class probabilities."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=generator).numpy()
    n_val = max(1, int(0.15 * len(x)))
    val, fit = order[:n_val], order[n_val:]
    mean, scale = x[fit].mean(0), x[fit].std(0) + 1e-8
    xs = torch.from_numpy((x - mean) / scale).float()
    y = torch.from_numpy(target).long() if classes else torch.from_numpy(target).float()
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(x.shape[1], hidden), nn.ReLU(), nn.Linear(hidden, classes or target.shape[1]))
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-4)

    def loss(rows):
        out = net(xs[rows])
        return nn.functional.cross_entropy(out, y[rows]) if classes else ((out - y[rows]) ** 2).mean()

    best, best_state, since = np.inf, None, 0
    for _ in range(max_steps):
        optimizer.zero_grad()
        loss(fit).backward()
        optimizer.step()
        with torch.no_grad():
            value = float(loss(val))
        if value < best:
            best, best_state, since = value, {k: v.clone() for k, v in net.state_dict().items()}, 0
        elif (since := since + 1) >= patience:
            break
    net.load_state_dict(best_state)

    def predict(z):
        with torch.no_grad():
            out = net(torch.from_numpy((np.asarray(z) - mean) / scale).float())
            return (out.softmax(1) if classes else out).double().numpy()

    return predict


def _fit_regression(family: str, a_train: np.ndarray, b_train: np.ndarray, seed: int, mlp_steps: int):
    if family == "mlp":
        return fit_mlp(a_train, b_train, None, seed, max_steps=mlp_steps)
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-6, 3, 19), alpha_per_target=True)).fit(a_train, b_train)
    return lambda z: model.predict(z).reshape(len(z), -1)


def _fit_classifier(family: str, a_train: np.ndarray, y_train: np.ndarray, seed: int, mlp_steps: int):
    """predict_proba over the classes 0..max(y_train)."""
    if family == "mlp":
        return fit_mlp(a_train, y_train, int(y_train.max()) + 1, seed, max_steps=mlp_steps)
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000)).fit(a_train, y_train)
    classes = model.classes_

    def predict(z):
        prob = np.zeros((len(z), int(y_train.max()) + 1))
        prob[:, classes] = model.predict_proba(z)
        return prob

    return predict


def usable_information(a_train, b_train, a_test, b_test, family: str = "linear", seed: int = 0,
                       mlp_steps: int = 600) -> float:
    """I_V(A -> B) in nats per coordinate of B: mean_j 1/2 log(Var_j / MSE_j) on the test rows,
    a predictor of B from A in ``family`` fitted on the train rows (floored at 0: V holds the
    constant predictor; capped at 1/2 log(1/RESOLUTION) = 6.9 nats, a coordinate predicted to
    within RESOLUTION of its variance counting as fully known). Coordinates of B that are
    constant carry no information and are left out. ``mlp_steps``: the MLP family's most
    training steps (``fit_mlp``'s ``max_steps``)."""
    _check_family(family)
    a_train, b_train = check_pair(a_train, b_train, ("a_train", "b_train"))
    a_test, b_test = check_pair(a_test, b_test, ("a_test", "b_test"))
    if a_train.shape[1] != a_test.shape[1] or b_train.shape[1] != b_test.shape[1]:
        raise ValueError(f"train and test representations must have the same features: a {a_train.shape[1]} vs "
                         f"{a_test.shape[1]}, b {b_train.shape[1]} vs {b_test.shape[1]}")
    keep = b_train.std(0) > 1e-8 * max(1.0, float(np.abs(b_train).max()))
    if not keep.any():
        return 0.0
    b_train, b_test = b_train[:, keep], b_test[:, keep]
    mean, scale = b_train.mean(0), b_train.std(0)
    pred = _fit_regression(family, a_train, (b_train - mean) / scale, seed, mlp_steps)(a_test) * scale + mean
    variance = np.maximum(((b_test - mean) ** 2).mean(0), 1e-12)  # the constant predictor's error
    mse = np.maximum(((b_test - pred) ** 2).mean(0), RESOLUTION * variance)
    return float(np.maximum(0.5 * np.log(variance / mse), 0.0).mean())


def label_usable_information(a_train, y_train, a_test, y_test, family: str = "linear", seed: int = 0,
                             groups: np.ndarray | None = None, mlp_steps: int = 600) -> dict:
    """I_V(A -> labels) = H(labels) - held-out cross-entropy (nats), the predictor fitted on train rows
    (``mlp_steps``: as in ``usable_information``).

    ``groups`` (label -> coarse label) also scores the coarse task with the fine predictor's
    probabilities summed over each group: a member of the coarse family whose loss is at most
    the fine loss on every input (log of a sum >= log of a term), so residual uncertainty
    about the fine labels bounds that about the coarse ones."""
    _check_family(family)
    a_train, a_test = np.asarray(a_train, dtype=np.float64), np.asarray(a_test, dtype=np.float64)
    check_pair(a_train, np.asarray(y_train).reshape(-1, 1), ("a_train", "y_train"))
    check_pair(a_test, np.asarray(y_test).reshape(-1, 1), ("a_test", "y_test"))
    y_train, y_test = np.asarray(y_train, dtype=np.int64), np.asarray(y_test, dtype=np.int64)
    if y_train.min() < 0:
        raise ValueError("labels must be class indices 0, 1, ...")
    prob = _fit_classifier(family, a_train, y_train, seed, mlp_steps)(a_test)
    p_true = np.where(y_test < prob.shape[1], prob[np.arange(len(y_test)), np.minimum(y_test, prob.shape[1] - 1)], 0.0)
    out = {"entropy": _entropy(y_train, y_test), "conditional_entropy": float(-np.log(np.maximum(p_true, 1e-12)).mean())}
    out["information"] = max(out["entropy"] - out["conditional_entropy"], 0.0)
    if groups is not None:
        coarse_test = groups[y_test]
        p_coarse = (prob * (groups[: prob.shape[1]][None, :] == coarse_test[:, None])).sum(1)
        out["coarse_conditional_entropy"] = float(-np.log(np.maximum(p_coarse, 1e-12)).mean())
        out["coarse_entropy"] = _entropy(groups[y_train], coarse_test)
        out["coarse_information"] = max(out["coarse_entropy"] - out["coarse_conditional_entropy"], 0.0)
    return out


def _entropy(y_train, y_test) -> float:
    """Held-out cross-entropy of the train label frequencies (the constant predictor, smoothed)."""
    values, counts = np.unique(y_train, return_counts=True)
    p = dict(zip(values, (counts + 0.5) / (counts.sum() + 0.5 * len(values))))
    return float(-np.mean([np.log(p.get(v, 1e-12)) for v in y_test]))


# -- baselines: linear CKA, RSA -------------------------------------------------------------

def linear_cka(a, b) -> float:
    """||B'A||_F^2 / (||A'A||_F ||B'B||_F) on centred features: symmetric, invariant to rotations and scale."""
    a, b = check_pair(a, b)
    a, b = a - a.mean(0), b - b.mean(0)
    cross = np.linalg.norm(b.T @ a) ** 2
    return float(cross / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b)))


def rsa(a, b) -> float:
    """Spearman correlation of the two representational dissimilarity matrices (correlation distance)."""
    a, b = check_pair(a, b)
    return float(spearmanr(pdist(a, "correlation"), pdist(b, "correlation"))[0])


# -- networks on load_digits, their layers, stitching ---------------------------------------

def train_network(hidden: int, seed: int, steps: int = 660) -> nn.Module:
    """The zoo's digits MLP at ``hidden`` width, initialized and batched by ``seed``, always on the
    split of seed 0 so that every network is compared on the same held-out images."""
    from . import digits, training
    from .cache import source_digest

    config = digits.DigitsConfig(hidden=hidden, steps=steps, seed=seed)
    return training.fit("digits", config, digits.build,
                        lambda c: digits.train_spec(dataclasses.replace(c, seed=0)),
                        source_digest(digits, training), progress=False).model


def digits_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from .digits import load_digits_split

    return load_digits_split(0.25, 0)


def layer_outputs(model: nn.Module, x: np.ndarray) -> list[np.ndarray]:
    """The output of each ReLU and of the last layer (the logits) of a Sequential MLP."""
    outs, h = [], torch.from_numpy(np.asarray(x, dtype=np.float32))
    with torch.no_grad():
        for i, module in enumerate(model):
            h = module(h)
            if isinstance(module, nn.ReLU) or i == len(model) - 1:
                outs.append(h.numpy().astype(np.float64))
    return outs


def cut_points(model: nn.Module) -> list[int]:
    """Indices just after each ReLU: where a Sequential MLP can be cut for stitching."""
    return [i + 1 for i, m in enumerate(model) if isinstance(m, nn.ReLU)]


def stitch_accuracy(front: nn.Module, back: nn.Module, layer: int, task: str = "fine", steps: int = 300,
                    seed: int = 0) -> float:
    """Test accuracy of back[cut:](S(front[:cut](x))) with a linear S trained on the train split
    (front and back frozen) by cross-entropy on ``task`` (fine: the 10 digits; coarse: even/odd,
    from the summed probabilities of back's digits)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    cuts_front, cuts_back = cut_points(front), cut_points(back)
    if not 0 <= layer < min(len(cuts_front), len(cuts_back)):
        raise ValueError(f"layer must be in [0, {min(len(cuts_front), len(cuts_back)) - 1}], got {layer}")
    head, tail = front[: cuts_front[layer]], back[cuts_back[layer]:]
    x_train, y_train, x_test, y_test = digits_data()
    with torch.no_grad():
        h_train, h_test = head(torch.from_numpy(x_train)), head(torch.from_numpy(x_test))
    width_in, width_out = h_train.shape[1], tail[0].in_features
    torch.manual_seed(seed)
    stitch = nn.Linear(width_in, width_out)
    optimizer = torch.optim.Adam(stitch.parameters(), lr=1e-2)
    y = torch.from_numpy(y_train)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = task_loss(tail(stitch(h_train)), y, task)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        logits = tail(stitch(h_test))
    return task_accuracy(logits, y_test, task)


def task_loss(logits: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    if task == "fine":
        return nn.functional.cross_entropy(logits, y)
    coarse = logits.log_softmax(1).view(-1, 5, 2).logsumexp(1)  # columns: even (0,2,..), odd (1,3,..)
    return nn.functional.nll_loss(coarse, y % 2)


def task_accuracy(logits: torch.Tensor, y: np.ndarray, task: str) -> float:
    pred = logits.argmax(1).numpy()
    return float((pred == y).mean() if task == "fine" else (pred % 2 == y % 2).mean())


# -- the study entry (edgekit study usable_information) -------------------------------------

def _known_format(name) -> bool:
    """A block or LiftQuant format of the weight-format table (a float one damages nothing)."""
    try:
        return wf.resolve(name).family != "float"
    except ValueError:
        return False


FORMATS_ALLOWED = (f"a block format ({', '.join(wf.names('block'))}; name@block, name_asym) "
                   "or a LiftQuant configuration (liftquant:BITS, liftquant_DtoD; see `edgekit formats`)")
QUANT_FORMATS = (*wf.names("block"), *wf.liftquant_for_bits(2.4, 4))


@dataclass(frozen=True)
@checked
class UsableInformationConfig:
    hidden: int = bounded(256, low=1)
    steps: int = bounded(660, low=1)
    formats: tuple[str, ...] = bounded(QUANT_FORMATS, check=_known_format, allowed=FORMATS_ALLOWED)
    family: str = bounded("linear", choices=FAMILIES)
    seed: int = bounded(0, low=0)

    @classmethod
    def tiny(cls, **overrides) -> UsableInformationConfig:
        return cls(**{"hidden": 32, "steps": 120, "formats": ("mxint8", "mxfp4"), **overrides})


def quantization_damage(config: UsableInformationConfig | None = None) -> list[dict]:
    """Per format and layer: I_V(quantized -> float) and I_V(float -> quantized) (nats per coordinate),
    linear CKA, and the quantized model's accuracy, on the digits MLP trained at ``config``."""
    config = config or UsableInformationConfig()
    from .weights import quantized_copy

    model = train_network(config.hidden, config.seed, config.steps)
    x_train, _, x_test, y_test = digits_data()
    float_train, float_test = layer_outputs(model, x_train), layer_outputs(model, x_test)
    rows = []
    for name in config.formats:
        q = quantized_copy(model, name)
        q_train, q_test = layer_outputs(q, x_train), layer_outputs(q, x_test)
        accuracy = task_accuracy(torch.from_numpy(q_test[-1]), y_test, "fine")
        for layer, (ft, fs, qt, qs) in enumerate(zip(float_train, float_test, q_train, q_test)):
            rows.append({"format": name, "layer": layer, "accuracy": accuracy,
                         "info_quant_to_float": usable_information(qt, ft, qs, fs, config.family, config.seed),
                         "info_float_to_quant": usable_information(ft, qt, fs, qs, config.family, config.seed),
                         "info_float_to_float": usable_information(ft, ft, fs, fs, config.family, config.seed),
                         "cka": linear_cka(fs, qs)})
    return rows


def evaluate(config: UsableInformationConfig | None = None) -> dict:
    """Per format: the usable information each layer keeps about the float model's, the lowest over
    layers, and its accuracy."""
    config = config or UsableInformationConfig()
    out = {}
    for row in quantization_damage(config):
        key = row["format"]
        out[f"info_quant_to_float_{key}_layer{row['layer'] + 1}"] = row["info_quant_to_float"]
        out[f"min_info_quant_to_float_{key}"] = min(out.get(f"min_info_quant_to_float_{key}", np.inf),
                                                    row["info_quant_to_float"])
        out[f"accuracy_{key}"] = row["accuracy"]
    out["min_info_quant_to_float"] = min(v for k, v in out.items() if k.startswith("min_info"))
    return out
