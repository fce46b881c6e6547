"""tools/build_image.py: what decides a rebuild (the cache keys), and the commands it runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_image", ROOT / "tools" / "build_image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tool = load_tool()
IMAGE = tool.ImageName("kondor", "0.1.0")


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A build context with the project's own .dockerignore."""
    write(
        tmp_path,
        {
            ".dockerignore": (ROOT / ".dockerignore").read_text(),
            "Dockerfile": "FROM base\n",
            "pyproject.toml": "[project]\n",
            "README.md": "readme\n",
            "core/kondor_core/__init__.py": "",
            "agent/kondor_agent/fetchwork.py": "import httpx\n",
            "tools/check_imports.py": "checker\n",
            "tools/fetch_helm.py": "not copied\n",
            "tests/unit/test_x.py": "a test\n",
            "devcluster/kondor_devcluster/cli.py": "not in the image\n",
            "core/kondor_core/__pycache__/x.cpython-311.pyc": "bytecode",
            ".venv/bin/python": "venv",
            "kondor.egg-info/PKG-INFO": "metadata",
        },
    )
    return tmp_path


def test_the_inputs_are_the_recipe_and_what_the_dockerignore_lets_in(context: Path) -> None:
    assert tool.build_inputs(context) == [
        ".dockerignore",
        "Dockerfile",
        "README.md",
        "agent/kondor_agent/fetchwork.py",
        "core/kondor_core/__init__.py",
        "pyproject.toml",
        "tools/check_imports.py",
    ]


def test_the_repositorys_context_holds_the_runtime_sources_and_the_checker() -> None:
    files = set(tool.build_inputs(ROOT))
    assert {"Dockerfile", "pyproject.toml", "tools/check_imports.py"} <= files
    assert "agent/kondor_agent/fetchwork.py" in files
    roots = {path.split("/")[0] for path in files}
    assert roots == {"Dockerfile", ".dockerignore", "README.md", "pyproject.toml"} | {
        "core",
        "kube",
        "operator",
        "agent",
        "cli",
        "tools",
    }
    assert not any("__pycache__" in path or path.endswith(".pyc") for path in files)


@pytest.mark.parametrize(
    ("changed", "rebuilds"),
    [
        ("agent/kondor_agent/fetchwork.py", True),
        ("Dockerfile", True),
        ("pyproject.toml", True),
        ("tools/check_imports.py", True),
        ("tests/unit/test_x.py", False),
        ("devcluster/kondor_devcluster/cli.py", False),
        ("tools/fetch_helm.py", False),
        ("core/kondor_core/__pycache__/x.cpython-311.pyc", False),
        (".venv/bin/python", False),
    ],
)
def test_the_image_key_changes_with_exactly_the_copied_inputs(
    context: Path, changed: str, rebuilds: bool
) -> None:
    before = tool.image_key("base", tool.context_digest(context), "recipe", IMAGE)
    path = context / changed
    path.write_text(path.read_text() + "# edited\n")
    after = tool.image_key("base", tool.context_digest(context), "recipe", IMAGE)
    assert (before != after) is rebuilds


def test_the_image_key_follows_its_base_and_the_recipe(context: Path) -> None:
    digest = tool.context_digest(context)
    key = tool.image_key("base-a", digest, "recipe", IMAGE)
    assert key == tool.image_key("base-a", digest, "recipe", IMAGE)
    assert key != tool.image_key("base-b", digest, "recipe", IMAGE)
    assert key != tool.image_key("base-a", digest, "recipe, edited", IMAGE)
    # An executable bit is part of what is copied.
    (context / "README.md").chmod(0o755)
    assert tool.context_digest(context) != digest


def test_the_base_key_follows_the_apt_sources_and_names_the_tag() -> None:
    key = tool.base_key("deb http://deb.debian.org/debian bookworm main")
    assert key == tool.base_key("deb http://deb.debian.org/debian bookworm main")
    assert key != tool.base_key("deb http://mirror.example/debian bookworm main")
    assert key != tool.base_key("same", packages=("python3",)) != tool.base_key("same")
    assert tool.base_tag(key) == f"localhost/kondor-base:bookworm-{key[:12]}"


