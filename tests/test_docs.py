"""Every reference to the documentation, in code, configs and the docs themselves, leads to a
file and heading inside the repository (the design travels with the clone)."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

REFERENCE = re.compile(r"docs/([A-Za-z0-9_/.-]+\.md)(?:#([a-z0-9-]+))?")
EXAMPLE = "docs/objectives/foo.md"  # the template a new objective's page follows
# the tracked files only: a virtual environment, run outputs or data inside the clone are not ours
TRACKED = subprocess.run(
    ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
).stdout.split("\0")
SOURCES = [
    ROOT / name
    for name in TRACKED
    if name.endswith((".py", ".yaml", ".md")) and "results" not in Path(name).parts
]


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # no headings in code blocks
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def references() -> list[tuple[str, str, str]]:
    found = []
    for path in SOURCES:
        for match in REFERENCE.finditer(path.read_text(errors="replace")):
            if match.group(0) != EXAMPLE:
                found.append((str(path.relative_to(ROOT)), match.group(1), match.group(2) or ""))
    return found


def test_the_slug_is_githubs():
    assert slug(" The pairs' closed form") == "the-pairs-closed-form"
    assert slug("Prediction (Algorithm 2)") == "prediction-algorithm-2"


def test_references_are_found():
    assert len(references()) > 50


@pytest.mark.parametrize("source, page, anchor", sorted(set(references())))
def test_each_docs_reference_leads_to_a_heading(source, page, anchor):
    target = ROOT / "docs" / page
    assert target.is_file(), f"{source}: docs/{page} does not exist"
    if anchor:
        assert anchor in anchors(target), f"{source}: no heading #{anchor} in docs/{page}"


LINK = re.compile(r"\]\(([^)#\s:]+\.md)(?:#([a-z0-9-]+))?\)")  # relative Markdown links


def markdown_links() -> list[tuple[str, str, str]]:
    found = []
    for path in (p for p in SOURCES if p.suffix == ".md"):
        for match in LINK.finditer(path.read_text()):
            target = os.path.relpath((path.parent / match.group(1)).resolve(), ROOT)
            found.append((str(path.relative_to(ROOT)), target, match.group(2) or ""))
    return found


@pytest.mark.parametrize("source, target, anchor", sorted(set(markdown_links())))
def test_each_relative_markdown_link_leads_to_a_heading(source, target, anchor):
    page = ROOT / target
    assert page.is_file() and not target.startswith(".."), f"{source}: {target} is not in the repo"
    if anchor:
        assert anchor in anchors(page), f"{source}: no heading #{anchor} in {page.name}"


# docs/choosing.md: the guide's commands run what they say, and it links the benchmark's costs
GUIDE = ROOT / "docs" / "choosing.md"
LOSS_COST = ROOT / "benchmarks" / "results" / "loss_cost.md"
TRAIN_COMMAND = re.compile(r"python train\.py((?: [\w.+/=-]+)+)")


def guide_commands() -> list[tuple[str, ...]]:
    """The overrides of each single-run ``python train.py`` command of the guide (multiruns,
    ``-m``, take placeholders and need the sweeper extra)."""
    commands = {tuple(m.group(1).split()) for m in TRAIN_COMMAND.finditer(GUIDE.read_text())}
    return sorted(c for c in commands if "-m" not in c)


@pytest.mark.parametrize("overrides", guide_commands(), ids=" ".join)
def test_each_guide_command_composes_and_builds_its_model_and_loss(train_config, overrides):
    import torch
    from hydra.utils import instantiate

    cfg = train_config(list(overrides))
    module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)
    assert module(torch.randn(2, 5, 46)).shape == (2, 5)


def test_the_guide_has_a_command_for_every_loss_config():
    named = {word for command in guide_commands() for word in command}
    for config in sorted((ROOT / "conf" / "loss").glob("*.yaml")):
        assert f"loss={config.stem}" in named, (
            f"docs/choosing.md: no command with loss={config.stem}"
        )


def test_the_guide_links_the_loss_costs_instead_of_copying_them():
    """The guide's costs live in the benchmark's results file, which a rerun rewrites on its
    own: the guide links it and copies none of its per-batch times."""
    text = GUIDE.read_text()
    assert f"(../{LOSS_COST.relative_to(ROOT)})" in text
    assert not re.search(r"\d ms\b", text), "docs/choosing.md: link loss_cost.md for timings"


INTERNAL_LINK = re.compile(r"\]\(#([a-z0-9-]+)\)")


def test_the_guides_links_within_the_page_lead_to_headings():
    text = GUIDE.read_text()
    for anchor in INTERNAL_LINK.findall(text):
        assert anchor in anchors(GUIDE), f"docs/choosing.md: no heading #{anchor}"
