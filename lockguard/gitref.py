"""Git for `check --base` and provenance: a file's text at a ref, the merge base, which locks
changed, the commit and the author.

git itself, run through lockguard.process.capture (its own session, a timeout, killed with
lockguard's other children on Ctrl-C): no git library is imported, so `check --base` with no lock
changed costs a few git plumbing calls. Refs, merge bases, status and fetches follow git's own
rules exactly (`origin/main`, `v1.2`, `HEAD~3`, abbreviated shas) and work the same in shallow
CI clones; files at a commit are read with one `git cat-file --batch` per call, several at once.

Relative paths are relative to `repo_dir` (which may be a sub-directory of the work tree).
Errors are `GitRefError`, whose `str()` is one line saying what to do.
"""

from __future__ import annotations

import contextlib
import getpass
import io
import os
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lockguard import process
from lockguard.errors import LockguardError, last_line
from lockguard.files import ReadError, read_bytes

FETCH_TIMEOUT_S = 300
GIT_TIMEOUT_S = 120  # any other git call: plumbing on a local repository
# How far a shallow clone is deepened, step by step, before giving up and fetching everything.
DEEPEN_STEPS = (50, 200, 1000)


class GitRefError(LockguardError):
    """A ref, a path or a repository that cannot be used; `str()` is one line."""


@dataclass(frozen=True)
class LockChange:
    """One lock path compared between the merge base and the working tree on disk."""

    path: Path  # as given
    base_commit: str  # the merge base it was read at (full sha)
    base_text: str | None  # None: the path does not exist at the base (the lock was added)
    changed: bool  # differs from what is on disk now (line endings aside)
    on_disk: bool = True  # False: the lock was deleted from the working tree

    @property
    def status(self) -> Literal["added", "removed", "changed", "unchanged"]:
        """How the lock changed since the merge base; a path at neither the base nor on disk
        counts as unchanged."""
        if self.base_text is None:
            return "added" if self.on_disk else "unchanged"
        if not self.on_disk:
            return "removed"
        return "changed" if self.changed else "unchanged"


