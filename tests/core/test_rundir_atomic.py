"""Run-dir files others read while a run writes them (settings.json, summary.json ...) are
written atomically: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import threading

from ppomq.core.rundir import write_json_atomic


def test_a_reader_never_sees_half_a_file_while_it_is_rewritten(tmp_path):
    path = tmp_path / "settings.json"
    docs = [{"n": i, "pad": "x" * 200_000} for i in range(2)]
    write_json_atomic(path, docs[0])
    stop = threading.Event()

    def rewrite() -> None:
        i = 0
        while not stop.is_set():
            write_json_atomic(path, docs[i % 2])
            i += 1

    writer = threading.Thread(target=rewrite)
    writer.start()
    seen = set()
    try:
        for _ in range(300):
            seen.add(json.loads(path.read_text())["n"])  # raises on a partial file
    finally:
        stop.set()
        writer.join()
    assert seen <= {0, 1}
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no temp file left
