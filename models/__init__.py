"""The model zoo: one module per method, each trained small on CPU."""