class BaseTree:
    """The merge base of HEAD and a ref, and the ref's tip, open for reading (one repository
    handle, one `git cat-file` process a read): files as they were at the merge base (where
    the pull request's diff starts) or are at the tip (what it merges into), and what became
    of them since."""

    def __init__(self, repo: _Repo, repo_dir: Path, ref: str, commit: str,
                 tip: str | None = None) -> None:
        self._repo, self._dir = repo, repo_dir
        self.ref = ref
        self.commit = commit  # the merge base (full sha)
        self.tip = tip or commit  # the ref's own commit (full sha)

    @property
    def root(self) -> Path:
        """The work tree's top folder (its real path)."""
        if self._repo.root is None:
            raise GitRefError(f"{self._repo.git_dir} is a bare repository; lockguard needs a "
                              "work tree")
        return Path(self._repo.root)

    def rel(self, path: Path) -> str:
        """`path` (relative to the repo_dir it was opened with) in git's spelling."""
        return _in_repo(self._repo, self._dir, Path(path))

    def text(self, path: Path) -> str | None:
        """The file's text at the merge base; None when it did not exist there."""
        return self.texts([path])[0]

    def texts(self, paths: Sequence[Path], *, at: str | None = None) -> list[str | None]:
        """Several files' texts at the merge base (or the commit `at`), read by one git
        process."""
        return _texts_at(self._repo, at or self.commit, [self.rel(Path(p)) for p in paths])

    def links(self, paths: Sequence[Path], *, at: str | None = None) -> list[Path]:
        """Of `paths`, those git records at the merge base (or `at`) as symbolic links, or
        below a folder it records as one."""
        rels = [self.rel(Path(p)) for p in paths]
        wanted = {r for rel in rels for r in _with_parents(rel)}
        if not wanted:
            return []
        out = _git(self._repo, "ls-tree", "-z", "--full-tree", at or self.commit, "--",
                   *sorted(wanted))
        linked = set()
        for entry in out.split("\0"):
            meta, _, name = entry.partition("\t")
            if meta.startswith("120000 "):
                linked.add(name)
        return [Path(p) for p, rel in zip(paths, rels)
                if any(r in linked for r in _with_parents(rel))]

    def extract(self, dest: Path, *, at: str | None = None) -> None:
        """The whole tree at the merge base (or `at`) written below `dest` (a folder that
        exists), as `git archive` gives it: no symbolic link is written (each is left out),
        nor anything outside `dest`."""
        data = _git_bytes(self._repo, "archive", "--format=tar", at or self.commit,
                          timeout=FETCH_TIMEOUT_S)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = [m for m in tar.getmembers() if (m.isfile() or m.isdir())
                       and not m.name.startswith("/") and ".." not in m.name.split("/")]
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter="data")
            else:  # a Python before the extraction filters: links and escapes left out above
                tar.extractall(dest, members=members)

    def change(self, path: Path) -> LockChange:
        """The file at the merge base against the file on disk now."""
        base_text = self.text(path)
        current = disk_text(_disk_path(self._dir, Path(path)))
        changed = _normalise(base_text) != _normalise(current)
        return LockChange(Path(path), self.commit, base_text, changed, current is not None)

    def renames(self, paths: Sequence[Path]) -> dict[Path, Path]:
        """Of `paths` (as they were at the merge base), those git's rename detection finds
        under another name in the work tree now: {old: new}, absolute paths. Only files git
        tracks (committed or staged) are seen."""
        rels = {self.rel(Path(p)) for p in paths}
        if not rels:
            return {}
        # Every path that changed, so that a rename's target is found whatever its name. Below
        # git's default 50 % similarity: a small lock whose pins were bumped keeps its header
        # and little else (numpy 1.26.4 → 2.0.2 in a one-pin lock: 40 %), and only a base path
        # that is gone can be a source here.
        out = _git(self._repo, "diff", "--no-ext-diff", "--no-color", "-M30%",
                   "--name-status", "-z", self.commit, "--")
        root = Path(self._repo.root or ".")
        fields = out.split("\0")
        found: dict[Path, Path] = {}
        i = 0
        while i < len(fields):
            status = fields[i]
            if status.startswith(("R", "C")) and i + 2 < len(fields):
                old, new = fields[i + 1], fields[i + 2]
                if status.startswith("R") and old in rels:
                    found[root / old] = root / new
                i += 3
            else:
                i += 2
        return found

    def named(self, names: Sequence[str], *, at: str) -> list[str | None]:
        """The texts of files named as git names them (from the repository's root) at the
        commit `at`: read from git alone, whatever the work tree holds at those paths."""
        return _texts_at(self._repo, at, list(names))

    def files(self, *, at: str) -> list[str]:
        """Every file at the commit `at`, from the repository's root."""
        out = _git(self._repo, "ls-tree", "-r", "-z", "--name-only", "--full-tree", at)
        return [n for n in out.split("\0") if n]

    def changed(self, *, at: str, pathspecs: Sequence[str]) -> list[str]:
        """The files matching `pathspecs` (from the repository's root) that differ between the
        commit `at` and the work tree on disk: changed, added (untracked ones included, as
        .gitignore leaves them) or removed; repository-relative, sorted."""
        # ":(top)" alone is the whole tree: ":(top)." matches nothing (git 2.39), which left a
        # project at the repository's root with only its scenario folders and *.py watched.
        specs = [(":(top)" if s in ("", ".") else f":(top){s}") if not s.startswith(":")
                 else s.replace(":(", ":(top,", 1) for s in pathspecs]
        diff = _git(self._repo, "diff", "--no-ext-diff", "--name-only", "-z", at, "--", *specs)
        untracked = _git(self._repo, "ls-files", "-z", "--others", "--exclude-standard",
                         "--full-name", "--", *specs)
        return sorted({n for n in (diff + untracked).split("\0") if n})

    def dirty(self, paths: Sequence[Path]) -> list[Path]:
        """The given paths that have uncommitted changes: staged, unstaged or untracked."""
        return _dirty(self._repo, self._dir, paths)


