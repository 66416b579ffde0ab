"""``python -m differank.datamodules.download``: fetch (resuming with HTTP ranges), check the
sha256, extract and arrange a fold layout the LETOR DataModule reads. Every test serves a small
archive it makes itself from an HTTP server on 127.0.0.1; no other host is contacted."""

from __future__ import annotations

import hashlib
import http.server
import io
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


def test_a_wrong_digest_is_refused_and_an_unknown_one_printed(served, tmp_path, capsys):
    server, dataset = served
    with pytest.raises(ValueError, match=f"sha256 {dataset.sha256} differs from the expected 0+"):
        download.download(replace(dataset, sha256="0" * 64), tmp_path)
    assert not (tmp_path / ".downloads" / "TOY.zip").exists()  # the bad file is not kept
    download.download(replace(dataset, sha256=None), tmp_path)
    assert f"sha256 {dataset.sha256}  TOY.zip (no known digest" in capsys.readouterr().out


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


def test_data_home_is_letor_dir_else_beside_the_project(monkeypatch, tmp_path):
    monkeypatch.setenv("LETOR_DIR", str(tmp_path))
    assert download.data_home() == tmp_path
    monkeypatch.delenv("LETOR_DIR")
    monkeypatch.chdir(tmp_path)
    assert download.data_home() == download.PROJECT_ROOT.parent / "shared" / "data"
