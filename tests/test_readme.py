"""The README's example runs as printed."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(capsys):
    text = README.read_text()
    match = re.search(r"<!-- readme-example.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, "README lost its example block"
    code = match.group(1)
    assert len(code.strip().splitlines()) <= 10
    exec(compile(code, "README.md", "exec"), {})
    updates, iterations, loss = capsys.readouterr().out.split()
    assert int(updates) == int(iterations) == 2 * 16
    assert 0 < float(loss) < 2.0
