"""Download a public LETOR-format dataset and lay it out the way the LETOR DataModule reads it.

    python -m differank.datamodules.download NAME [--dir DIR] [--archive FILE]
    python -m differank.datamodules.download --list

``NAME`` (case-insensitive) is one of :data:`REGISTRY`. The archive is fetched from the
publisher's URL into ``DIR/.downloads/`` with a progress bar; an interrupted download resumes
where it stopped (HTTP range requests). Its sha256 is checked when a digest is known; otherwise
the computed digest is printed so it can be compared with a trusted copy. The archive is then
extracted and each fold's files are moved to ``DIR/NAME/FoldK/{train,vali,test}.txt``, which
``data=letor data.root=DIR/NAME`` (or ``data=mq2008`` for MQ2008 in the default folder) reads.
``--archive FILE`` uses an archive downloaded by hand (sets behind a licence page). ``DIR``
defaults to :func:`data_home`. RAR archives (LETOR 3.0 / 4.0) need an external tool: ``unrar``,
``7z`` or ``bsdtar``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SPLIT_FILES = {  # the DataModule's name <- the names publishers use
    "train": ("train.txt", "trainingset.txt"),
    "vali": ("vali.txt", "validationset.txt"),
    "test": ("test.txt", "testset.txt"),
}
CHUNK = 1 << 20


def data_home() -> Path:
    """Where datasets live: ``$LETOR_DIR`` when set, else ``shared/data`` beside the project
    folder (the same path from any working directory)."""
    letor_dir = os.environ.get("LETOR_DIR")
    if letor_dir:
        return Path(letor_dir).expanduser().absolute()
    return PROJECT_ROOT.parent / "shared" / "data"


@dataclass(frozen=True)
class Dataset:
    """One downloadable set.

    ``fold_glob`` finds fold ``k``'s directory inside the extracted archive (``{fold}`` is
    replaced by k). ``sha256`` is the archive's digest, ``None`` where no digest is known;
    ``digest_source`` says where a known digest comes from. ``url`` ``None`` means the
    publisher's terms need a manual download (``note`` says where).
    """

    name: str
    url: str | None
    archive: str  # "zip" | "tar.gz" | "rar"
    fold_glob: str
    folds: tuple[int, ...] = (1, 2, 3, 4, 5)
    sha256: str | None = None
    digest_source: str = ""
    note: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}.{self.archive}"


_LETOR4 = "https://research.microsoft.com/en-us/um/beijing/projects/letor/LETOR4.0/Data"
_LETOR_PAGE = (
    "https://www.microsoft.com/en-us/research/project/letor-learning-rank-information-retrieval/"
)
_MSLR = "https://api.onedrive.com/v1.0/shares"  # Microsoft's own OneDrive shares of MSLR
_PYTORCHLTR = "as recorded by pytorchltr (github.com/rjagerman/pytorchltr), not by the publisher"

REGISTRY: dict[str, Dataset] = {
    d.name.lower(): d
    for d in [
        Dataset(
            "MQ2007",
            f"{_LETOR4}/MQ2007.rar",
            "rar",
            "**/MQ2007/Fold{fold}",
            note=f"LETOR 4.0; if the URL has moved, get MQ2007.rar from {_LETOR_PAGE} "
            "and pass --archive",
        ),
        Dataset(
            "MQ2008",
            f"{_LETOR4}/MQ2008.rar",
            "rar",
            "**/MQ2008/Fold{fold}",
            note=f"LETOR 4.0; if the URL has moved, get MQ2008.rar from {_LETOR_PAGE} "
            "and pass --archive",
        ),
        Dataset(
            "OHSUMED",
            "https://research.microsoft.com/en-us/um/beijing/projects/letor/LETOR3.0/OHSUMED.zip",
            "zip",
            "**/QueryLevelNorm/Fold{fold}",
            note=f"LETOR 3.0, the QueryLevelNorm files; if the URL has moved, get "
            f"OHSUMED.zip from {_LETOR_PAGE} and pass --archive",
        ),
        Dataset(
            "MSLR-WEB10K",
            f"{_MSLR}/s!AtsMfWUz5l8nbOIoJ6Ks0bEMp78/root/content",
            "zip",
            "**/Fold{fold}",
            sha256="2902142ea33f18c59414f654212de5063033b707d5c3939556124b1120d3a0ba",
            digest_source=_PYTORCHLTR,
            note="https://www.microsoft.com/en-us/research/project/mslr/",
        ),
        Dataset(
            "MSLR-WEB30K",
            f"{_MSLR}/s!AtsMfWUz5l8nbXGPBlwD1rnFdBY/root/content",
            "zip",
            "**/Fold{fold}",
            sha256="08cb7977e1d5cbdeb57a9a2537a0923dbca6d46a76db9a6afc69e043c85341ae",
            digest_source=_PYTORCHLTR,
            note="https://www.microsoft.com/en-us/research/project/mslr/",
        ),
        Dataset(
            "istella-s",
            "http://library.istella.it/dataset/istella-s-letor.tar.gz",
            "tar.gz",
            "**/sample",
            folds=(1,),
            sha256="41b21116a3650cc043dbe16f02ee39f4467f9405b37fdbcc9a6a05e230a38981",
            digest_source=_PYTORCHLTR,
            note="Istella-S LETOR (one train/vali/test split, as Fold1); released by "
            "Istella for non-commercial research, see "
            "http://quickrank.isti.cnr.it/istella-dataset/",
        ),
        Dataset(
            "istella",
            None,
            "tar.gz",
            "**/full",
            folds=(1,),
            note="the full Istella LETOR set ships train and test only, without the "
            "validation split the DataModule needs: use istella-s, or split its "
            "training file yourself (http://quickrank.isti.cnr.it/istella-dataset/)",
        ),
        Dataset(
            "Yahoo",
            None,
            "tar.gz",
            "**/",
            folds=(1,),
            note="the Yahoo! Learning to Rank Challenge set (C14) is distributed only by "
            "Yahoo Webscope after accepting its data agreement: request it at "
            "https://webscope.sandbox.yahoo.com/catalog.php?datatype=c, then put "
            "set1.{train,valid,test}.txt as DIR/Yahoo/Fold1/{train,vali,test}.txt",
        ),
    ]
}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )


def fetch(url: str, target: Path, *, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``target`` with a progress bar. Bytes arrive in ``target.part``; an
    existing ``.part`` is resumed with an HTTP range request (restarted when the server ignores
    ranges). ``target`` appears only once the download is complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    start = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "differank-download"})
    if start:
        request.add_header("Range", f"bytes={start}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and start:  # nothing left to send: the .part is complete
            part.replace(target)
            return target
        raise RuntimeError(f"download of {url} failed: HTTP {error.code} {error.reason}") from error
    except urllib.error.URLError as error:
        raise RuntimeError(f"download of {url} failed: {error.reason}") from error
    with response:
        resumed = start and response.status == 206
        length = response.headers.get("Content-Length")
        total = (int(length) + (start if resumed else 0)) if length else None
        with open(part, "ab" if resumed else "wb") as handle, _progress() as progress:
            task = progress.add_task(target.name, total=total, completed=start if resumed else 0)
            for block in iter(lambda: response.read(CHUNK), b""):
                handle.write(block)
                progress.advance(task, len(block))
    part.replace(target)
    return target


def check_sha256(path: Path, dataset: Dataset) -> str:
    """The archive's sha256; raises (and removes the file) when it differs from the known one."""
    digest = sha256_of(path)
    if dataset.sha256 is None:
        print(
            f"sha256 {digest}  {path.name} (no known digest to check against: compare it "
            "with a trusted copy)"
        )
    elif digest != dataset.sha256:
        path.unlink()
        raise ValueError(
            f"{path.name}: sha256 {digest} differs from the expected "
            f"{dataset.sha256} ({dataset.digest_source}); the file was removed"
        )
    else:
        print(f"sha256 {digest}  {path.name}: OK ({dataset.digest_source})")
    return digest


