//! Path traversal: a table of nasty targets, all refused, and nothing outside
//! the root ever served; symlinks leading out refused unless allowed.

mod common;

use common::{get, req, Raw, TestServer};

const SECRET: &[u8] = b"TOP-SECRET";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nasty_targets_are_all_refused() {
    let mut s = TestServer::start(|_| {}).await;
    let outside = s.dir.path().to_path_buf();
    // Symlinks: out of the root (relative, absolute, a directory), and one inside.
    std::os::unix::fs::symlink("../secret.txt", s.root.join("rel-link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), s.root.join("abs-link")).unwrap();
    std::os::unix::fs::symlink(&outside, s.root.join("dir-link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", s.root.join("passwd")).unwrap();
    std::os::unix::fs::symlink("small.txt", s.root.join("inside-link")).unwrap();
    std::os::unix::fs::symlink("sub/../../secret.txt", s.root.join("sneaky-link")).unwrap();
    let secret_abs = outside.join("secret.txt");
    let nasty: Vec<String> = vec![
        "/../secret.txt".into(),
        "/../../../../etc/passwd".into(),
        "/sub/../../secret.txt".into(),
        "/%2e%2e/secret.txt".into(),
        "/%2E%2E/secret.txt".into(),
        "/.%2e/secret.txt".into(),
        "/sub/%2e%2e/%2e%2e/secret.txt".into(),
        "/..%2fsecret.txt".into(),
        "/..%2Fsecret.txt".into(),
        "/sub%2f..%2f..%2fsecret.txt".into(),
        "/%252e%252e/secret.txt".into(),
        "/..\\secret.txt".into(),
        "/secret.txt%00.html".into(),
        "/small.txt%00".into(),
        "/%".into(),
        "/%zz".into(),
        "//../secret.txt".into(),
        "/./../secret.txt".into(),
        "/rel-link".into(),
        "/abs-link".into(),
        "/dir-link/secret.txt".into(),
        "/dir-link/root/small.txt".into(),
        "/passwd".into(),
        "/sneaky-link".into(),
        format!("/{}", secret_abs.display()),
        "http://t/../secret.txt".into(),
        "/proc/self/root/etc/passwd".into(),
        "/dev/zero".into(),
    ];
    for target in &nasty {
        let mut c = Raw::connect(s.addr).await;
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes()).await;
        let r = c.response(false).await.unwrap_or_else(|| panic!("{target}: no response"));
        assert!(matches!(r.status, 400 | 403 | 404), "{target} got {}", r.status);
        assert!(!r.body.windows(SECRET.len()).any(|w| w == SECRET), "{target} leaked the secret");
        assert!(!r.body.starts_with(b"root:"), "{target} leaked /etc/passwd");
    }
    // A symlink that stays inside the root is served.
    let r = get(s.addr, &req("/inside-link")).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, common::pattern(100));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_out_of_root_only_when_allowed() {
    let mut s = TestServer::start(|c| c.follow_symlinks_outside_root = true).await;
    std::os::unix::fs::symlink("../secret.txt", s.root.join("rel-link")).unwrap();
    let r = get(s.addr, &req("/rel-link")).await.unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"TOP-SECRET\n"[..]));
    // `..` in the target is still refused: the option is about symlinks only.
    assert_eq!(get(s.addr, &req("/../secret.txt")).await.unwrap().status, 400);
    s.stop().await;
}
