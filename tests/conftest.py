import pytest

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
