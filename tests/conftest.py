import os

import pytest
from hypothesis import settings

# Same examples on every run: the suite must be deterministic.
settings.register_profile("edgekit", derandomize=True, deadline=None, max_examples=60)
settings.load_profile("edgekit")


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """Trained models go into a cache of this test session, never the user's."""
    path = tmp_path_factory.mktemp("edgekit-cache")
    previous = os.environ.get("EDGEKIT_CACHE_DIR")
    os.environ["EDGEKIT_CACHE_DIR"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("EDGEKIT_CACHE_DIR", None)
    else:
        os.environ["EDGEKIT_CACHE_DIR"] = previous