@contextlib.contextmanager
def merge_base(repo_dir: Path, base_ref: str, *, fetch: bool = True) -> Iterator[BaseTree]:
    """The merge base of HEAD and `base_ref` and its tip, open for reading (fetched if
    needed)."""
    repo_dir = Path(repo_dir)
    with _open(repo_dir) as repo:
        commit = _merge_base(repo, base_ref, fetch)
        yield BaseTree(repo, repo_dir, base_ref, commit, _tip(repo, base_ref))


def _tip(repo: _Repo, ref: str) -> str:
    """The commit `ref` names, as _merge_base resolved (and may have fetched) it."""
    sha = _try_resolve(repo, ref)
    if sha is None and (target := _remote_for(repo, ref)) is not None:
        sha = _try_resolve(repo, target[2])
    if sha is None:
        raise GitRefError(f"{ref} is not in this clone; {_fetch_hint(repo, ref)}")
    return sha


def _with_parents(rel: str) -> list[str]:
    """`a/b/c` and the folders it lies in: a/b/c, a/b, a."""
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1) if parts[:i] != [""]]


# The largest file compared with its merge-base version (a lock, a config file).
MAX_DISK_BYTES = 16 << 20


def disk_text(path: Path) -> str | None:
    """A file's text on disk, None when it is not there (a FIFO or a device is refused by
    files.read_bytes, never opened to block)."""
    try:
        return read_bytes(path, "file", MAX_DISK_BYTES).decode("utf-8")
    except ReadError as exc:
        if exc.missing:
            return None
        raise GitRefError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise GitRefError(f"{path}: cannot read it on disk ({exc})") from None


def changed_locks(repo_dir: Path, base_ref: str, lock_paths: Sequence[Path], *,
                  fetch: bool = True) -> list[LockChange]:
    """Each lock at the merge base of HEAD and `base_ref`, against the file on disk now."""
    with merge_base(repo_dir, base_ref, fetch=fetch) as base:
        return [base.change(Path(path)) for path in lock_paths]


def head_commit(repo_dir: Path) -> str | None:
    """The commit the project is at, for provenance; None outside a git work tree or before
    its first commit."""
    try:
        with _open(Path(repo_dir)) as repo:
            return _try_resolve(repo, "HEAD")
    except GitRefError:
        return None


def author(repo_dir: Path) -> str:
    """Who is accepting a change, for provenance: git's user.name <user.email> as the
    project's repository sees it, else the login name."""
    name = email = None
    with contextlib.suppress(GitRefError):
        with _open(Path(repo_dir)) as repo:
            name, email = (_config_value(repo, key) for key in ("user.name", "user.email"))
    if name is None:
        try:
            name = os.environ.get("USER") or getpass.getuser()
        except Exception:  # noqa: BLE001 - no login name either: say so
            name = "unknown"
    return f"{name} <{email}>" if email else str(name)


def default_branch(repo_dir: Path) -> str:
    """The branch pushes go to: origin's default, else main or master where one exists, else
    the branch checked out; "main" outside a repository."""
    try:
        with _open(Path(repo_dir)) as repo:
            for args, strip in ((("symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"),
                                 "refs/remotes/origin/"),
                                (("for-each-ref", "--format=%(refname:short)",
                                  "refs/heads/main", "refs/heads/master"), ""),
                                (("symbolic-ref", "--quiet", "--short", "HEAD"), "")):
                with contextlib.suppress(_GitFailed):
                    found = _git(repo, *args).split()
                    if found:
                        return found[0].removeprefix(strip)
    except GitRefError:
        pass
    return "main"


def _config_value(repo: _Repo, key: str) -> str | None:
    try:
        return _git(repo, "config", "--get", key).strip() or None
    except _GitFailed:
        return None  # unset


def dirty_paths(repo_dir: Path, paths: Sequence[Path]) -> list[Path]:
    """The given paths that have uncommitted changes: staged, unstaged or untracked."""
    if not paths:
        return []
    with _open(Path(repo_dir)) as repo:
        return _dirty(repo, Path(repo_dir), paths)


