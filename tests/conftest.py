import pytest

from checkpoints import write_tiny_sharpen


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return write_tiny_sharpen(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_denoiser(tiny_model_dir):
    from sharpen.core.loading import load_denoiser

    return load_denoiser(tiny_model_dir)
