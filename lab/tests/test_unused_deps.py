"""Tests of scripts/unused_deps.py on small workspaces made in a temporary
directory: what counts as a use, per table, and what is reported."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "unused_deps.py"
unused_deps = load_script("scripts/unused_deps.py", "unused_deps")


def workspace(tmp_path: Path, crates: dict[str, tuple[str, dict[str, str]]], ws_deps: str = "") -> Path:
    """A workspace with `crates`: name -> (manifest tables, {relative path: source})."""
    members = ", ".join(f'"crates/{n}"' for n in crates)
    (tmp_path / "Cargo.toml").write_text(
        f"[workspace]\nmembers = [{members}]\n\n[workspace.dependencies]\n{ws_deps}\n"
    )
    for name, (tables, files) in crates.items():
        d = tmp_path / "crates" / name
        d.mkdir(parents=True)
        (d / "Cargo.toml").write_text(f'[package]\nname = "{name}"\nversion = "0.1.0"\n\n{tables}\n')
        for rel, text in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)
    return tmp_path


def test_used_dependencies_pass(tmp_path):
    root = workspace(
        tmp_path,
        {
            "a": (
                '[dependencies]\nserde-json = "1"\nlibc = "0.2"\nfoo = "1"\n'
                '[dev-dependencies]\ntempfile = "3"\n[build-dependencies]\ncc = "1"\n',
                {
                    "src/lib.rs": "use foo;\nfn f() { let _ = serde_json::to_string(&1); }\n",
                    "src/sys.rs": "unsafe fn g() { libc::getpid(); }\n",
                    "tests/t.rs": "fn t() { tempfile::tempdir(); }\n",
                    "build.rs": "fn main() { cc::Build::new(); }\n",
                },
            )
        },
    )
    assert unused_deps.unused_in_workspace(root) == []
    assert unused_deps.main(["x", str(root)]) == 0


def test_each_unused_dependency_is_named_with_its_crate_and_table(tmp_path):
    root = workspace(
        tmp_path,
        {
            "a": (
                '[dependencies]\nrand_distr = "0.4"\nsocket2 = "0.5"\n[dev-dependencies]\nproptest = "1"\n',
                # A name in a comment, string or longer path is no use; a
                # normal dependency used only by a test belongs in dev-dependencies.
                {
                    "src/lib.rs": (
                        '// rand_distr::Exp\nconst S: &str = "proptest::x";\nfn f() { my_rand_distr::x(); }\n'
                    ),
                    "tests/t.rs": "fn t() { socket2::SockRef::from(&s); }\n",
                },
            )
        },
    )
    found = unused_deps.unused_in_workspace(root)
    assert found == [
        "crates/a/Cargo.toml: [dependencies] rand_distr",
        "crates/a/Cargo.toml: [dependencies] socket2",
        "crates/a/Cargo.toml: [dev-dependencies] proptest",
    ]


def test_comment_only_use_is_not_a_use(tmp_path):
    # `// rand_distr::Exp` matches the path pattern: comments are stripped
    # before searching.
    root = workspace(
        tmp_path, {"a": ('[dependencies]\nrand_distr = "0.4"\n', {"src/lib.rs": "// rand_distr::Exp\n"})}
    )
    assert unused_deps.unused_in_workspace(root) == ["crates/a/Cargo.toml: [dependencies] rand_distr"]


def test_workspace_dependency_no_member_takes(tmp_path):
    root = workspace(
        tmp_path,
        {
            "a": (
                "[dependencies]\nlibc = { workspace = true }\n",
                {"src/lib.rs": "fn f() { libc::getpid(); }\n"},
            )
        },
        ws_deps='libc = "0.2"\nnix = "0.29"\n',
    )
    assert unused_deps.unused_in_workspace(root) == [
        "Cargo.toml: [workspace.dependencies] nix (no member takes it)"
    ]


def test_ignored_dependency_and_macro_use(tmp_path):
    root = workspace(
        tmp_path,
        {
            "a": (
                '[package.metadata.unused-deps]\nignored = ["features-only"]\n\n'
                '[dependencies]\nfeatures-only = "1"\n[dev-dependencies]\nproptest = "1"\n',
                {"src/lib.rs": "#[cfg(test)]\nmod t { use proptest::prelude::*; }\n"},
            )
        },
    )
    assert unused_deps.unused_in_workspace(root) == []


def test_command_line_fails_and_names_the_dependency(tmp_path):
    root = workspace(tmp_path, {"a": ('[dependencies]\nnix = "0.29"\n', {"src/lib.rs": ""})})
    r = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "crates/a/Cargo.toml: [dependencies] nix" in r.stderr


def test_bad_manifest_is_refused_with_its_path(tmp_path):
    root = workspace(tmp_path, {"a": ("", {"src/lib.rs": ""})})
    (root / "crates/a/Cargo.toml").write_text("[package\n")
    with pytest.raises(SystemExit, match="crates/a/Cargo.toml: not valid TOML"):
        unused_deps.unused_in_workspace(root)


def test_a_bin_outside_src_counts_as_a_use(tmp_path):
    # The fuzz targets live in fuzz_targets/, named by [[bin]] path: a dependency
    # used only there is used; one used nowhere is still named.
    manifest = (
        '[dependencies]\nlibfuzzer-sys = "0.4"\nrand = "0.8"\n\n'
        '[[bin]]\nname = "t"\npath = "fuzz_targets/t.rs"\n'
    )
    files = {
        "src/lib.rs": "pub fn f() {}\n",
        "fuzz_targets/t.rs": "libfuzzer_sys::fuzz_target!(|d: &[u8]| {});\n",
    }
    root = workspace(tmp_path, {"a": (manifest, files)})
    assert unused_deps.unused_in_workspace(root) == ["crates/a/Cargo.toml: [dependencies] rand"]