def _dirty(repo: _Repo, repo_dir: Path, paths: Sequence[Path]) -> list[Path]:
    if not paths:
        return []
    rels = {_in_repo(repo, repo_dir, Path(p)): Path(p) for p in paths}
    # One `git status` for all paths; -z so odd file names survive.
    out = _git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all",
               "--ignored=no", "--", *rels)
    dirty: list[Path] = []
    entries = out.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, name = entry[:2], entry[3:]
        if code[0] in "RC":
            i += 1  # a rename/copy entry is followed by its source path
        for rel, given in rels.items():
            if name == rel or name.startswith(rel.rstrip("/") + "/"):
                if given not in dirty:
                    dirty.append(given)
    return dirty


# ---------------------------------------------------------------------------------------------


@dataclass
class _Repo:
    """A repository as git itself reports it."""

    root: str | None  # the work tree's top (real path); None for a bare repository
    git_dir: str
    common_dir: str
    env: dict[str, str]
    cwd: str
    _remotes: list[str] | None = field(default=None, repr=False)

    @property
    def remotes(self) -> list[str]:
        if self._remotes is None:
            self._remotes = _git(self, "remote").split()
        return self._remotes


@contextlib.contextmanager
def _open(repo_dir: Path) -> Iterator[_Repo]:
    repo_dir = Path(repo_dir)
    if not repo_dir.is_dir():
        raise GitRefError(f"{repo_dir}: no such directory")
    # Never sit on a credentials prompt in CI: fail and say what to fetch instead. Messages in
    # English: a few are read (a missing remote branch).
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    probe = _Repo(None, "", "", env, str(repo_dir))
    try:
        lines = _git(probe, "rev-parse", "--absolute-git-dir", "--git-common-dir",
                     "--is-bare-repository").splitlines()
    except _GitFailed as exc:
        if "not a git repository" in exc.reason:
            raise GitRefError(f"{repo_dir} is not inside a git repository") from None
        raise GitRefError(f"{repo_dir}: git cannot read the repository ({exc.reason})") \
            from None
    git_dir, common = lines[0], lines[1]
    common = common if os.path.isabs(common) else os.path.join(str(repo_dir), common)
    root = None
    if lines[2] != "true":
        root = os.path.realpath(_git(probe, "rev-parse", "--show-toplevel").strip())
    yield _Repo(root, git_dir, os.path.realpath(common), env, str(repo_dir))


def _git(repo: _Repo, *args: str, timeout: float | None = None,
         input: bytes | None = None) -> str:
    return _git_bytes(repo, *args, timeout=timeout, input=input).decode("utf-8", "replace")


def _git_bytes(repo: _Repo, *args: str, timeout: float | None = None,
               input: bytes | None = None) -> bytes:
    try:
        done = process.capture(["git", *args], timeout=timeout or GIT_TIMEOUT_S,
                               cwd=repo.cwd, env=repo.env, input=input)
    except process.ProcessError as exc:
        raise GitRefError(f"git is needed for --base and cannot run: {exc}") from None
    if done.timed_out:
        raise _GitFailed(None, f"git {args[0]} did not finish in {timeout or GIT_TIMEOUT_S:g} s")
    if done.code != 0:
        # git's own reason is the last `fatal:` / `error:` line it printed.
        raise _GitFailed(done.code, last_line(done.stderr.decode("utf-8", "replace"),
                                              prefixes=("fatal:", "error:")))
    return done.stdout


class _GitFailed(Exception):
    def __init__(self, status: object, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _try_resolve(repo: _Repo, ref: str) -> str | None:
    try:
        out = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options",
                   f"{ref}^{{commit}}")
    except _GitFailed:
        return None
    return out.strip() or None


def _resolve(repo: _Repo, ref: str) -> str:
    sha = _try_resolve(repo, ref)
    if sha is None:
        raise GitRefError(f"{ref} is not a branch, tag or commit in this clone; {_fetch_hint(repo, ref)}")
    return sha


