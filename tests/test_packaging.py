"""Every Python package of the source tree is in the distribution (a non-editable install,
as the service images do, gets only what pyproject.toml lists)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_package_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for name, folder in cfg["package-dir"].items():
        base = ROOT / folder
        for sub in [base, *(p for p in base.rglob("*") if p.is_dir())]:
            if sub.name == "__pycache__" or (
                not any(sub.glob("*.py")) and not any(sub.glob("*.toml"))
            ):
                continue
            rel = sub.relative_to(base)
            found.add(".".join([name, *rel.parts]))
    assert found - listed == set(), f"missing from [tool.setuptools] packages: {found - listed}"
