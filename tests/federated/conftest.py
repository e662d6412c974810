import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Clients run one after another: one thread each avoids oversubscribing a shared machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