def _remote_for(repo: _Repo, ref: str) -> tuple[str, str, str] | None:
    """(remote, branch, local ref) to fetch `ref` from, or None when no remote can have it.

    `origin/main` is branch main of remote origin; a bare `main` is taken from the one remote
    (or origin when there are several). Shas and other expressions are not guessed at.
    """
    remotes = repo.remotes
    if not remotes:
        return None
    remote, sep, branch = ref.partition("/")
    if sep and remote in remotes and branch:
        return remote, branch, f"refs/remotes/{remote}/{branch}"
    if ref.startswith("refs/heads/"):
        ref = ref[len("refs/heads/"):]
    if any(c in ref for c in "~^:@{} ") or _looks_like_sha(ref):
        return None
    remote = "origin" if "origin" in remotes or len(remotes) > 1 else remotes[0]
    if remote not in remotes:
        return None
    return remote, ref, f"refs/remotes/{remote}/{ref}"


def _looks_like_sha(ref: str) -> bool:
    return 7 <= len(ref) <= 64 and all(c in "0123456789abcdef" for c in ref.lower())


def _fetch_hint(repo: _Repo, ref: str) -> str:
    target = _remote_for(repo, ref)
    if target is not None:
        remote, branch, _ = target
        return f"run: git fetch --no-tags --depth=50 {remote} {branch}"
    remote, sep, branch = ref.partition("/")
    if sep and branch and not repo.remotes:
        return f"this clone has no remote; run: git remote add {remote} URL && git fetch --no-tags --depth=50 {remote} {branch}"
    if sep and branch:
        return f"there is no remote named {remote}; run: git fetch --no-tags --depth=50 <remote> {branch}"
    if not repo.remotes:
        return "this clone has no remote to fetch it from"
    return f"fetch it first, e.g.: git fetch --no-tags --depth=50 {repo.remotes[0]} {ref}"


def _is_shallow(repo: _Repo) -> bool:
    return Path(repo.git_dir, "shallow").is_file() or Path(repo.common_dir, "shallow").is_file()


def _fetch(repo: _Repo, remote: str, branch: str, local: str, depth_args: list[str]) -> str | None:
    """Run one fetch; None when it worked, else git's reason."""
    try:
        _git(repo, "fetch", "--no-tags", "--quiet", *depth_args, remote,
             f"+refs/heads/{branch}:{local}", timeout=FETCH_TIMEOUT_S)
    except _GitFailed as exc:
        return exc.reason or f"git fetch exited with {exc.status}"
    return None


def _merge_base(repo: _Repo, base_ref: str, fetch: bool) -> str:
    target = _remote_for(repo, base_ref)
    base = _try_resolve(repo, base_ref)
    if base is None and target is not None and fetch:
        remote, branch, local = target
        depth = ["--depth=50"] if _is_shallow(repo) else []
        reason = _fetch(repo, remote, branch, local, depth)
        if reason is not None and "couldn't find remote ref" in reason:
            raise GitRefError(f"{base_ref} is not in this clone and {remote} has no branch {branch}")
        if reason is not None:
            raise GitRefError(
                f"{base_ref} is not in this clone and fetching it failed ({reason}); "
                f"run: git fetch --no-tags --depth=50 {remote} {branch}"
            )
        base = _try_resolve(repo, local)
    if base is None:
        raise GitRefError(f"{base_ref} is not in this clone; {_fetch_hint(repo, base_ref)}")

    found = _try_merge_base(repo, base)
    if found is not None:
        return found
    # HEAD is checked only now: one git call fewer on the fast path.
    if _try_resolve(repo, "HEAD") is None:
        raise GitRefError("HEAD has no commit yet: commit once before using --base")
    if not _is_shallow(repo):
        raise GitRefError(f"HEAD and {base_ref} have no common history (no merge base)")
    if target is None or not fetch:
        how = (f"git fetch --no-tags --deepen=200 {target[0]} {target[1]}" if target
               else "git fetch --deepen=200 (or clone with full history, fetch-depth: 0)")
        raise GitRefError(
            f"this clone is shallow and the merge base of HEAD and {base_ref} is not in it; run: {how}"
        )
    remote, branch, local = target
    # --deepen moves the whole shallow boundary back (HEAD's side too), a step at a time, so a
    # CI clone fetches only as much history as the branch point needs.
    for steps in DEEPEN_STEPS:
        reason = _fetch(repo, remote, branch, local, [f"--deepen={steps}"])
        if reason is not None:
            raise GitRefError(
                f"this clone is shallow and deepening it failed ({reason}); "
                f"run: git fetch --no-tags --deepen={steps} {remote} {branch}"
            )
        found = _try_merge_base(repo, base)
        if found is not None:
            return found
        if not _is_shallow(repo):
            break
    if _is_shallow(repo):
        reason = _fetch(repo, remote, branch, local, ["--unshallow"])
        found = _try_merge_base(repo, base) if reason is None else None
        if found is not None:
            return found
    raise GitRefError(f"HEAD and {base_ref} have no common history (no merge base), even unshallowed")


