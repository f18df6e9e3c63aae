"""The project root: the nearest marker folder above a file, else the file's folder."""

from pathlib import Path

from tfdoctor.lint.project_root import project_root, source_roots


def test_nearest_marker_above_the_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    script = tmp_path / "pkg" / "sub" / "train.py"
    script.write_text("")
    assert project_root(script) == tmp_path.resolve()


def test_without_a_marker_the_files_folder(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    assert project_root(script) == tmp_path.resolve()  # pytest's tmp folders lie under /tmp, outside any project


def test_src_layout(tmp_path: Path) -> None:
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    assert source_roots(tmp_path) == (tmp_path, tmp_path / "src")
    assert source_roots(tmp_path / "src") == (tmp_path / "src",)
