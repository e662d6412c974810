"""``python -m tests.federated.toy_run METHOD ROUNDS CHECKPOINT``: a checkpointed in-process toy run (killed by a test)."""

import sys

from edgekit.federated.apps import RunSettings, run_in_process

from .toy import toy_workload


def settings(method: str, rounds: int) -> RunSettings:
    return RunSettings(method=method, clients=4, rounds=rounds, inner_steps=5, mixing_steps=1, bandwidth_bps=1e6,
                       device_flops=1e6, drop=0.2, outage=0.1, outage_period_s=0.5, jitter_s=0.01, seed=3)


if __name__ == "__main__":
    method, rounds, checkpoint = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    workload = toy_workload(4)
    run_in_process(settings(method, rounds), lambda _: workload, checkpoint=checkpoint)