def _try_merge_base(repo: _Repo, sha: str) -> str | None:
    try:
        out = _git(repo, "merge-base", "HEAD", sha)
    except _GitFailed:
        return None  # exit 1: none reachable (shallow boundary or unrelated histories)
    return out.strip() or None


def _text_at(repo: _Repo, sha: str, rel: str) -> str | None:
    return _texts_at(repo, sha, [rel])[0]


def _texts_at(repo: _Repo, sha: str, rels: Sequence[str]) -> list[str | None]:
    """The texts of `rels` at commit `sha` (None: absent there), by one `git cat-file --batch`."""
    if not rels:
        return []
    for rel in rels:
        if "\n" in rel:
            raise GitRefError(f"{rel!r}: a path with a line break cannot be read from git")
    query = "".join(f"{sha}:{rel}\n" for rel in rels).encode("utf-8")
    try:
        data = _git_bytes(repo, "cat-file", "--batch", input=query)
    except _GitFailed as exc:
        raise GitRefError(f"cannot read files at {sha[:12]}: {exc.reason}") from None
    out: list[str | None] = []
    at = 0
    for rel in rels:
        end = data.index(b"\n", at)
        header = data[at:end].decode("utf-8", "replace").split()
        at = end + 1
        if header[-1] == "missing" or len(header) < 3:
            out.append(None)  # absent at that ref: the caller treats it as added
            continue
        kind, size = header[1], int(header[2])
        blob = data[at:at + size]
        at += size + 1
        if kind != "blob":
            raise GitRefError(f"{rel} is a {kind} at {sha[:12]}, not a file")
        try:
            out.append(blob.decode("utf-8-sig"))
        except UnicodeDecodeError:
            raise GitRefError(f"{rel} at {sha[:12]} is not UTF-8 text") from None
    return out


def _disk_path(repo_dir: Path, path: Path) -> Path:
    return path if path.is_absolute() else repo_dir / path


def _in_repo(repo: _Repo, repo_dir: Path, path: Path) -> str:
    """`path` relative to the work tree root, in git's spelling (forward slashes)."""
    if repo.root is None:
        raise GitRefError(f"{repo.git_dir} is a bare repository; lockguard needs a work tree")
    root = repo.root
    full = _disk_path(repo_dir, path)
    # realpath of the parent only: the file itself may not exist (deleted, or only at the ref).
    absolute = os.path.join(os.path.realpath(full.parent), full.name)
    rel = os.path.relpath(absolute, root)
    if rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel):
        raise GitRefError(f"{path} is outside the repository at {root}")
    return "" if rel == "." else Path(rel).as_posix()


def _normalise(text: str | None) -> str | None:
    return None if text is None else text.replace("\r\n", "\n")


__all__ = [
    "DEEPEN_STEPS",
    "FETCH_TIMEOUT_S",
    "GitRefError",
    "BaseTree",
    "LockChange",
    "author",
    "changed_locks",
    "default_branch",
    "disk_text",
    "head_commit",
    "merge_base",
    "dirty_paths",
]
