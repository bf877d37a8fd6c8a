import os

import pytest
import torch

# Triton kernels run interpreted where there is no GPU (tests/test_kernels.py). Triton reads the
# flag when it is first imported, and torch.compile imports it (tests/test_batching_compiled.py
# runs before test_kernels.py, which used to set it at its own import): so it is set here, before
# any test runs. Seen failing: the 30 kernel tests, after test_batching_compiled.py, without this.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from checkpoints import write_tiny_sharpen


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return write_tiny_sharpen(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_denoiser(tiny_model_dir):
    from sharpen.core.models.loading import load_denoiser

    return load_denoiser(tiny_model_dir)


@pytest.fixture(autouse=True)
def _private_recovery_dir(tmp_path_factory, monkeypatch):
    """Editor tests never read or write the user's real recovery store."""
    monkeypatch.setenv("SHARPEN_RECOVERY_DIR", str(tmp_path_factory.mktemp("recovery")))
