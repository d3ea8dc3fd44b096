"""The Debian package (``make deb``, ``deploy/build-deb.sh``) and its systemd units.

The package is built from the release binary as ``make deb`` builds it. The units are
checked offline with ``systemd-analyze`` (no running systemd: ``verify`` on the installed
files, ``security --offline`` with a ceiling on the exposure score); as root the package is
installed into this machine with ``dpkg -i``, every path the units name is checked there,
and ``dpkg -r`` then ``dpkg -P`` must leave nothing of it behind. A machine that already has
a shortfirst package or a ``/usr/bin/shortfirst`` is left alone (the test skips, saying so).
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RELEASE_BIN = REPO / "target" / "release" / "shortfirst"
UNITS_DIR = REPO / "deploy" / "systemd"
UNITS = sorted(p.name for p in UNITS_DIR.glob("*.service"))
#: Highest `systemd-analyze security` exposure accepted, in its tenths (20 = 2.0; 2.5 and below is "OK").
EXPOSURE_CEILING = 20
INSTALLED_UNITS = Path("/lib/systemd/system")
#: Unit settings whose value starts with a path that must exist once installed.
PATH_SETTINGS = ("ExecStart", "ExecStartPre", "ExecStop", "ExecReload", "EnvironmentFile")


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: `make apt` installs it (mk/deb.mk, APT_PACKAGES)")
    return path


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    """The package, built by the script `make deb` runs."""
    if not RELEASE_BIN.exists():
        pytest.fail(f"{RELEASE_BIN} is missing: `make build` builds it")
    need("dpkg-deb")
    out = tmp_path_factory.mktemp("deb")
    done = subprocess.run(
        [str(REPO / "deploy" / "build-deb.sh"), str(RELEASE_BIN), str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.parent == out, done.stdout
    return path


def unit_settings(text: str) -> list[tuple[str, str]]:
    """(key, value) of every assignment in a unit file, in order."""
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not an assignment: {line!r}"
        pairs.append((key.strip(), value.strip()))
    return pairs


def named_paths(text: str) -> set[str]:
    """Absolute paths a unit runs or reads: its commands, environment files and the
    `--config` files it passes."""
    paths = set()
    for key, value in unit_settings(text):
        if key not in PATH_SETTINGS:
            continue
        words = shlex.split(value.lstrip("-@+!:"))
        if words[0].startswith("/"):
            paths.add(words[0])
        for flag, arg in zip(words, words[1:], strict=False):
            if flag == "--config":
                paths.add(arg)
    return paths


def test_package_metadata_and_contents(deb):
    info = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
    fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", info, re.M))
    assert fields["Package"] == "shortfirst"
    assert re.fullmatch(r"\d+\.\d+\.\d+", fields["Version"]), fields
    assert "libc6 (>= 2." in fields["Depends"] and "adduser" in fields["Depends"], fields
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True).stdout
    files = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    expected = {"/usr/bin/shortfirst", "/usr/share/shortfirst/grafana/shortfirst.json"}
    expected |= {f"/lib/systemd/system/{u}" for u in UNITS}
    expected |= {f"/etc/shortfirst/{p.name}" for p in (REPO / "deploy" / "etc").iterdir()}
    assert expected <= files, sorted(expected - files)
    conffiles = subprocess.run(
        ["dpkg-deb", "-I", str(deb), "conffiles"], check=True, capture_output=True, text=True
    ).stdout.split()
    assert sorted(conffiles) == sorted(f for f in files if f.startswith("/etc/") and not f.endswith("/"))
    for unit in UNITS:
        for path in named_paths((UNITS_DIR / unit).read_text()):
            assert path in files or Path(path).exists(), (
                f"{unit} names {path}, which neither the package nor the system has"
            )


@pytest.mark.parametrize("unit", UNITS)
def test_unit_exposure_below_ceiling(unit):
    need("systemd-analyze")
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", f"--threshold={EXPOSURE_CEILING}", unit],
        cwd=UNITS_DIR,
        capture_output=True,
        text=True,
    )
    score = re.search(r"Overall exposure level for \S+: ([\d.]+)", done.stdout)
    assert score, done.stdout + done.stderr
    assert done.returncode == 0, (
        f"{unit}: exposure {score.group(1)} over {EXPOSURE_CEILING / 10}\n{done.stdout}"
    )


def test_only_band_units_hold_net_admin():
    holders = {
        u
        for u in UNITS
        for key, value in unit_settings((UNITS_DIR / u).read_text())
        if key in ("AmbientCapabilities", "CapabilityBoundingSet") and "CAP_NET_ADMIN" in value.split()
    }
    assert holders == {"shortfirst-serve-bands.service", "shortfirst-uplink.service"}


def installed_state() -> str | None:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "shortfirst"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 and done.stdout.strip() != "unknown ok not-installed" else None


def run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, f"{shlex.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: installs the package with dpkg (CI runs as root)")
def test_package_installs_verifies_and_removes_cleanly(deb):
    if installed_state() is not None or Path("/usr/bin/shortfirst").exists():
        pytest.skip("this machine has a shortfirst package or /usr/bin/shortfirst already: not touching it")
    need("systemd-analyze")
    run(["dpkg", "-i", str(deb)])
    try:
        owned = set(run(["dpkg", "-L", "shortfirst"]).split())
        assert pwd.getpwnam("shortfirst").pw_shell in ("/usr/sbin/nologin", "/bin/false")
        version = run(["/usr/bin/shortfirst", "--version"])
        assert "shortfirst" in version
        for unit in UNITS:
            installed = INSTALLED_UNITS / unit
            assert installed.read_text() == (UNITS_DIR / unit).read_text()
            for path in named_paths(installed.read_text()):
                assert Path(path).exists(), f"{unit} names {path}, missing after install"
                if path.startswith("/etc/shortfirst/"):
                    assert path in owned, f"{path} is not the package's"
        run(["systemd-analyze", "verify", *(str(INSTALLED_UNITS / u) for u in UNITS)])
        run(["dpkg", "-r", "shortfirst"])
        assert installed_state().startswith("deinstall ok config-files"), installed_state()
        left = [p for p in owned if Path(p).is_file()]
        assert sorted(left) == sorted(p for p in owned if p.startswith("/etc/shortfirst/")), left
    finally:
        subprocess.run(["dpkg", "-P", "shortfirst"], capture_output=True)
    assert installed_state() is None
    assert not [p for p in owned if Path(p).is_file()]
    assert not Path("/etc/shortfirst").exists()
