"""The guide's Python blocks run as printed: each in a fresh process (a block may set up
devices before TensorFlow starts), and what it prints is what the ```text block right
after it shows, compared as the README's examples are (tests/readme_examples.py). A
block with no ```text block after it must print nothing."""

import importlib.util
import pathlib
import re
import sys

import pytest
import readme_examples
from readme_examples import Example

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The guide pages whose every Python block is run (KerasHub's where it is installed:
#: the `hub` extra, which make test installs next to the `tensorflow` distribution).
PAGES = ["docs/guide/own_loop.md", "docs/guide/verify.md"] + (
    ["docs/guide/keras_hub.md"] if importlib.util.find_spec("keras_hub") else [])
BLOCK = re.compile(r"```python\n(.*?)```(?:\s*```text\n(.*?)```)?", re.S)
#: What TensorFlow's native log writes to stderr (gaviz.quiet keeps warnings and errors).
NATIVE_LOG = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\] (.*)$")
#: The native log lines a block may print, each with the reason.
TOLERATED = [re.compile(pattern) for pattern in (
    # TensorFlow's distributed datasets (MirroredStrategy), not gaviz.
    r"Memory patch applied: M_TRIM_THRESHOLD=",
    r"Input of GeneratorDatasetOp::Dataset will not be optimized",
    # The first float16 op where oneDNN runs without float16 kernels (a CPU with
    # AVX-512 but not its FP16 extension, such as AMD's Zen 4): TensorFlow logs,
    # once per process, that Eigen's kernels compute it; the numbers are right.
    # In the user's own loop that op is the user's; gaviz.quiet cannot run one
    # first without starting TensorFlow's runtime, after which a program can no
    # longer set up logical devices (docs/guide/own_loop.md, "Mixed precision").
    r"oneDNN supports DT_HALF only on platforms with AVX-512",
    # Likewise int64 (a KerasHub tokenizer's ids, in Keras's own fit too) on some
    # CPUs with AVX-512 (an AMD EPYC, 2026-11-28): Eigen computes it, rightly.
    r"oneDNN supports DT_INT64 only on platforms with AVX-512",
    # And int32: keras.losses.Circle's label comparisons, in Keras's own fit too.
    r"oneDNN supports DT_INT32 only on platforms with AVX-512",
)]


def blocks(page: str, text: str | None = None) -> list[Example]:
    """The page's Python blocks, named by page and line, with the output each shows."""
    text = (ROOT / page).read_text() if text is None else text
    return [Example(f"{page}:{text.count(chr(10), 0, match.start()) + 1}",
                    match.group(1), match.group(2) or "")
            for match in BLOCK.finditer(text)]


def unexpected_stderr(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are neither empty nor a tolerated native log line."""
    def tolerated(line):
        found = NATIVE_LOG.match(line)
        return found is not None and any(t.match(found.group(1)) for t in TOLERATED)
    return [line for line in stderr.splitlines() if line.strip() and not tolerated(line)]


@pytest.mark.parametrize("example", [b for page in PAGES for b in blocks(page)],
                         ids=lambda example: example.name)
def test_block_prints_what_the_page_shows(example):
    result = readme_examples.run(example, sys.executable, ROOT)
    assert result.returncode == 0, f"{example.name}: {result.stderr}"
    assert unexpected_stderr(result.stderr) == [], f"{example.name}:\n{result.stderr}"
    problems = readme_examples.differences(example.shown, result.stdout)
    assert problems == [], f"{example.name}:\n" + "\n".join(problems)


def test_the_mixed_precision_block_runs_where_onednn_has_no_float16():
    """TF_ENABLE_ONEDNN_OPTS=1 turns oneDNN on where TensorFlow leaves it off (a CPU
    without AVX-512), so the block meets what a CPU with AVX-512 but without its
    FP16 extension gives every run: float16's fallback logged at the first float16 op."""
    (example,) = [b for b in blocks("docs/guide/own_loop.md") if "mixed_float16" in b.code]
    result = readme_examples.run(example, sys.executable, ROOT,
                                 env={"TF_ENABLE_ONEDNN_OPTS": "1"})
    assert result.returncode == 0, result.stderr
    with open("/proc/cpuinfo") as cpuinfo:
        fast_half = "avx512_fp16" in cpuinfo.read()
    assert fast_half or "DT_HALF" in result.stderr, result.stderr  # the case is met
    assert unexpected_stderr(result.stderr) == [], result.stderr
    assert readme_examples.differences(example.shown, result.stdout) == []


def test_blocks_are_found_with_what_they_print():
    text = ("# Page\n\n```python\nprint(1)\n```\n```text\n1\n```\n"
            "```python\nx = 2\n```\nprose\n```text\nnot an output\n```\n")
    assert blocks("page.md", text) == [Example("page.md:3", "print(1)\n", "1\n"),
                                       Example("page.md:9", "x = 2\n", "")]


def test_only_named_native_log_lines_are_tolerated():
    tolerated = ("I0000 00:00:1795698322.310251    5755 port.cc:12] Memory patch applied: "
                 "M_TRIM_THRESHOLD=1")
    other = ("W0000 00:00:1795698322.310251    5755 loop_optimizer.cc:934] Skipping loop "
             "optimization for Merge node with control input: assert_positive/assert_less")
    assert unexpected_stderr(tolerated + "\n\n") == []
    assert unexpected_stderr(f"{tolerated}\n{other}\n") == [other]
    assert unexpected_stderr("UserWarning: something\n") == ["UserWarning: something"]


def test_the_sparse_gradient_warning_points_to_its_section():
    """SparseGradientWarning names a page and a section title: both exist."""
    from gaviz.training.loss import sparse_gradients

    page, anchor = re.fullmatch(r"https://github.com/gaviz/gaviz/blob/main/(\S+)#(\S+)",
                                sparse_gradients.DOCS).groups()
    titles = re.findall(r"^## (.+)$", (ROOT / page).read_text(), re.M)
    assert anchor in [title.lower().replace(" ", "-") for title in titles]


def test_every_guide_page_is_in_the_toctree():
    index = (ROOT / "docs" / "index.md").read_text()
    listed = set(re.findall(r"^guide/(\w+)$", index, re.M))
    assert listed == {page.stem for page in (ROOT / "docs" / "guide").glob("*.md")}
