"""Git for `check --base`: a file's text at a ref, the merge base, which locks changed.

gitpython is imported inside the functions so that `import lockguard.gitref` costs nothing until
git is needed. Objects are read through gitpython's object database (one persistent
`git cat-file --batch` process per repository); refs, merge bases, status and fetches go through
gitpython's git command wrapper, so they follow git's own rules exactly (`origin/main`, `v1.2`,
`HEAD~3`, abbreviated shas) and work the same in shallow CI clones.

Relative paths are relative to `repo_dir` (which may be a sub-directory of the work tree).
Errors are `GitRefError`, whose `str()` is one line saying what to do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from lockguard.errors import LockguardError

if TYPE_CHECKING:
    import git

FETCH_TIMEOUT_S = 300
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
        if self.base_text is None:
            return "added" if self.on_disk else "unchanged"
        if not self.on_disk:
            return "removed"
        return "changed" if self.changed else "unchanged"


def changed_locks(repo_dir: Path, base_ref: str, lock_paths: Sequence[Path], *,
                  fetch: bool = True) -> list[LockChange]:
    """Each lock at the merge base of HEAD and `base_ref`, against the file on disk now."""
    repo_dir = Path(repo_dir)
    with _open(repo_dir) as repo:
        base = _merge_base(repo, base_ref, fetch)
        changes = []
        for path in lock_paths:
            rel = _in_repo(repo, repo_dir, Path(path))
            base_text = _text_at(repo, base, rel)
            disk = _disk_path(repo_dir, Path(path))
            try:
                current: str | None = disk.read_text(encoding="utf-8")
            except FileNotFoundError:
                current = None
            except (OSError, UnicodeDecodeError) as exc:
                raise GitRefError(f"{path}: cannot read the lock on disk ({exc})") from None
            changed = _normalise(base_text) != _normalise(current)
            changes.append(LockChange(Path(path), base, base_text, changed, current is not None))
        return changes


def dirty_paths(repo_dir: Path, paths: Sequence[Path]) -> list[Path]:
    """The given paths that have uncommitted changes: staged, unstaged or untracked."""
    if not paths:
        return []
    repo_dir = Path(repo_dir)
    with _open(repo_dir) as repo:
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


@contextlib.contextmanager
def _open(repo_dir: Path) -> Iterator[git.Repo]:
    import git

    try:
        repo = git.Repo(Path(repo_dir), search_parent_directories=True)
    except git.NoSuchPathError:
        raise GitRefError(f"{repo_dir}: no such directory") from None
    except git.InvalidGitRepositoryError:
        raise GitRefError(f"{repo_dir} is not inside a git repository") from None
    try:
        # Never sit on a credentials prompt in CI: fail and say what to fetch instead.
        with repo.git.custom_environment(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true"):
            yield repo
    finally:
        repo.close()  # ends the persistent cat-file processes


def _git(repo: git.Repo, *args: str, timeout: int | None = None) -> str:
    import git

    try:
        return repo.git.execute(["git", *args], kill_after_timeout=timeout, strip_newline_in_stdout=False)
    except git.GitCommandError as exc:
        raise _GitFailed(exc.status, _last_line(str(exc.stderr))) from None


class _GitFailed(Exception):
    def __init__(self, status: object, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _last_line(text: str) -> str:
    """git's own reason from gitpython's error text (`  stderr: 'fatal: ...'`)."""
    lines = []
    for line in text.splitlines():
        line = line.strip().removeprefix("stderr:").strip().strip("'").strip()
        for prefix in ("fatal:", "error:"):
            line = line.removeprefix(prefix).strip()
        if line:
            lines.append(line)
    return lines[-1] if lines else ""


def _try_resolve(repo: git.Repo, ref: str) -> str | None:
    try:
        out = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except _GitFailed:
        return None
    return out.strip() or None


def _resolve(repo: git.Repo, ref: str) -> str:
    sha = _try_resolve(repo, ref)
    if sha is None:
        raise GitRefError(f"{ref} is not a branch, tag or commit in this clone; {_fetch_hint(repo, ref)}")
    return sha


def _remote_for(repo: git.Repo, ref: str) -> tuple[str, str, str] | None:
    """(remote, branch, local ref) to fetch `ref` from, or None when no remote can have it.

    `origin/main` is branch main of remote origin; a bare `main` is taken from the one remote
    (or origin when there are several). Shas and other expressions are not guessed at.
    """
    remotes = [r.name for r in repo.remotes]
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


def _fetch_hint(repo: git.Repo, ref: str) -> str:
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
    return f"fetch it first, e.g.: git fetch --no-tags --depth=50 {repo.remotes[0].name} {ref}"


def _is_shallow(repo: git.Repo) -> bool:
    return Path(repo.git_dir, "shallow").is_file() or Path(repo.common_dir, "shallow").is_file()


def _fetch(repo: git.Repo, remote: str, branch: str, local: str, depth_args: list[str]) -> str | None:
    """Run one fetch; None when it worked, else git's reason."""
    try:
        _git(repo, "fetch", "--no-tags", "--quiet", *depth_args, remote,
             f"+refs/heads/{branch}:{local}", timeout=FETCH_TIMEOUT_S)
    except _GitFailed as exc:
        return exc.reason or f"git fetch exited with {exc.status}"
    return None


def _merge_base(repo: git.Repo, base_ref: str, fetch: bool) -> str:
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


def _try_merge_base(repo: git.Repo, sha: str) -> str | None:
    try:
        out = _git(repo, "merge-base", "HEAD", sha)
    except _GitFailed:
        return None  # exit 1: none reachable (shallow boundary or unrelated histories)
    return out.strip() or None


def _text_at(repo: git.Repo, sha: str, rel: str) -> str | None:
    import git

    tree = repo.commit(sha).tree
    try:
        obj = tree / rel if rel else tree
    except KeyError:
        return None  # absent at that ref: the caller treats it as added
    if not isinstance(obj, git.Blob):
        raise GitRefError(f"{rel} is a {obj.type} at {sha[:12]}, not a file")
    data = obj.data_stream.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise GitRefError(f"{rel} at {sha[:12]} is not UTF-8 text") from None


def _disk_path(repo_dir: Path, path: Path) -> Path:
    return path if path.is_absolute() else repo_dir / path


def _in_repo(repo: git.Repo, repo_dir: Path, path: Path) -> str:
    """`path` relative to the work tree root, in git's spelling (forward slashes)."""
    if repo.working_tree_dir is None:
        raise GitRefError(f"{repo.git_dir} is a bare repository; lockguard needs a work tree")
    root = os.path.realpath(repo.working_tree_dir)
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
    "LockChange",
    "changed_locks",
    "dirty_paths",
]
