"""The wheel of the running gradcheck, which a bundle and a course template carry.

An answer key is valid for the gradcheck that built it, and no package index need serve that
version (a checkout, a fork, a release not yet published), so what an autograder or a student's
workflow installs is this very installation, packed as a wheel: the `gradcheck` package's files
as they lie (in a checkout or installed, editable or not), the bundled bank, reference engine and
starter under the names an installed wheel gives them (`gradcheck._bank`, `gradcheck._reference`,
`gradcheck._starter`, see pyproject.toml), and the installed distribution's metadata, so pip
installs the same dependencies from the index. Entries carry a fixed date, so the same files
give the same wheel.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

import gradcheck
from gradcheck.bank.bundled import bank_dir, reference_path, starter_path

_EPOCH = (1980, 1, 1, 0, 0, 0)
_TAG = "py3-none-any"
#: packages whose folder lies outside gradcheck/ in a checkout, by their name in the wheel.
_MAPPED = {"_bank": bank_dir, "_reference": reference_path, "_starter": starter_path}


class WheelError(Exception):
    """The running gradcheck cannot be packed; the message says what to give instead."""


def wheel_name(version: str | None = None) -> str:
    """The file name of the wheel of gradcheck `version` (default: the running one)."""
    return f"gradcheck-{version or gradcheck.__version__}-{_TAG}.whl"


def build_wheel(folder: Path) -> Path:
    """Write the wheel of the running gradcheck into `folder`; return its path."""
    try:
        dist = importlib.metadata.distribution("gradcheck")
    except importlib.metadata.PackageNotFoundError as error:
        raise WheelError("gradcheck runs here without being installed (no package metadata), "
                         "so it cannot be packed: install it (pip install -e .) or give "
                         "--gradcheck a wheel or a pip requirement") from error
    if dist.version != gradcheck.__version__:
        raise WheelError(f"the installed metadata says gradcheck {dist.version} but "
                         f"{gradcheck.__version__} is running: install it again (pip install "
                         "-e .) or give --gradcheck a wheel or a pip requirement")
    info = f"gradcheck-{dist.version}.dist-info"
    files = _package_files()
    files[f"{info}/METADATA"] = _metadata(dist)
    for name in dist.metadata.get_all("License-File") or []:
        files[f"{info}/licenses/{name}"] = _license(dist, name)
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: gradcheck "
                              f"{dist.version}\nRoot-Is-Purelib: true\nTag: {_TAG}\n").encode()
    entry_points = dist.read_text("entry_points.txt")
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    record = [f"{name},{_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / wheel_name(dist.version)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=_EPOCH)
            entry.external_attr = 0o100644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    return path


def _package_files() -> dict[str, bytes]:
    """Every file of the gradcheck package by its path in the wheel, caches left out."""
    package = Path(gradcheck.__file__).resolve().parent
    roots = {"gradcheck": package}
    for name, locate in _MAPPED.items():
        folder = locate().resolve()
        if not folder.is_relative_to(package):  # a checkout: exercises/, reference/, ...
            roots[f"gradcheck/{name}"] = folder
    files: dict[str, bytes] = {}
    for prefix, root in roots.items():
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if (path.is_file() and "__pycache__" not in relative.parts
                    and path.suffix not in (".pyc", ".pyo")):
                files[f"{prefix}/{relative.as_posix()}"] = path.read_bytes()
    return files


def _metadata(dist: importlib.metadata.Distribution) -> bytes:
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if not text:
        raise WheelError("the installed gradcheck has no METADATA; install it again")
    return text.encode()


def _license(dist: importlib.metadata.Distribution, name: str) -> bytes:
    """A license file the metadata names: installed with the metadata, or in the checkout."""
    text = dist.read_text(f"licenses/{name}")
    if text is not None:
        return text.encode()
    checkout = Path(gradcheck.__file__).resolve().parents[1] / name
    if checkout.is_file():
        return checkout.read_bytes()
    raise WheelError(f"the installed gradcheck names the license file {name} but it is not "
                     "there; install gradcheck again")


def _digest(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()
