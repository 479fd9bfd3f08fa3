"""Every ```python block of docs/python.md runs as it is against a real adjsnapd."""
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "python.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_snippets():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_snippet_runs(code, daemon, monkeypatch):
    if "devito" in code:
        pytest.importorskip("devito")
    if "pyrevolve" in code:
        pytest.importorskip("pyrevolve")
    monkeypatch.setenv("ADJSNAP_SOCKET", daemon.socket)
    exec(compile(code, str(DOC), "exec"), {"__name__": "docs"})
