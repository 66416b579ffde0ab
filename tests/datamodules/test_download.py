"""``python -m differank.datamodules.download``: fetch (resuming with HTTP ranges), check the
sha256, extract and arrange a fold layout the LETOR DataModule reads. Every test serves a small
archive it makes itself from an HTTP server on 127.0.0.1; no other host is contacted."""

from __future__ import annotations

import hashlib
import http.server
import io
import re
import tarfile
import threading
import zipfile
from dataclasses import replace

import numpy as np
import pytest

from differank.datamodules import download
from differank.datamodules.letor import LetorDataModule


def letor_zip() -> bytes:
    """A zip laid out as LETOR 3.0 publishes (OHSUMED-style names), two folds, 5 features."""
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for fold in (1, 2):
            for name in ("trainingset", "validationset", "testset"):
                lines = []
                for qid in (1, 2):
                    for label in (0, 1, 2):
                        values = " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(rng.random(5)))
                        lines.append(f"{label} qid:{qid} {values}\n")
                archive.writestr(f"TOY/QueryLevelNorm/Fold{fold}/{name}.txt", "".join(lines))
    return buffer.getvalue()


class Server:
    """Serves ``payload`` at /toy.zip, honouring ``Range: bytes=N-``; records the ranges asked."""

    def __init__(self, payload: bytes):
        self.payload, self.ranges = payload, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                start = 0
                if "Range" in self.headers:
                    start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
                    server.ranges.append(start)
                body = server.payload[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/toy.zip"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def served():
    payload = letor_zip()
    server = Server(payload)
    dataset = download.Dataset(
        "TOY",
        server.url,
        "zip",
        "**/QueryLevelNorm/Fold{fold}",
        folds=(1, 2),
        sha256=hashlib.sha256(payload).hexdigest(),
        digest_source="made by the test",
    )
    yield server, dataset
    server.httpd.shutdown()


def test_download_checks_extracts_and_arranges_a_readable_fold_layout(
    served, tmp_path, capsys, monkeypatch
):
    server, dataset = served
    monkeypatch.setitem(download.REGISTRY, "toy", dataset)
    assert download.main(["toy", "--dir", str(tmp_path)]) == 0
    assert "OK (made by the test)" in capsys.readouterr().out
    for fold in (1, 2):
        assert sorted(p.name for p in (tmp_path / "TOY" / f"Fold{fold}").iterdir()) == [
            "test.txt",
            "train.txt",
            "vali.txt",
        ]
    data = LetorDataModule(root=tmp_path / "TOY", fold=2, cache_dir=tmp_path / "cache")
    assert data.n_features == 5 and data.num_rows("test") == 6
    assert download.main(["toy", "--dir", str(tmp_path)]) == 0  # a second run has nothing to do
    assert "already in" in capsys.readouterr().out


def test_an_interrupted_download_resumes_where_it_stopped(served, tmp_path):
    server, dataset = served
    target = tmp_path / "toy.zip"
    target.with_name("toy.zip.part").write_bytes(server.payload[:100])
    download.fetch(dataset.url, target)
    assert server.ranges == [100] and target.read_bytes() == server.payload


def test_a_fetched_file_with_a_wrong_digest_is_moved_aside_and_an_unknown_one_printed(
    served, tmp_path, capsys
):
    server, dataset = served
    with pytest.raises(ValueError, match=f"sha256 {dataset.sha256} differs from the expected 0+"):
        download.download(replace(dataset, sha256="0" * 64), tmp_path)
    downloads = tmp_path / ".downloads"
    assert not (downloads / "TOY.zip").exists()  # a new run fetches it again
    assert (downloads / "TOY.zip.sha256-mismatch").read_bytes() == server.payload
    download.download(replace(dataset, sha256=None), tmp_path)
    assert f"sha256 {dataset.sha256}  TOY.zip (no known digest" in capsys.readouterr().out


def test_a_users_archive_is_never_changed_and_a_mismatch_can_be_accepted(
    served, tmp_path, capsys, monkeypatch
):
    server, dataset = served
    mine = tmp_path / "mine" / "toy.zip"
    mine.parent.mkdir()
    mine.write_bytes(server.payload)
    before = mine.stat()
    monkeypatch.setitem(download.REGISTRY, "toy", replace(dataset, sha256="0" * 64))
    args = ["toy", "--dir", str(tmp_path / "data"), "--archive", str(mine)]
    assert download.main(args) == 1
    error = capsys.readouterr().err
    assert f"sha256 {dataset.sha256} differs from the expected {'0' * 64}" in error
    assert "kept unchanged" in error and "--accept-sha256" in error
    assert mine.read_bytes() == server.payload and mine.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in mine.parent.iterdir()) == ["toy.zip"]
    assert not (tmp_path / "data" / "TOY").exists()
    assert download.main([*args, "--accept-sha256"]) == 0
    assert "used anyway (--accept-sha256)" in capsys.readouterr().out
    assert download.is_complete(dataset, tmp_path / "data" / "TOY")
    assert mine.read_bytes() == server.payload and mine.stat().st_mtime_ns == before.st_mtime_ns


