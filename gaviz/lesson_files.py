"""The course's files, found in the installed package or a source checkout, and copied out.

A wheel carries the repository's ``lessons/`` as ``gaviz/_lessons`` (see
pyproject.toml); a source checkout (``pip install -e .``, ``make lab``) reads
``lessons/`` beside the package. ``gaviz lessons DIR`` copies them into DIR.
"""

from __future__ import annotations

import os
import pathlib
import shutil

#: What the course is made of, relative to its folder.
PATTERNS = ("*.ipynb", "README.md", "solutions/*.py")


def lessons_folder() -> pathlib.Path:
    """The folder holding the course: the package's copy, or the checkout's lessons/."""
    package = pathlib.Path(__file__).resolve().parent
    candidates = (package / "_lessons", package.parent / "lessons")
    for folder in candidates:
        if (folder / "00_welcome.ipynb").is_file():
            return folder
    raise FileNotFoundError(
        f"gaviz's lessons are missing: neither {candidates[0]} (an installed wheel) nor "
        f"{candidates[1]} (a source checkout) holds 00_welcome.ipynb. Reinstall gaviz.")


def lesson_files() -> list[pathlib.Path]:
    """The course's files, relative to its folder: notebooks, README, solutions."""
    folder = lessons_folder()
    return sorted(path.relative_to(folder) for pattern in PATTERNS for path in folder.glob(pattern))


def copy_lessons(directory: str | os.PathLike, force: bool = False) -> list[pathlib.Path]:
    """Copies the lessons and their solutions into ``directory``, ready for ``jupyter lab``.

    Args:
        directory: a folder (made if it does not exist).
        force: overwrite lesson files already there; other files are never touched.

    Returns:
        The files written, in ``directory``.

    Raises:
        TypeError: ``directory`` is not a path.
        NotADirectoryError: ``directory`` is an existing file.
        FileExistsError: ``directory`` already holds some of the course's files
            and ``force`` is False.
    """
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"`directory` must be a path (str or os.PathLike). Received: directory={directory!r}")
    target = pathlib.Path(directory)
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(
            f"`directory` must be a folder (or a path to make one at). Received: directory={str(target)!r}, "
            "an existing file")
    folder, files = lessons_folder(), lesson_files()
    present = [name for name in files if (target / name).exists()]
    if present and not force:
        raise FileExistsError(
            f"`directory` already holds {len(present)} of the course's {len(files)} files "
            f"({', '.join(map(str, present[:3]))}{', ...' if len(present) > 3 else ''}); "
            f"pass force=True (--force) to overwrite them. Received: directory={str(target)!r}")
    written = []
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        written.append(pathlib.Path(shutil.copyfile(folder / name, target / name)))
    return written
