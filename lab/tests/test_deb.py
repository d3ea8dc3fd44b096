"""The Debian package (``make deb``, ``deploy/build-deb.sh``) and its systemd units.

The package is built from the release binary as ``make deb`` builds it. The units are
checked offline with ``systemd-analyze`` (no running systemd: ``verify`` on the installed
files, ``security --offline`` with a ceiling on the exposure score); as root the package is
installed into this machine with ``dpkg -i``, every path the units name is checked there,
each unit's commands run as systemd would run them (its user, its capabilities, in a
network namespace: serve on port 80, the band tree set up and torn down, the gatekeeper),
and ``dpkg -r`` then ``dpkg -P`` must leave nothing of it behind. A machine that already has
a shortfirst package or a ``/usr/bin/shortfirst`` is left alone (the test skips, saying so).
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest import BIN

REPO = Path(__file__).resolve().parents[2]
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
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: `make build` builds it")
    need("dpkg-deb")
    out = tmp_path_factory.mktemp("deb")
    done = subprocess.run(
        [str(REPO / "deploy" / "build-deb.sh"), str(BIN), str(out)],
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
        start_and_stop_installed_units()
        run(["dpkg", "-r", "shortfirst"])
        assert installed_state().startswith("deinstall ok config-files"), installed_state()
        left = [p for p in owned if Path(p).is_file()]
        assert sorted(left) == sorted(p for p in owned if p.startswith("/etc/shortfirst/")), left
    finally:
        subprocess.run(["dpkg", "-P", "shortfirst"], capture_output=True)
    assert installed_state() is None
    assert not [p for p in owned if Path(p).is_file()]
    assert not Path("/etc/shortfirst").exists()


# -- the installed units, started as systemd would (there is none running here) -------------
#
# Each unit's commands run as written in the installed file, as its User and Group with
# exactly its AmbientCapabilities (setpriv, no new privileges), in a network namespace
# whose uplink device is called eth0 as in the installed /etc/shortfirst/uplink.env.
# Only the document root is given on the command line (`--root`; flags win over the
# configuration file), since /srv/www is the operator's; LogsDirectory is made as systemd
# makes it.

NETNS = "sf-deb-test"


def unit_environment(text: str) -> dict[str, str]:
    env = {}
    for key, value in unit_settings(text):
        if key == "EnvironmentFile":
            for line in Path(value.lstrip("-")).read_text().splitlines():
                name, sep, val = line.partition("=")
                if sep and not line.lstrip().startswith("#"):
                    env[name.strip()] = val.strip()
    return env


def unit_argv(text: str, key: str) -> list[str]:
    """The command of `key`, expanded as systemd does: ``${NAME}`` one word, ``$NAME`` split."""
    env = unit_environment(text)
    (value,) = [v for k, v in unit_settings(text) if k == key]
    argv = []
    for word in shlex.split(value):
        if re.fullmatch(r"\$\w+", word):
            argv += env.get(word[1:], "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word))
    return argv


def as_unit(text: str, argv: list[str]) -> list[str]:
    """`argv` in the namespace as the unit's user with only the unit's capabilities."""
    settings = dict(unit_settings(text))
    caps = "".join(
        f",+{c.removeprefix('CAP_').lower()}" for c in settings.get("AmbientCapabilities", "").split()
    )
    return [
        *("ip", "netns", "exec", NETNS, "setpriv", "--reuid", settings["User"], "--regid", settings["Group"]),
        *("--clear-groups", "--no-new-privs", f"--inh-caps=-all{caps}", f"--ambient-caps=-all{caps}"),
        *(f"--bounding-set=-all{caps}", "--", *argv),
    ]


def ns_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET inside the namespace; status 0: no answer."""
    argv = ["ip", "netns", "exec", NETNS, "curl", "-s", "-m", "5", "-o", "-", "-w", "\n%{http_code}", url]
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    body, _, status = out.rpartition("\n")
    return int(status or 0), body


def wait_answer(url: str, proc: subprocess.Popen) -> None:
    for _ in range(100):
        assert proc.poll() is None, f"{proc.args[-4:]} exited with {proc.returncode}: {proc.stderr.read()}"
        if ns_get(url)[0]:
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing answers {url}")


def start_unit(unit: str, *extra: str) -> tuple[str, subprocess.Popen]:
    text = (INSTALLED_UNITS / unit).read_text()
    proc = subprocess.Popen(
        as_unit(text, unit_argv(text, "ExecStart") + list(extra)), stderr=subprocess.PIPE, text=True
    )
    return text, proc


def stop_unit(proc: subprocess.Popen) -> None:
    """ExecReload (SIGHUP) must leave it serving; SIGTERM, systemd's stop, must end it cleanly."""
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    assert proc.poll() is None, f"{proc.args[-4:]} died on SIGHUP: {proc.stderr.read()}"
    proc.terminate()
    assert proc.wait(timeout=30) == 0, f"{proc.args[-4:]}: exit {proc.returncode}: {proc.stderr.read()}"


def check_serve_unit(unit: str, docroot: Path) -> None:
    text, proc = start_unit(unit, "--root", str(docroot))
    try:
        wait_answer("http://127.0.0.1:80/", proc)
        assert ns_get("http://127.0.0.1:80/index.html") == (200, "hello\n")
        status, metrics = ns_get("http://127.0.0.1:9181/metrics")
        assert status == 200 and "shortfirst_requests_total" in metrics
        stop_unit(proc)
    finally:
        proc.kill()
        proc.wait()
    log = Path("/var/log/shortfirst/access.log").read_text()
    assert "GET /index.html" in log, log


def start_and_stop_installed_units() -> None:
    # Not under pytest's tmp_path: its parents are closed to other users.
    docroot = Path(tempfile.mkdtemp(prefix="shortfirst-deb-www-"))
    docroot.chmod(0o755)
    (docroot / "index.html").write_text("hello\n")
    logs = Path("/var/log/shortfirst")  # LogsDirectory=shortfirst; `dpkg -P` removes it
    logs.mkdir(mode=0o750, exist_ok=True)
    shutil.chown(logs, "shortfirst", "shortfirst")
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)
    run(["ip", "netns", "add", NETNS])
    try:
        run(["ip", "-n", NETNS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"])
        for dev in ("lo", "eth0", "eth1"):
            run(["ip", "-n", NETNS, "link", "set", dev, "up"])
        check_serve_unit("shortfirst-serve.service", docroot)
        # The bands: shortfirst-uplink.service's ExecStart, the server, then its ExecStop.
        uplink = (INSTALLED_UNITS / "shortfirst-uplink.service").read_text()
        run(as_unit(uplink, unit_argv(uplink, "ExecStart")))
        assert "htb" in run(["ip", "netns", "exec", NETNS, "tc", "qdisc", "show", "dev", "eth0"])
        check_serve_unit("shortfirst-serve-bands.service", docroot)
        run(as_unit(uplink, unit_argv(uplink, "ExecStop")))
        assert "htb" not in run(["ip", "netns", "exec", NETNS, "tc", "qdisc", "show", "dev", "eth0"])
        text, proc = start_unit("shortfirst-gatekeeper.service")
        try:
            wait_answer("http://127.0.0.1:9182/healthz", proc)
            # Nothing listens on the configured upstream: the gatekeeper itself answers.
            assert ns_get("http://127.0.0.1:8000/")[0] == 502
            stop_unit(proc)
        finally:
            proc.kill()
            proc.wait()
    finally:
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)
        shutil.rmtree(docroot)