def make_zip(path, members: dict) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_a_zip_bomb_is_refused_from_its_listing_before_anything_is_written(tmp_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("Fold1/train.txt", "w") as member:
            for _ in range(80):
                member.write(bytes(2**20))  # 80 MiB of zeros -> a ~80 KB archive
    dataset = download.Dataset("BOMB", None, "zip", "**/Fold{fold}", folds=(1,))
    data = tmp_path / "data"
    with pytest.raises(ValueError, match=r"would expand to 83886080 bytes, more than 100x"):
        download.download(dataset, data, bomb)
    assert leftovers(data) == []  # no temporary folder, no BOMB/
    assert bomb.is_file()


def test_too_many_members_or_too_little_free_disk_are_refused(tmp_path, monkeypatch):
    archive = tmp_path / "many.zip"
    make_zip(archive, {f"f{k}.txt": b"1 qid:1 1:1\n" for k in range(5)})
    members = download._members(archive, "zip")
    monkeypatch.setattr(download, "MAX_MEMBERS", 4)
    with pytest.raises(ValueError, match="5 members, more than the 4"):
        download.check_budget(archive, members, tmp_path)
    monkeypatch.setattr(download, "MAX_MEMBERS", 10)
    monkeypatch.setattr(download.cache, "free_disk_bytes", lambda folder: 10)
    with pytest.raises(ValueError, match=r"only 0.00 GiB are free .* pass --dir"):
        download.check_budget(archive, members, tmp_path)


@pytest.mark.parametrize("name", ["../evil.txt", "Fold1/../../evil.txt", "/tmp/evil.txt"])
def test_a_member_escaping_the_folder_is_a_clean_error_naming_it(tmp_path, name):
    archive = tmp_path / "evil.zip"
    make_zip(archive, {"Fold1/train.txt": b"1 qid:1 1:1\n", name: b"owned"})
    dataset = download.Dataset("EVIL", None, "zip", "**/Fold{fold}", folds=(1,))
    data = tmp_path / "data"
    with pytest.raises(
        ValueError, match=f"member {re.escape(repr(name))} would be written outside"
    ):
        download.download(dataset, data, archive)
    assert leftovers(data) == [] and not (tmp_path / "evil.txt").exists()


def test_tar_links_and_escaping_members_are_refused(tmp_path):
    archive = tmp_path / "links.tar.gz"
    with tarfile.open(archive, "w:gz") as handle:
        link = tarfile.TarInfo("Fold1/train.txt")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        handle.addfile(link)
    with pytest.raises(ValueError, match="member 'Fold1/train.txt' is a link or special file"):
        download.extract(archive, "tar.gz", tmp_path / "out")
    with tarfile.open(archive, "w:gz") as handle:
        escape = tarfile.TarInfo("../escape.txt")
        escape.size = 5
        handle.addfile(escape, io.BytesIO(b"owned"))
    with pytest.raises(ValueError, match="member '../escape.txt' would be written outside"):
        download.extract(archive, "tar.gz", tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()


def test_a_failed_arrangement_leaves_no_half_written_fold(tmp_path):
    archive = tmp_path / "half.zip"
    rows = b"1 qid:1 1:1\n0 qid:1 1:0\n"
    make_zip(
        archive,
        {**{f"Fold1/{s}.txt": rows for s in ("train", "vali", "test")}, "Fold2/train.txt": rows},
    )  # fold 2 lacks vali and test
    dataset = download.Dataset("HALF", None, "zip", "**/Fold{fold}", folds=(1, 2))
    data = tmp_path / "data"
    with pytest.raises(RuntimeError, match="has none of"):
        download.download(dataset, data, archive)
    assert leftovers(data) == []  # neither HALF/Fold1 nor the temporary folder


def test_an_incomplete_target_is_not_overwritten(served, tmp_path):
    server, dataset = served
    (tmp_path / "TOY" / "Fold1").mkdir(parents=True)
    (tmp_path / "TOY" / "Fold1" / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="exists but lacks .* move it aside"):
        download.download(dataset, tmp_path)
    assert (tmp_path / "TOY" / "Fold1" / "notes.txt").read_text() == "mine"


def test_a_web_page_instead_of_the_archive_is_an_error(tmp_path):
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(b"<html>sign in</html>")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/share"
        with pytest.raises(RuntimeError, match="answered a web page, not the archive"):
            download.fetch(url, tmp_path / "x.zip")
    finally:
        httpd.shutdown()
    assert not (tmp_path / "x.zip").exists()


def test_rar_without_a_tool_and_manual_sets_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(download.shutil, "which", lambda name: None)
    (tmp_path / "MQ2008.rar").write_bytes(b"Rar!")
    with pytest.raises(RuntimeError, match="install unrar, 7z .* or bsdtar"):
        download.extract(tmp_path / "MQ2008.rar", "rar", tmp_path / "out")
    assert download.main(["yahoo", "--dir", str(tmp_path)]) == 1
    with pytest.raises(RuntimeError, match="Webscope"):
        download.download(download.REGISTRY["yahoo"], tmp_path)


def test_registry_covers_the_public_letor_sets_with_https_or_http_urls():
    names = set(download.REGISTRY)
    assert {
        "mq2007",
        "mq2008",
        "ohsumed",
        "mslr-web10k",
        "mslr-web30k",
        "istella-s",
        "yahoo",
    } <= names
    for dataset in download.REGISTRY.values():
        assert dataset.url is None or dataset.url.startswith(("https://", "http://"))
        assert dataset.sha256 is None or (len(dataset.sha256) == 64 and dataset.digest_source)
        assert dataset.url is None or dataset.url_source  # where the URL form was confirmed
    # The api.onedrive.com/v1.0/shares form answers HTTP 400 (tensorflow/datasets #11136).
    assert all("api.onedrive.com" not in (d.url or "") for d in download.REGISTRY.values())


def test_list_shows_where_each_url_form_was_confirmed(capsys):
    assert download.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "https://1drv.ms/u/s!AtsMfWUz5l8nbOIoJ6Ks0bEMp78" in out
    assert "URL form confirmed by: share links of the MSLR project page" in out


def test_data_home_is_letor_dir_else_beside_the_project(monkeypatch, tmp_path):
    monkeypatch.setenv("LETOR_DIR", str(tmp_path))
    assert download.data_home() == tmp_path
    monkeypatch.delenv("LETOR_DIR")
    monkeypatch.chdir(tmp_path)
    assert download.data_home() == download.PROJECT_ROOT.parent / "shared" / "data"
