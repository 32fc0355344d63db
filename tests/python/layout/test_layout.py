"""The front door stays true: the README's folder map, the links of README.md and docs/, the daemon's flags in docs/daemon.md, no tracked build outputs.

  tests/python/run_pytest.py --env TENSORD_BINARY=BUILD/server/tensord \
      tests/python/layout/test_layout.py

Fails when
- a top-level folder, or a folder directly under core/, client/ or server/,
  has no row in the README's map (the table under "## Map" whose rows start
  with a backticked folder, `core/cpu/`), or a row names a folder that does
  not exist;
- a relative link in README.md or docs/*.md points at a file that does not
  exist, or at an anchor that is not a heading of its page (GitHub's slugs);
- a flag `tensord --help` lists has no row in docs/daemon.md's "## Flags"
  table, or a row there names a flag tensord does not have;
- a tracked file is a build or run output (*.safetensors, *.pt, *.npy,
  archives, objects, ELF binaries) outside the fixture folders below.
Folders and files are those git tracks (the tree a clone gets). The last
tests run each check on a small repository made for the purpose, so each
check is shown to fail on the fault it looks for.
"""
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
# Folders whose every folder the map must list (besides the top level).
MAPPED_PARENTS = ("core", "client", "server")
# Tracked binary inputs that are test fixtures, not outputs.
FIXTURE_FOLDERS = ("tests/fuzz/corpus/",)
OUTPUT = re.compile(r"\.(safetensors|pt|pth|npy|npz|tar|tar\.gz|tgz|xz|zip|whl|so|a|o)$")
MAP_ROW = re.compile(r"^\|\s*`([^`]+/)`\s*\|", re.M)
FLAG_ROW = re.compile(r"^\|\s*`--([a-z][a-z0-9-]*)", re.M)
HELP_FLAG = re.compile(r"^  --([a-z][a-z0-9-]*) \(default", re.M)
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def tracked_files(repo):
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], check=True,
                         capture_output=True).stdout.decode()
    return [f for f in out.split("\0") if f]


def tracked_folders(files):
    """Every folder that holds a tracked file, as 'a/b/'."""
    folders = set()
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            folders.add("/".join(parts[:i]) + "/")
    return folders


