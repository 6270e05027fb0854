"""The one atomic writer (moesim.fsio): all or nothing, the mode a plain open() gives, no litter."""

import os
import stat

import pytest

from moesim.fsio import atomic_write_bytes, atomic_write_via, file_mode


def test_written_file_has_the_umask_mode_not_mkstemps_0600(tmp_path):
    p = atomic_write_bytes(tmp_path / "sub" / "a.yaml", b"x: 1\n")
    assert p.read_bytes() == b"x: 1\n"
    assert stat.S_IMODE(os.stat(p).st_mode) == file_mode()
    assert file_mode() & 0o044  # readable by others under the usual umask 022


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("old\n")

    def boom(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write_via(p, boom)
    assert p.read_text() == "old\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.csv"]
