"""One reader per accelerator vendor, all behind `AcceleratorReader`."""

from loam_agent.readers.base import AcceleratorReader
from loam_agent.readers.declared import ascend_reader, cambricon_reader, hygon_reader
from loam_agent.readers.nvidia import NvidiaReader


def all_readers() -> list[AcceleratorReader]:
    return [NvidiaReader(), ascend_reader(), hygon_reader(), cambricon_reader()]
