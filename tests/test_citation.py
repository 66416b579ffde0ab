"""The licence and the citation file: what a team checks before adopting the library."""

import pytest
import yaml

import differank
from tests.conftest import ROOT

CFF_REQUIRED = ("cff-version", "message", "title", "authors")  # CFF 1.2.0's required keys
OBJECTIVE_PAGES = ("conerank", "domination", "convex", "hinge")


def test_citation_file_is_cff_with_the_required_keys():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert [key for key in CFF_REQUIRED if key not in citation] == []
    assert citation["cff-version"] == "1.2.0"
    assert citation["type"] == "software"
    assert citation["license"] == "MIT"
    for reference in citation["references"]:
        assert {"type", "title", "authors"} <= set(reference), reference
        assert all(author.get("family-names") for author in reference["authors"]), reference


def test_citation_cites_the_package_version():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert str(citation["version"]) == differank.__version__


def test_citation_cites_each_objectives_source_as_its_page_does():
    """Every objective's page opens with its source's title; the citation file cites it."""
    titles = [
        ref["title"] for ref in yaml.safe_load((ROOT / "CITATION.cff").read_text())["references"]
    ]
    for page in OBJECTIVE_PAGES:
        opening = (ROOT / "docs/objectives" / f"{page}.md").read_text()[:600].replace("\n", " ")
        assert any(title in opening for title in titles), f"no reference of {page}.md is cited"


def test_package_declares_the_licence_of_the_license_file():
    tomllib = pytest.importorskip("tomllib", reason="the standard library's from Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 the differank authors" in text
