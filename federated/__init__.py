"""Federated and gossip training on Flower over simulated low-bandwidth links."""
