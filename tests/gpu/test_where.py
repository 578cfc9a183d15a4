"""Which runner a GPU stage gets, and the message when there is none (no torch, no network)."""

import ast
import sys
from pathlib import Path

import pytest

from msda_labs.gpu import where
from msda_labs.gpu.where import GpuUnavailable, route

WHERE = Path(where.__file__)


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """A machine with no GPU, no Modal credentials and no runner preference."""
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_CONFIG_PATH", where.RUNNER_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(where, "torch_cuda", lambda: False)
    monkeypatch.setattr(where, "nvidia_driver", lambda: False)
    return monkeypatch


def test_neither_gpu_nor_modal_says_how_to_enable_both(bare):
    with pytest.raises(GpuUnavailable) as info:
        route("lab06")
    text = str(info.value)
    for phrase in ("nox -s lab06-gpu", "pip install modal==1.6.4", "modal token new",
                   "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "~/.modal.toml", "NVIDIA",
                   "never add it as a secret"):
        assert phrase in text, f"the how-to lacks {phrase!r}:\n{text}"


def test_modal_credentials_from_the_environment(bare):
    bare.setenv("MODAL_TOKEN_ID", "ak-test")
    assert where.modal_credentials() is None  # one half is not enough
    bare.setenv("MODAL_TOKEN_SECRET", "as-test")
    assert where.modal_credentials() == "MODAL_TOKEN_ID/MODAL_TOKEN_SECRET"
    assert route("lab06") == "modal"


def test_modal_credentials_from_the_config_file(bare, tmp_path):
    (tmp_path / ".modal.toml").write_text("[default]\ntoken_id = 'ak-x'\n")
    assert where.modal_credentials() is None  # a profile without its secret
    (tmp_path / ".modal.toml").write_text("[default]\ntoken_id = 'ak-x'\ntoken_secret = 'as-y'\n")
    assert route("lab06") == "modal"
    elsewhere = tmp_path / "conf" / "modal.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text("[p]\ntoken_id = 'a'\ntoken_secret = 'b'\n")
    (tmp_path / ".modal.toml").unlink()
    bare.setenv("MODAL_CONFIG_PATH", str(elsewhere))
    assert where.modal_credentials() == str(elsewhere)


def test_local_cuda_comes_first_unless_modal_is_forced(bare):
    bare.setattr(where, "torch_cuda", lambda: True)
    bare.setenv("MODAL_TOKEN_ID", "ak-test")
    bare.setenv("MODAL_TOKEN_SECRET", "as-test")
    assert route("lab05") == "local"
    bare.setenv(where.RUNNER_ENV, "modal")
    assert route("lab05") == "modal"


def test_forced_runner_that_is_not_there_fails_with_the_how_to(bare):
    bare.setenv(where.RUNNER_ENV, "local")
    with pytest.raises(GpuUnavailable, match="MSDA_GPU_RUNNER=local, but there is no CUDA"):
        route("lab05")
    bare.setenv(where.RUNNER_ENV, "modal")
    with pytest.raises(GpuUnavailable, match="no Modal credentials were found"):
        route("lab05")
    bare.setenv(where.RUNNER_ENV, "cloud")
    with pytest.raises(GpuUnavailable, match="not one of auto, local, modal"):
        route("lab05")


def test_without_torch_a_driver_stands_in(bare):
    bare.setattr(where, "torch_cuda", lambda: pytest.fail("use_torch=False must not ask torch"))
    bare.setattr(where, "nvidia_driver", lambda: True)
    assert route("lab08", use_torch=False) == "local"


def test_where_needs_only_the_standard_library():
    """The noxfile loads where.py before anything is installed."""
    tree = ast.parse(WHERE.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    imported.discard("torch")  # imported lazily, inside torch_cuda(), and optional
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
