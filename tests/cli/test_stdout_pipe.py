"""`speclab run … | head -1`: once the reader is gone, printing is dropped and the run goes on."""

from __future__ import annotations

import io
import os

from speclab.cli.stdout_pipe import PipeSafeStdout


def test_a_closed_pipe_drops_output_instead_of_raising() -> None:
    read_end, write_end = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8", line_buffering=True)
    out = PipeSafeStdout(stream)
    try:
        out.write("first line\n")
        assert os.read(read_end, 100) == b"first line\n" and not out.reader_gone
        os.close(read_end)  # `head -1` has what it wanted and exits
        out.write("t=1.0s progress\n")  # BrokenPipeError inside: dropped
        out.flush()
        assert out.reader_gone
        assert out.write("report: r/report.json\n") == len("report: r/report.json\n")
        stream.write("the interpreter's own flush at exit\n")
        stream.flush()  # fd 1 now points at /dev/null: no BrokenPipeError there either
    finally:
        stream.close()


def test_it_passes_through_what_the_apps_check() -> None:
    read_end, write_end = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8")
    out = PipeSafeStdout(stream)
    try:
        assert out.fileno() == write_end and not out.isatty() and out.encoding == "utf-8" and out.writable()
    finally:
        stream.close()
        os.close(read_end)
