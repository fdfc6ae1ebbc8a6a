import os
import stat

import pytest
from loam_agent.readers.base import ReaderState
from loam_agent.readers.declared import ascend_reader, cambricon_reader, hygon_reader

READERS = [
    (ascend_reader, "npu-smi"),
    (hygon_reader, "hy-smi"),
    (hygon_reader, "rocm-smi"),
    (cambricon_reader, "cnmon"),
]


def put_tool_on_path(folder, tool, monkeypatch):
    path = folder / tool
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", str(folder))
    return path


@pytest.mark.parametrize(("make_reader", "tool"), READERS)
def test_detected_tool_is_declared_unsupported_with_no_figures(
    make_reader, tool, tmp_path, monkeypatch
):
    path = put_tool_on_path(tmp_path, tool, monkeypatch)
    reader = make_reader()

    status = reader.available()

    assert status.state is ReaderState.UNSUPPORTED
    assert str(path) in status.message
    assert "not supported by this agent version" in status.message
    assert reader.inventory() == reader.sample() == []


@pytest.mark.parametrize(("make_reader", "tool"), READERS)
def test_without_the_tool_the_vendor_is_not_present(make_reader, tool, tmp_path, monkeypatch):
    reader = make_reader()
    if any(os.path.exists(path) for path in reader._paths):
        pytest.skip(f"this machine has {reader.vendor}'s software installed")
    monkeypatch.setenv("PATH", str(tmp_path))

    status = reader.available()

    assert status.state is ReaderState.NOT_PRESENT
    assert tool in status.message
