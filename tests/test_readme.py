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


def test_readme_keras_example_runs(capsys):
    """The "Use it in your own training" block runs: Keras's logs, progress bar and evaluate."""
    text = README.read_text()
    match = re.search(r"<!-- readme-keras-example.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, "README lost its Keras example block"
    exec(compile(match.group(1), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "Epoch 1/3" in out and "8/8" in out  # 2048 / 256 = 8 updates per epoch
    history_line, evaluate_line = out.strip().splitlines()[-2:]
    val_mae = eval(history_line)
    assert 1 <= len(val_mae) <= 3 and all(0 < v < 2 for v in val_mae)
    assert set(eval(evaluate_line)) == {"loss", "mae"}
