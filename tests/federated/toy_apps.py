"""Flower components over the toy workload, for the engine tests (``tests.federated.toy_apps:server_app``)."""

import hashlib
import json

from edgekit.federated.apps import make_client_app, make_server_app

from .toy import toy_workload


def workload_for(settings):
    return toy_workload(settings.clients)


def write_summary(settings, result, grid):
    rows = [{"round": r.round, "used": r.used, "sim_time": r.sim_time, "bytes_sent": r.bytes_sent,
             "eval": r.metrics.get("eval")} for r in result.records]
    final = hashlib.sha256(b"".join(name.encode() + result.final[name].tobytes() for name in sorted(result.final)))
    with open(settings.output, "w") as f:
        json.dump({"rounds": rows, "nodes": sorted(grid.get_node_ids()), "bytes": grid.bytes.as_dict(),
                   "records": [r.as_dict() for r in result.records], "summary": result.summary,
                   "final_sha256": final.hexdigest(), "resumed_from": result.resumed_from}, f)


server_app = make_server_app(workload_for, write_summary)
client_app = make_client_app(workload_for)
