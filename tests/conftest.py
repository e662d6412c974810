from hypothesis import settings

# Same examples on every run: the suite must be deterministic.
settings.register_profile("edgekit", derandomize=True, deadline=None, max_examples=60)
settings.load_profile("edgekit")
