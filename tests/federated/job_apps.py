"""edgekit's own apps (``edgekit.jobs.fl``'s ClientApp and runners: FedRGL, RieSelect) with the toy
apps' summary in place of the report, for the resume tests (``tests.federated.job_apps:server_app``)."""

from edgekit.federated.apps import make_server_app
from edgekit.jobs import fl as fl_job

from .toy_apps import write_summary

server_app = make_server_app(fl_job.workload_for, write_summary, runners=fl_job.RUNNERS)
client_app = fl_job.client_app
