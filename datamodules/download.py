"""Download a public LETOR-format dataset and lay it out the way the LETOR DataModule reads it.

    python -m differank.datamodules.download NAME [--dir DIR] [--archive FILE] [--accept-sha256]
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

Nothing an archive holds can hurt the files around it: a user's archive is only read (a digest
mismatch is an error showing both digests; ``--accept-sha256`` continues), extraction has a
budget checked from the archive's listing, no member may leave the folder, and the layout is
renamed into place only once complete. The rules are stated in ``docs/data.md#downloads``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from differank.datamodules import cache

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
    publisher's terms need a manual download (``note`` says where); ``url_source`` says where
    the URL's form was confirmed (shown by ``--list``).
    """

    name: str
    url: str | None
    archive: str  # "zip" | "tar.gz" | "rar"
    fold_glob: str
    folds: tuple[int, ...] = (1, 2, 3, 4, 5)
    sha256: str | None = None
    digest_source: str = ""
    note: str = ""
    url_source: str = ""  # where this URL form was last confirmed to be the working one

    @property
    def filename(self) -> str:
        return f"{self.name}.{self.archive}"


_LETOR4 = "https://research.microsoft.com/en-us/um/beijing/projects/letor/LETOR4.0/Data"
_LETOR_PAGE = (
    "https://www.microsoft.com/en-us/research/project/letor-learning-rank-information-retrieval/"
)
# Microsoft's own OneDrive shares of MSLR. The older api.onedrive.com/v1.0/shares/.../content
# form answers HTTP 400 since 2025-09 (tensorflow/datasets issue #11136).
_MSLR = "https://1drv.ms/u"
_MSLR_URL_SOURCE = (
    "share links of the MSLR project page, as in tensorflow/datasets PR #11146 "
    "(2025-11, open when read; it fixes issue #11136); not fetched from here"
)
_LETOR_URL_SOURCE = "the LETOR project page's links (not re-checked since the page moved)"
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
            url_source=_LETOR_URL_SOURCE,
        ),
        Dataset(
            "MQ2008",
            f"{_LETOR4}/MQ2008.rar",
            "rar",
            "**/MQ2008/Fold{fold}",
            note=f"LETOR 4.0; if the URL has moved, get MQ2008.rar from {_LETOR_PAGE} "
            "and pass --archive",
            url_source=_LETOR_URL_SOURCE,
        ),
        Dataset(
            "OHSUMED",
            "https://research.microsoft.com/en-us/um/beijing/projects/letor/LETOR3.0/OHSUMED.zip",
            "zip",
            "**/QueryLevelNorm/Fold{fold}",
            note=f"LETOR 3.0, the QueryLevelNorm files; if the URL has moved, get "
            f"OHSUMED.zip from {_LETOR_PAGE} and pass --archive",
            url_source=_LETOR_URL_SOURCE,
        ),
        Dataset(
            "MSLR-WEB10K",
            f"{_MSLR}/s!AtsMfWUz5l8nbOIoJ6Ks0bEMp78",
            "zip",
            "**/Fold{fold}",
            sha256="2902142ea33f18c59414f654212de5063033b707d5c3939556124b1120d3a0ba",
            digest_source=_PYTORCHLTR,
            note="https://www.microsoft.com/en-us/research/project/mslr/",
            url_source=_MSLR_URL_SOURCE,
        ),
        Dataset(
            "MSLR-WEB30K",
            f"{_MSLR}/s!AtsMfWUz5l8nbXGPBlwD1rnFdBY",
            "zip",
            "**/Fold{fold}",
            sha256="08cb7977e1d5cbdeb57a9a2537a0923dbca6d46a76db9a6afc69e043c85341ae",
            digest_source=_PYTORCHLTR,
            note="https://www.microsoft.com/en-us/research/project/mslr/",
            url_source=_MSLR_URL_SOURCE,
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
            url_source="the Istella dataset page, as recorded by pytorchltr (not re-checked)",
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
        if response.headers.get_content_type() == "text/html":  # a share page, not the file
            raise RuntimeError(
                f"{url} answered a web page, not the archive: open it in a browser, download "
                "the file and pass it with --archive"
            )
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


MISMATCH_SUFFIX = ".sha256-mismatch"


def check_sha256(path: Path, dataset: Dataset, *, fetched: bool, accept: bool = False) -> str:
    """The archive's sha256, compared with the known one. A mismatch is an error showing both
    digests, unless ``accept``; the archive is never changed. Only a file the downloader
    ``fetched`` itself is moved aside (to ``<name>.sha256-mismatch``), so the next run fetches
    it again; an archive the user gave is left exactly where and as it is."""
    digest = sha256_of(path)
    if dataset.sha256 is None:
        print(
            f"sha256 {digest}  {path.name} (no known digest to check against: compare it "
            "with a trusted copy)"
        )
    elif digest == dataset.sha256:
        print(f"sha256 {digest}  {path.name}: OK ({dataset.digest_source})")
    elif accept:
        print(
            f"warning: sha256 {digest}  {path.name} differs from the expected "
            f"{dataset.sha256} ({dataset.digest_source}); used anyway (--accept-sha256)"
        )
    else:
        where = f"{path} is kept unchanged"
        if fetched:
            aside = path.with_name(path.name + MISMATCH_SUFFIX)
            path.replace(aside)
            where = f"the download was moved aside to {aside} (a new run fetches it again)"
        raise ValueError(
            f"{path.name}: sha256 {digest} differs from the expected {dataset.sha256} "
            f"({dataset.digest_source}); {where}. If you trust this archive, run again with "
            "--accept-sha256"
        )
    return digest


# The extraction budget (docs/data.md#downloads): LETOR text compresses 5-10x, so 100x is
# far beyond any real set and far below a decompression bomb.
MAX_MEMBERS = 10_000
MAX_EXPANSION = 100
MIN_BUDGET = 64 * 2**20


def _members(archive: Path, kind: str) -> list[tuple[str, int, bool]]:
    """``(name, size, is_dir)`` of every member, from the archive's listing (nothing written).
    A tar member that is neither a file nor a folder (link, device, fifo) is an error."""
    if kind == "zip":
        with zipfile.ZipFile(archive) as handle:
            return [(m.filename, m.file_size, m.is_dir()) for m in handle.infolist()]
    with tarfile.open(archive, "r:gz") as handle:
        members = handle.getmembers()
    for member in members:
        if not (member.isfile() or member.isdir()):
            raise ValueError(
                f"{archive.name}: member {member.name!r} is a link or special file; only "
                "files and folders are extracted, so the archive is refused"
            )
    return [(m.name, m.size, m.isdir()) for m in members]


def check_budget(archive: Path, members: list[tuple[str, int, bool]], into: Path) -> None:
    """Refuse, before writing anything, an archive whose listing exceeds the budget."""
    size = archive.stat().st_size
    total = sum(member_size for _, member_size, _ in members)
    allowed = max(MAX_EXPANSION * size, MIN_BUDGET)
    free = cache.free_disk_bytes(into)
    if len(members) > MAX_MEMBERS:
        raise ValueError(
            f"{archive.name}: {len(members)} members, more than the {MAX_MEMBERS} a LETOR "
            "archive needs; refused before extracting"
        )
    if total > allowed:
        raise ValueError(
            f"{archive.name}: {size} bytes would expand to {total} bytes, more than "
            f"{MAX_EXPANSION}x its size ({allowed} bytes allowed); refused before extracting "
            "(a LETOR archive expands 5-10x)"
        )
    if total > free:
        raise ValueError(
            f"{archive.name}: extracting needs {total / 2**30:.2f} GiB but only "
            f"{free / 2**30:.2f} GiB are free on the disk of {into}; free some space or "
            "pass --dir on a larger disk"
        )


def _inside(into: Path, name: str, archive: Path) -> Path:
    """``into / name``, refusing a member path that leaves ``into``."""
    target = (into / name).resolve()
    if name.startswith(("/", "\\")) or not target.is_relative_to(into.resolve()):
        raise ValueError(
            f"{archive.name}: member {name!r} would be written outside the extraction folder; "
            "the archive is refused"
        )
    return target


def _member(handle: zipfile.ZipFile | tarfile.TarFile, name: str) -> IO[bytes]:
    """The bytes of the archive member ``name``, a file (:func:`_members` has refused links and
    special files)."""
    if isinstance(handle, zipfile.ZipFile):
        return handle.open(name)
    source = handle.extractfile(name)
    if source is None:  # a member that is no file: _members refuses those before this
        raise ValueError(f"archive member {name!r} is not a file")
    return source


def extract(archive: Path, kind: str, into: Path) -> None:
    """Unpack ``archive`` (``zip``, ``tar.gz`` or, with an external tool, ``rar``) into
    ``into``, under the budget and path rules of ``docs/data.md#downloads``."""
    into.mkdir(parents=True, exist_ok=True)
    if kind in ("zip", "tar.gz"):
        members = _members(archive, kind)
        check_budget(archive, members, into)
        targets = [(name, _inside(into, name, archive), is_dir) for name, _, is_dir in members]
        opener = zipfile.ZipFile(archive) if kind == "zip" else tarfile.open(archive, "r:gz")
        with opener as handle:
            for name, target, is_dir in targets:
                if is_dir:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with _member(handle, name) as source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out, CHUNK)
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


