"""Federated and gossip training on Flower over simulated low-bandwidth links.

The same Flower apps run in process, on Flower's simulation engine (Ray) and on its
deployment engine; the simulated network sits at Flower's ``Grid`` seam.

choices       the names a user picks from (methods, engines, compressions, mixings), light to import
links         bandwidth, latency, jitter, drops, outages, device speed, stragglers
wire          messages as Flower serializes them: sizes, copies, the gossip relay convention
inproc_grid   a Grid running every client's ClientApp in this process, deterministically
network_grid  a Grid wrapping any Grid with the simulated network, clocks and byte counts
flower_grid   what sits under it on Flower's engines: nodes by partition-id, client state for resumes
topology      communication graphs and lazy Metropolis mixing matrices
compression   exchanged tensors as ArrayRecords, optionally MX-compressed
records       the per-round record and the check every client update passes
checkpoint    one checkpoint file per run, rewritten every round
workload      what is trained (model, optimizer, data, evaluation) and the worker's training helpers
engine        EdgeStrategy (a Flower Strategy), GlobalModelStrategy, the round loop with records and checkpoints
diloco        DiLoCo
gossip        gossip DiLoCo
graphs        Planetoid and CSBM graphs, Louvain clients, label noise
fedrgl        FedRGL (noise-robust federated GCNs) and its baselines
rieselect     RieSelect (continual learning with a selective uplink) and its baselines
apps          the run config, the method table, the ServerApp and ClientApp, the in-process run
flower_run    a Flower app directory, ``flwr run``, a SuperLink and SuperNodes on loopback
"""