def section(text, heading):
    """The body of the '## heading' section of a Markdown text ('' if none)."""
    m = re.search(rf"^## {re.escape(heading)}[ \t]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def map_problems(repo, files):
    folders = tracked_folders(files)
    required = {f for f in folders if f.count("/") == 1 and not f.startswith(".")}
    required |= {f for f in folders
                 if f.count("/") == 2 and f.split("/")[0] in MAPPED_PARENTS}
    readme = (repo / "README.md").read_text(encoding="utf-8")
    listed = set(MAP_ROW.findall(section(readme, "Map")))
    if not listed:
        return ["README.md: no '## Map' table with rows like | `core/` | ... |"]
    problems = [f"README.md map: no row for {f}" for f in sorted(required - listed)]
    problems += [f"README.md map: {f} is not a folder of the tree"
                 for f in sorted(listed - folders)]
    return problems


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(text):
    """The lines of a Markdown text outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def anchors(path):
    seen, result = {}, set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def link_problems(repo, files):
    pages = [p for p in ["README.md"] + [f for f in files if re.fullmatch(r"docs/[^/]+\.md", f)]
             if (repo / p).is_file()]
    problems = []
    for page in pages:
        path = repo / page
        for line in prose_lines(path.read_text(encoding="utf-8")):
            line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                if not dest.exists():
                    problems.append(f"{page}: link to {target}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{page}: link to {target}: no heading with that anchor")
    return problems


def flag_problems(repo, help_text):
    listed = set(HELP_FLAG.findall(help_text))
    # --help itself and what its text names (--helpfull, --version, ...).
    generic = {"help"} | set(re.findall(r"--([a-z][a-z0-9-]*)", help_text))
    doc = repo / "docs" / "daemon.md"
    if not doc.is_file():
        return ["docs/daemon.md is missing"]
    documented = set(FLAG_ROW.findall(section(doc.read_text(encoding="utf-8"), "Flags")))
    problems = [f"docs/daemon.md: tensord --help lists --{f}, the Flags table does not"
                for f in sorted(listed - documented)]
    problems += [f"docs/daemon.md: the Flags table has --{f}, tensord --help does not"
                 for f in sorted(documented - listed - generic)]
    return problems


def output_problems(repo, files):
    problems = []
    for f in files:
        if f.startswith(FIXTURE_FOLDERS):
            continue
        if OUTPUT.search(f):
            problems.append(f"{f}: a build or run output is tracked")
            continue
        path = repo / f
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as stream:
                if stream.read(4) == b"\x7fELF":
                    problems.append(f"{f}: a binary is tracked")
    return problems


# --- the tree as it is --------------------------------------------------------

@pytest.fixture(scope="module")
def files():
    return tracked_files(REPO)


def test_the_readme_map_lists_every_folder(files):
    problems = map_problems(REPO, files)
    assert not problems, "\n".join(problems)


def test_every_link_in_readme_and_docs_resolves(files):
    problems = link_problems(REPO, files)
    assert not problems, "\n".join(problems)


def test_docs_daemon_md_lists_exactly_tensords_flags():
    binary = os.environ.get("TENSORD_BINARY") or pytest.skip(
        "no tensord binary: set TENSORD_BINARY")
    help_text = subprocess.run([binary, "--help"], check=True, capture_output=True,
                               text=True, env={"PATH": os.environ.get("PATH", "")}).stdout
    assert HELP_FLAG.findall(help_text), f"no flags in tensord --help:\n{help_text}"
    problems = flag_problems(REPO, help_text)
    assert not problems, "\n".join(problems)


def test_no_build_or_run_output_is_tracked(files):
    problems = output_problems(REPO, files)
    assert not problems, "\n".join(problems)


# --- each check fails on the fault it looks for --------------------------------

@pytest.fixture
def repo(tmp_path):
    """A small repository whose README and docs pass every check."""
    def write(path, text):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)

    write("README.md", "# t\n\n## Map\n\n| folder | what |\n|---|---|\n"
          "| `core/` | base |\n| `core/cpu/` | the CPU |\n| `docs/` | pages |\n\n"
          "See [the flags](docs/daemon.md#flags) and [a page](docs/daemon.md).\n")
    write("core/cpu/cpu.cc", "")
    write("core/base.h", "")
    write("docs/daemon.md", "# Daemon\n\n## Flags\n\n| flag | default |\n|---|---|\n"
          "| `--listen HOST:PORT` | x |\n\nBack to the [README](../README.md#map).\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    return tmp_path


def add(repo, path, data=b""):
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_bytes(data)
    subprocess.run(["git", "-C", str(repo), "add", path], check=True)


HELP = "Flags:\n  --listen (default \"x\")\n      where\n\n--helpfull lists every flag\n"


def test_the_small_repository_passes(repo):
    files = tracked_files(repo)
    assert map_problems(repo, files) == []
    assert link_problems(repo, files) == []
    assert flag_problems(repo, HELP) == []
    assert output_problems(repo, files) == []


def test_a_folder_without_a_map_row_fails(repo):
    add(repo, "core/cuda/kernel.cu")
    assert map_problems(repo, tracked_files(repo)) == ["README.md map: no row for core/cuda/"]
    add(repo, "bench/b.cc")
    assert "README.md map: no row for bench/" in map_problems(repo, tracked_files(repo))


def test_a_map_row_for_a_missing_folder_fails(repo):
    readme = repo / "README.md"
    readme.write_text(readme.read_text().replace("| `docs/` |", "| `docs/` |\n| `gone/` |"))
    assert map_problems(repo, tracked_files(repo)) == [
        "README.md map: gone/ is not a folder of the tree"]


def test_a_broken_link_or_anchor_fails(repo):
    page = repo / "docs" / "daemon.md"
    page.write_text(page.read_text() + "[x](missing.md) [y](daemon.md#no-such) [z](#flags)\n")
    assert link_problems(repo, tracked_files(repo)) == [
        "docs/daemon.md: link to missing.md: no such file",
        "docs/daemon.md: link to daemon.md#no-such: no heading with that anchor"]


def test_a_flag_missing_from_either_side_fails(repo):
    more = HELP.replace("Flags:\n", "Flags:\n  --port-file (default \"\")\n")
    assert flag_problems(repo, more) == [
        "docs/daemon.md: tensord --help lists --port-file, the Flags table does not"]
    page = repo / "docs" / "daemon.md"
    page.write_text(page.read_text().replace("| `--listen", "| `--gone` | x |\n| `--listen"))
    assert flag_problems(repo, HELP) == [
        "docs/daemon.md: the Flags table has --gone, tensord --help does not"]


def test_a_committed_output_fails(repo):
    add(repo, "cifar_net.safetensors", b"{}")
    add(repo, "tools/prog", b"\x7fELF\x02\x01")
    add(repo, "tests/fuzz/corpus/Run/seed.npy", b"x")
    assert output_problems(repo, tracked_files(repo)) == [
        "cifar_net.safetensors: a build or run output is tracked",
        "tools/prog: a binary is tracked"]
