//! HAProxy itself checks the generated configurations (`haproxy -c -f`): the map is
//! read, every backend the map names exists. Skipped, saying so, where `haproxy` is
//! not installed (`make apt` installs it: mk/farm.mk).

use std::path::Path;
use std::process::Command;

use shortfirst_core::dispatch::sita_e_cutoffs;
use shortfirst_farm::docroot::scan;
use shortfirst_farm::haproxy::{config_text, map_text, Balance, Farm};
use shortfirst_farm::write_atomically;

fn haproxy() -> Option<&'static str> {
    let ok = Command::new("haproxy").arg("-v").output().is_ok_and(|o| o.status.success());
    ok.then_some("haproxy")
}

#[test]
fn haproxy_checks_every_generated_config() {
    let Some(bin) = haproxy() else {
        eprintln!("SKIPPED: haproxy is not installed (apt-get install haproxy; see mk/farm.mk)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir_all(root.join("docs")).unwrap();
    for (name, size) in
        [("index.html", 300usize), ("small.bin", 2_000), ("docs/mid.bin", 50_000), ("big file.bin", 3_000_000)]
    {
        std::fs::write(root.join(name), vec![b'x'; size]).unwrap();
    }
    let found = scan(&root, 100).unwrap();
    let mut sizes: Vec<(u64, u64)> = found.entries.iter().map(|e| (e.size_bytes, 1)).collect();
    for hosts in [2usize, 3] {
        let map_path = dir.path().join(format!("sizes{hosts}.map"));
        let farm = Farm {
            listen: "127.0.0.1:18080".into(),
            hosts: (0..hosts).map(|i| format!("127.0.0.1:{}", 18081 + i)).collect(),
            cutoffs: sita_e_cutoffs(&mut sizes, hosts).unwrap(),
            map_path: map_path.to_str().unwrap().into(),
            stats_socket: Some(dir.path().join("admin.sock").to_str().unwrap().into()),
        };
        write_atomically(&map_path, map_text(&farm, &found.entries).unwrap().as_bytes()).unwrap();
        for balance in Balance::ALL {
            let cfg = dir.path().join(format!("{}-{hosts}.cfg", balance.name()));
            write_atomically(&cfg, config_text(&farm, balance).unwrap().as_bytes()).unwrap();
            check(bin, &cfg);
        }
    }
    // And HAProxy does refuse the same configuration with its map missing (the check can fail).
    let good = std::fs::read_to_string(dir.path().join("sita-2.cfg")).unwrap();
    let missing = good.replace(dir.path().join("sizes2.map").to_str().unwrap(), "/nonexistent/sizes.map");
    assert_ne!(missing, good);
    let broken = dir.path().join("broken.cfg");
    std::fs::write(&broken, missing).unwrap();
    let out = Command::new(bin).arg("-c").arg("-f").arg(&broken).output().unwrap();
    assert!(!out.status.success(), "haproxy accepted a config with a missing map");
}

fn check(bin: &str, cfg: &Path) {
    let out = Command::new(bin).arg("-c").arg("-f").arg(cfg).output().unwrap();
    assert!(
        out.status.success(),
        "haproxy -c -f {}: {}\n{}\n--- config ---\n{}",
        cfg.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(cfg).unwrap()
    );
}
