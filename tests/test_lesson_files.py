"""`gaviz lessons DIR` copies the course (14 notebooks, their README and solutions) out of
the package into DIR, refuses to overwrite without --force, and names bad arguments.
(tests/test_wheel.py runs it from an installed wheel.)"""

import pathlib
import subprocess
import sys

import pytest
from lesson_runner import lesson_paths

import gaviz
from gaviz import __main__ as command_line
from gaviz.lesson_files import copy_lessons, lesson_files, lessons_folder

ROOT = pathlib.Path(__file__).resolve().parents[1]


def course(folder):
    """The course's files under ``folder``, relative to it."""
    folder = pathlib.Path(folder)
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def test_a_checkout_reads_its_own_lessons():
    assert lessons_folder() == ROOT / "lessons"
    assert [str(p) for p in lesson_files()] == course(ROOT / "lessons")
    assert sum(p.suffix == ".ipynb" for p in lesson_files()) == len(lesson_paths()) == 14


def test_copies_every_lesson_and_solution_byte_for_byte(tmp_path):
    written = gaviz.copy_lessons(tmp_path / "course")
    assert course(tmp_path / "course") == course(ROOT / "lessons")
    assert sorted(str(p.relative_to(tmp_path / "course")) for p in written) == course(ROOT / "lessons")
    for name in course(ROOT / "lessons"):
        assert (tmp_path / "course" / name).read_bytes() == (ROOT / "lessons" / name).read_bytes()


def test_refuses_to_overwrite_a_lesson_unless_forced(tmp_path):
    copy_lessons(tmp_path)
    (tmp_path / "00_welcome.ipynb").write_text("my notes")
    (tmp_path / "mine.txt").write_text("not the course's")
    with pytest.raises(FileExistsError, match=r"`directory` already holds 33 of the course's 33 files"):
        copy_lessons(tmp_path)
    assert (tmp_path / "00_welcome.ipynb").read_text() == "my notes"
    copy_lessons(tmp_path, force=True)
    welcome = "00_welcome.ipynb"
    assert (tmp_path / welcome).read_bytes() == (ROOT / "lessons" / welcome).read_bytes()
    assert (tmp_path / "mine.txt").read_text() == "not the course's"


def test_bad_directories_are_named(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    with pytest.raises(NotADirectoryError, match=r"`directory` must be a folder .*Received: directory="):
        copy_lessons(a_file)
    with pytest.raises(TypeError, match=r"`directory` must be a path .*Received: directory=3"):
        copy_lessons(3)


def test_command_line_says_what_it_did_and_how_to_open_it(tmp_path, capsys):
    assert command_line.main(["lessons", str(tmp_path / "my course")]) == 0
    assert capsys.readouterr().out == (
        f"copied 14 lessons and 18 solutions into {tmp_path / 'my course'}\n"
        f"open them with: jupyter lab '{tmp_path / 'my course'}'\n")
    assert command_line.main(["lessons", str(tmp_path / "my course")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: `directory` already holds") and "--force" in error
    assert command_line.main(["lessons", "--force", str(tmp_path / "my course")]) == 0


def test_python_m_gaviz_lessons_loads_no_tensorflow(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gaviz", "lessons", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    result = subprocess.run(
        [sys.executable, "-c", "import sys, gaviz.__main__ as m; m.main(sys.argv[1:]); "
         "print('tensorflow' in sys.modules)", "lessons", "--force", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.stdout.splitlines()[-1] == "False", result.stderr
