"""exactspec_train.prep picks the pinned build of a training source, or a listed alternative, by sha256."""
import hashlib

import pytest

from exactspec_train.prep import pick_build


def _src(pinned=b"pinned", alt=b"older"):
    return {"package": "p", "version": "2", "license": "MIT", "file": "p_2.deb",
            "sha256": hashlib.sha256(pinned).hexdigest(),
            "alternatives": [{"version": "1", "file": "p_1.deb", "sha256": hashlib.sha256(alt).hexdigest()}]}


def test_pinned_build_preferred_and_alternative_accepted(tmp_path):
    s = _src()
    (tmp_path / "p_1.deb").write_bytes(b"older")
    got = pick_build("p", s, tmp_path)
    assert got["version"] == "1" and got["file"] == "p_1.deb" and "alternatives" not in got
    (tmp_path / "p_2.deb").write_bytes(b"pinned")
    assert pick_build("p", s, tmp_path)["version"] == "2"


def test_missing_or_altered_build_is_refused_by_name(tmp_path):
    s = _src()
    with pytest.raises(SystemExit, match="none of p_2.deb, p_1.deb"):
        pick_build("p", s, tmp_path)
    (tmp_path / "p_1.deb").write_bytes(b"tampered")
    with pytest.raises(SystemExit, match="p_1.deb: sha256"):
        pick_build("p", s, tmp_path)
