//! The spinning dispatcher's waits: timer threshold, stop, CPU share, and
//! noticing a competitor on its CPU.

use super::contention::{current_cpu, Contention, CpuIdle, PRESSURE_WINDOW};
use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Runs `f` on a single-threaded runtime, as the spinning dispatcher does.
fn on_runtime<T>(f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, f)
}

const SPIN: Duration = Duration::from_millis(2);

/// Taken by every test that spins: two spinners on one CPU would each see
/// the other as contention and use half the CPU the CPU-share test measures.
static SPINNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn spinning() -> std::sync::MutexGuard<'static, ()> {
    SPINNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A wait no longer than the spin never arms the timer; a longer one
/// arms it once and busy-waits at most `spin`; neither returns early.
#[test]
fn spin_threshold() {
    let _one_at_a_time = spinning();
    on_runtime(async {
        let timer = TimerFd::new().unwrap();
        let mut st = SpinStats::default();
        let due = Instant::now() + Duration::from_micros(500);
        assert!(wait_spinning(&timer, due, SPIN, false, &|| false, &mut st, &mut Duration::default()).await.unwrap());
        assert!(Instant::now() >= due);
        assert_eq!((st.waits, st.timer_sleeps, st.contended_waits), (1, 0, 0));
        assert!(st.spin_s <= 500e-6, "{st:?}");

        let mut st = SpinStats::default();
        let due = Instant::now() + Duration::from_millis(30);
        assert!(wait_spinning(&timer, due, SPIN, false, &|| false, &mut st, &mut Duration::default()).await.unwrap());
        assert!(Instant::now() >= due);
        assert_eq!((st.waits, st.timer_sleeps), (1, 1));
        assert!(st.spin_s <= SPIN.as_secs_f64(), "{st:?}");

        // Contended: even a short wait sleeps, and nothing is spun.
        let mut st = SpinStats::default();
        let due = Instant::now() + Duration::from_micros(500);
        assert!(wait_spinning(&timer, due, SPIN, true, &|| false, &mut st, &mut Duration::default()).await.unwrap());
        assert!(Instant::now() >= due);
        assert_eq!((st.waits, st.timer_sleeps, st.contended_waits, st.spin_s), (1, 1, 1, 0.0));
    });
}

/// A stop is noticed during a long sleep (within one STOP_CHECK slice,
/// not at the end of the wait) and during the spin.
#[test]
fn spin_notices_stop() {
    let _one_at_a_time = spinning();
    on_runtime(async {
        let timer = TimerFd::new().unwrap();
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                flag.store(true, Ordering::Relaxed);
            })
        };
        let mut st = SpinStats::default();
        let t0 = Instant::now();
        let stop = || flag.load(Ordering::Relaxed);
        let due = t0 + Duration::from_secs(60);
        assert!(!wait_spinning(&timer, due, SPIN, false, &stop, &mut st, &mut Duration::default()).await.unwrap());
        assert!(t0.elapsed() < Duration::from_secs(30), "stop noticed only after {:?}", t0.elapsed());
        setter.join().unwrap();
        // Within the spin: no timer, and it returns without waiting for `due`.
        let mut st = SpinStats::default();
        let due = Instant::now() + Duration::from_millis(1);
        assert!(!wait_spinning(&timer, due, SPIN, false, &|| true, &mut st, &mut Duration::default()).await.unwrap());
        assert_eq!(st.timer_sleeps, 0);
    });
}

/// At a low rate the spinner sleeps most of the time: 40 waits 10 ms
/// apart with a 1 ms spin cost about a tenth of the thread's time (a
/// spinner that never slept would use all of it).
#[test]
fn spin_cpu_share_at_low_rate() {
    let _one_at_a_time = spinning();
    let spin = Duration::from_millis(1);
    let (st, cpu, wall) = on_runtime(async {
        let timer = TimerFd::new().unwrap();
        let mut st = SpinStats::default();
        let (cpu0, t0) = (thread_cpu_time(), Instant::now());
        for i in 1..=40u32 {
            assert!(wait_spinning(
                &timer,
                t0 + Duration::from_millis(10) * i,
                spin,
                false,
                &|| false,
                &mut st,
                &mut Duration::default()
            )
            .await
            .unwrap());
        }
        (st, thread_cpu_time().saturating_sub(cpu0), t0.elapsed())
    });
    assert_eq!(st.waits, 40);
    assert!(st.timer_sleeps >= 39, "{st:?}");
    assert!(st.spin_s <= 40.0 * spin.as_secs_f64(), "{st:?}");
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    assert!(share < 0.5, "spinning thread used {share:.2} of its wall time ({st:?})");
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and
    // sched_setaffinity only read and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// A spinner that shares its CPU with a busy thread turns contended within
/// a few windows and stays so. (That one alone on its CPU stays
/// uncontended is not asserted: other tests and jobs share the CPU in
/// `cargo test`.) Needs the cpuidle driver's counters (skipped without
/// them, with a message).
#[test]
fn spinner_notices_a_competitor_on_its_cpu() {
    let _one_at_a_time = spinning();
    let Some(cpu) = current_cpu() else { return };
    assert!(pin_to(cpu), "pin the spinner");
    if CpuIdle::open().is_none() {
        eprintln!("skipped: no cpuidle counters for CPU {cpu}");
        return;
    }
    let spin_for = |contention: &mut Contention| {
        on_runtime(async {
            let timer = TimerFd::new().unwrap();
            let mut st = SpinStats::default();
            let mut judged = Vec::new();
            let t0 = Instant::now();
            for i in 1..=20u32 {
                let due = t0 + PRESSURE_WINDOW * i;
                assert!(wait_spinning(&timer, due, SPIN, false, &|| false, &mut st, &mut contention.slept)
                    .await
                    .unwrap());
                judged.push(contention.contended(Instant::now()));
            }
            judged
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            assert!(pin_to(cpu), "pin the competitor");
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let mut shared = Contention::open();
    let judged_shared = spin_for(&mut shared);
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    assert!(judged_shared[5..].iter().all(|&c| c), "sharing CPU {cpu}: {judged_shared:?}");
}
