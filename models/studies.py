"""Studies: methods whose core is an algorithm rather than one network, each with a config and ``evaluate``.

A study entry is what a model entry is without training: a config dataclass (a ``seed``
field and a ``tiny()`` classmethod for tests) and ``evaluate(config) -> {metric: number}``.
``edgekit study NAME`` runs one; ``registry.make_config`` builds its config from
``--config`` items as it does for models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import checker_studies, comparison_oracle, dcla, phasealign, usable_information


@dataclass(frozen=True)
class StudyEntry:
    name: str
    description: str
    config: type
    evaluate: Callable  # config -> {metric name: number}
    metric: str  # the headline number of ``evaluate``
    higher_is_better: bool

    @property
    def metric_label(self) -> str:
        return f"{self.metric} ({'higher' if self.higher_is_better else 'lower'} is better)"


STUDIES: dict[str, StudyEntry] = {
    "dcla": StudyEntry(
        "dcla", "DC-LA proximal Langevin sampling from exp(-f - r1 + r2) against MYULA on r1 and sub-gradient "
        "Langevin; target= toy (2-d, exact by quadrature) or deconvolution (64 pixels)",
        dcla.DCLAConfig, dcla.evaluate, "w1_dcla", False),
    "comparison_oracle": StudyEntry(
        "comparison_oracle", "Gradient testing (O(1) queries) and estimation (n log(sqrt(n)/eps) queries) with an "
        "oracle that only compares two values; function= quadratic, logistic or quantized_net (MXFP4 digits MLP)",
        comparison_oracle.ComparisonOracleConfig, comparison_oracle.evaluate, "estimator_error", False),
    "usable_information": StudyEntry(
        "usable_information", "Usable (V-)information between the digits MLP's layers and its quantized copies' "
        "(what each format destroys, layer by layer), with linear CKA; family= linear or mlp",
        usable_information.UsableInformationConfig, usable_information.evaluate, "min_info_quant_to_float", True),
    "fuzzeval": StudyEntry(
        "fuzzeval", "FuzzEval: sandboxed fuzz tests of HumanEval programs (canonical and AST mutants), selection "
        "with a PAC bound on the false discovery rate, against empirical and example-only thresholds",
        checker_studies.FuzzEvalConfig, checker_studies.evaluate_fuzzeval, "violation_rate_fuzzeval_pac", False),
    "nemo": StudyEntry(
        "nemo", "NEMO: generated optimisation word problems to HiGHS / CP-SAT models, cross-checked by simulators, "
        "repaired, MBR and self-consistency, memory of solved problems",
        checker_studies.NemoConfig, checker_studies.evaluate_nemo, "accuracy_validated_mbr", True),
    "labbuilder": StudyEntry(
        "labbuilder", "LabBuilder: generated specifications to protocols to lab layouts (annealing, safety "
        "separations, A* reachability), against random and greedy placement",
        checker_studies.LabBuilderConfig, checker_studies.evaluate_labbuilder, "reachable_step_fraction_optimised",
        True),
    "phasealign": StudyEntry(
        "phasealign", "PhaseAlign training-free open-vocabulary segmentation (complex phase alignment, local contrast "
        "normalisation, attention propagation) against MaskCLIP cosine on the tiny CLIP, held-out colour-shape scenes",
        phasealign.PhaseAlignConfig, phasealign.evaluate, "miou_phasealign", True),
}


def study_names() -> list[str]:
    return list(STUDIES)


def get_study(name: str) -> StudyEntry:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; studies: {', '.join(STUDIES)}")
    return STUDIES[name]