def download(
    dataset: Dataset, directory: Path, archive: Path | None = None, *, accept_sha256=False
) -> Path:
    """Fetch (or take ``archive``), check, extract and arrange ``dataset`` under
    ``directory``; returns ``directory/NAME``, the ``data.root`` to use."""
    target = directory / dataset.name
    if is_complete(dataset, target):
        print(f"{dataset.name} is already in {target}")
        return target
    if target.exists():  # not ours to overwrite or delete
        raise RuntimeError(
            f"{target} exists but lacks some of Fold{{{','.join(map(str, dataset.folds))}}}/"
            "{train,vali,test}.txt; move it aside and run again"
        )
    fetched = archive is None
    if archive is None:
        if dataset.url is None:
            raise RuntimeError(f"{dataset.name} cannot be downloaded automatically: {dataset.note}")
        archive = directory / ".downloads" / dataset.filename
        if not archive.is_file():
            print(f"downloading {dataset.name} from {dataset.url}")
            fetch(dataset.url, archive)
    check_sha256(archive, dataset, fetched=fetched, accept=accept_sha256)
    directory.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=directory, prefix=f".{dataset.name}-partial-"))
    try:
        print(f"extracting {archive.name}")
        extract(archive, dataset.archive, work / "extracted")
        arrange(work / "extracted", dataset, work / dataset.name)
        os.rename(work / dataset.name, target)  # the complete layout appears at once
    finally:
        shutil.rmtree(work, ignore_errors=True)
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
    parser.add_argument(
        "--archive", type=Path, help="an archive downloaded by hand (only read, never changed)"
    )
    parser.add_argument(
        "--accept-sha256",
        action="store_true",
        help="use an archive whose sha256 differs from the known digest",
    )
    parser.add_argument("--list", action="store_true", help="list the datasets and exit")
    args = parser.parse_args(argv)
    if args.list or args.name is None:
        for listed in REGISTRY.values():
            source = listed.url or "manual download"
            print(f"{listed.name:12} {source}\n{'':12} {listed.note}".rstrip())
            if listed.url_source:
                print(f"{'':12} URL form confirmed by: {listed.url_source}")
        return 0
    dataset = REGISTRY.get(args.name.lower())
    if dataset is None:
        parser.error(f"unknown dataset {args.name!r}; choose from {', '.join(REGISTRY)}")
    try:
        directory = (args.dir or data_home()).expanduser().absolute()
        download(dataset, directory, args.archive, accept_sha256=args.accept_sha256)
    except (RuntimeError, ValueError, OSError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