def test_the_archive_holds_the_reference_a_pods_image_resolves_to(tmp_path: Path) -> None:
    cache = tool.ImageCache(tmp_path / "image")
    assert IMAGE.reference == "docker.io/library/kondor:0.1.0"
    assert cache.archive(IMAGE) == tmp_path / "image" / "kondor-0.1.0.oci.tar"
    push = tool.push_command(cache, IMAGE, Path("/out/k.tar"))
    assert push[-2:] == ["kondor:0.1.0", "oci-archive:/out/k.tar:docker.io/library/kondor:0.1.0"]
    assert tool.project_image() == IMAGE  # pyproject's name and version


def test_buildah_keeps_its_storage_in_the_cache_and_builds_the_one_dockerfile(
    tmp_path: Path,
) -> None:
    cache = tool.ImageCache(tmp_path / "image")
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    command = tool.bud_command(cache, IMAGE, "localhost/kondor-base:bookworm-abc", ROOT, ca)
    assert command[:4] == [
        "buildah",
        f"--root={tmp_path}/image/storage",
        f"--runroot={tmp_path}/image/run",
        "--storage-driver=overlay",
    ]
    assert command[4] == "bud"
    for flag in (
        "--isolation=chroot",
        "--network=host",
        "--pull-never",
        "--layers",
        "--build-arg=PYTHON_IMAGE=localhost/kondor-base:bookworm-abc",
        "--tag=kondor:0.1.0",
        f"--file={ROOT / 'Dockerfile'}",
    ):
        assert flag in command
    # The host's CA bundle is a read-only mount of the RUN steps, never a layer.
    assert command[command.index("-v") + 1] == f"{ca}:{ca}:ro"
    assert command[-1] == str(ROOT)
    without = tool.bud_command(cache, IMAGE, "b", ROOT, None)
    assert "-v" not in without


def test_the_base_is_debian_minbase_with_what_the_python_image_offers() -> None:
    command = tool.mmdebstrap_command(Path("/t/rootfs.tar"), Path("/etc/apt/x.sources"))
    assert command[:2] == ["mmdebstrap", "--variant=minbase"]
    included = command[2].removeprefix("--include=").split(",")
    assert {"python3", "python3-venv", "libstdc++6", "zlib1g", "ca-certificates"} <= set(included)
    assert command[-3:] == ["bookworm", "/t/rootfs.tar", "/etc/apt/x.sources"]
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in command
    assert tool.mmdebstrap_command(Path("/t"), None)[-1] == tool.DEFAULT_MIRROR


def test_an_unchanged_image_is_not_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tool.ImageCache(tmp_path / "image")
    runs: list[str] = []

    def fake_run(command: list[str], what: str, **_: object) -> str:
        runs.append(what)
        if command[:1] == ["buildah"] and "push" in command:
            Path(command[-1].split(":")[1]).write_bytes(b"archive")
        return "container\n"

    monkeypatch.setattr(tool, "ensure_tools", lambda: None)
    monkeypatch.setattr(tool, "ensure_base", lambda _cache: "localhost/kondor-base:bookworm-k")
    monkeypatch.setattr(tool, "_run", fake_run)
    monkeypatch.setattr(
        tool, "_quiet", lambda command: subprocess.CompletedProcess(command, 1, "", "")
    )
    cache.root.mkdir(parents=True)
    archive = tool.build(cache, ROOT)
    assert archive == cache.archive(IMAGE)
    assert archive.read_bytes() == b"archive"
    assert runs[0] == "buildah bud kondor:0.1.0"
    assert "imports in the runtime image" in runs
    assert runs[-1] == "buildah push docker.io/library/kondor:0.1.0"
    runs.clear()
    assert tool.build(cache, ROOT) == archive
    assert runs == [], "the second build ran commands although nothing changed"
    # A different base (its inputs changed) builds the image again.
    monkeypatch.setattr(tool, "ensure_base", lambda _cache: "localhost/kondor-base:bookworm-j")
    tool.build(cache, ROOT)
    assert runs[0] == "buildah bud kondor:0.1.0"


def test_the_cache_follows_kondor_cache_dir() -> None:
    assert tool.cache_root({"KONDOR_CACHE_DIR": "/ci/cache"}) == Path("/ci/cache")
    assert tool.cache_root({"HOME": "/home/u"}) == Path("/home/u/.cache/kondor")