def extract(archive: Path, kind: str, into: Path) -> None:
    """Unpack ``archive`` (``zip``, ``tar.gz`` or, with an external tool, ``rar``)."""
    into.mkdir(parents=True, exist_ok=True)
    if kind == "zip":
        with zipfile.ZipFile(archive) as handle:
            handle.extractall(into)
    elif kind == "tar.gz":
        with tarfile.open(archive, "r:gz") as handle:  # "data": no paths outside `into`
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            handle.extractall(into, **safe)
    elif kind == "rar":
        tools = {
            "unrar": ["unrar", "x", "-o+", "-idq", str(archive), f"{into}/"],
            "7z": ["7z", "x", "-y", f"-o{into}", str(archive)],
            "bsdtar": ["bsdtar", "-xf", str(archive), "-C", str(into)],
        }
        tool = next((name for name in tools if shutil.which(name)), None)
        if tool is None:
            raise RuntimeError(
                f"{archive.name} is a RAR archive and Python cannot unpack RAR: install unrar, "
                "7z (p7zip) or bsdtar (libarchive), then run the same command again (the "
                "download is kept)"
            )
        subprocess.run(tools[tool], check=True)
    else:
        raise ValueError(f"unknown archive kind {kind!r}")


def arrange(extracted: Path, dataset: Dataset, target: Path) -> None:
    """Move each fold's train, validation and test files to
    ``target/FoldK/{train,vali,test}.txt``."""
    for fold in dataset.folds:
        pattern = dataset.fold_glob.format(fold=fold)
        found = [p for p in extracted.glob(pattern) if p.is_dir()]
        if len(found) != 1:
            raise RuntimeError(
                f"expected one directory {pattern} in {dataset.filename}, found "
                f"{[str(p.relative_to(extracted)) for p in found]}"
            )
        destination = target / f"Fold{fold}"
        destination.mkdir(parents=True, exist_ok=True)
        for split, names in SPLIT_FILES.items():
            source = next((found[0] / n for n in names if (found[0] / n).is_file()), None)
            if source is None:
                raise RuntimeError(f"{found[0].relative_to(extracted)} has none of {names}")
            shutil.move(source, destination / f"{split}.txt")


def is_complete(dataset: Dataset, target: Path) -> bool:
    return all(
        (target / f"Fold{k}" / f"{s}.txt").is_file() for k in dataset.folds for s in SPLIT_FILES
    )


def download(dataset: Dataset, directory: Path, archive: Path | None = None) -> Path:
    """Fetch (or take ``archive``), check, extract and arrange ``dataset`` under
    ``directory``; returns ``directory/NAME``, the ``data.root`` to use."""
    target = directory / dataset.name
    if is_complete(dataset, target):
        print(f"{dataset.name} is already in {target}")
        return target
    if archive is None:
        if dataset.url is None:
            raise RuntimeError(f"{dataset.name} cannot be downloaded automatically: {dataset.note}")
        archive = directory / ".downloads" / dataset.filename
        if not archive.is_file():
            print(f"downloading {dataset.name} from {dataset.url}")
            fetch(dataset.url, archive)
    check_sha256(archive, dataset)
    extracted = directory / ".downloads" / f"{dataset.name}-extracted"
    shutil.rmtree(extracted, ignore_errors=True)
    print(f"extracting {archive.name}")
    extract(archive, dataset.archive, extracted)
    arrange(extracted, dataset, target)
    shutil.rmtree(extracted)
    print(f"{dataset.name}: {target} (data=letor data.root={target})")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m differank.datamodules.download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", nargs="?", help=f"one of {', '.join(REGISTRY)}")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"where datasets live (default $LETOR_DIR, else {data_home()})",
    )
    parser.add_argument("--archive", type=Path, help="an archive downloaded by hand")
    parser.add_argument("--list", action="store_true", help="list the datasets and exit")
    args = parser.parse_args(argv)
    if args.list or args.name is None:
        for dataset in REGISTRY.values():
            source = dataset.url or "manual download"
            print(f"{dataset.name:12} {source}\n{'':12} {dataset.note}".rstrip())
        return 0
    dataset = REGISTRY.get(args.name.lower())
    if dataset is None:
        parser.error(f"unknown dataset {args.name!r}; choose from {', '.join(REGISTRY)}")
    try:
        download(dataset, (args.dir or data_home()).expanduser().absolute(), args.archive)
    except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
